// `hpctl convert IN -o OUT`: a capture (.hpr) or an hpctl Firefox profile into Firefox JSON, pprof,
// collapsed stacks, the report, an LLVM sample profile or a symbol order, symbolizing captures on
// this machine.
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "commands.h"
#include "convert_output.h"
#include "hpd/base/output_file.h"
#include "hpd/export/collapsed.h"
#include "hpd/export/firefox.h"
#include "hpd/export/pprof.h"
#include "hpd/export/report.h"
#include "profile_input.h"

namespace hpd::cli {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string guess_output_format(const std::string& output) {
  std::string name = output;
  if (ends_with(name, ".gz")) name.resize(name.size() - 3);
  if (ends_with(name, ".json")) return "firefox";
  if (ends_with(name, ".pb") || ends_with(name, ".pprof") || ends_with(output, ".pb.gz")) return "pprof";
  if (ends_with(name, ".collapsed") || ends_with(name, ".folded") || ends_with(name, ".txt"))
    return "collapsed";
  if (ends_with(output, ".extbinary") || ends_with(output, ".afdo")) return "llvm-sample-binary";
  return "";
}

std::string checked_output_format(const ConvertArgs& args) {
  const std::string format = !args.format.empty() ? args.format : guess_output_format(args.output);
  if (format.empty()) {
    throw std::runtime_error(
        "cannot tell the output format from '" + args.output +
        "'; give --format firefox|pprof|collapsed|report|llvm-sample|llvm-sample-binary|symbol-order "
        "(or end the name in .json.gz, .pb.gz, .collapsed, .extbinary)");
  }
  if (args.output == "-" && (format == "firefox" || format == "pprof" || format == "llvm-sample-binary")) {
    throw std::runtime_error("--format " + format + " needs an output file, not stdout");
  }
  return format;
}

int run_convert(const ConvertArgs& args) {
  const std::string format = checked_output_format(args);
  ModuleSearch symbolize;
  symbolize.debug_dirs = args.debug_dirs;
  symbolize.debuginfod = !args.no_debuginfod;
  LoadedProfile loaded = load_profile(args.input, symbolize);
  if (!args.quiet) print_notes(loaded.notes);
  write_converted(loaded.profile, args, format);
  return 0;
}

void write_converted(const Profile& profile, const ConvertArgs& args, const std::string& format) {
  if (format == "llvm-sample" || format == "llvm-sample-binary" || format == "symbol-order") {
    write_llvm_sample(profile, args, format);
    return;
  }
  if (!args.binary.empty())
    throw std::runtime_error("--binary is for --format llvm-sample, llvm-sample-binary and symbol-order");
  if (format == "firefox") {
    write_firefox_file(profile, args.output);
  } else if (format == "pprof") {
    write_pprof_file(profile, args.output);
  } else if (format == "collapsed") {
    CollapsedOptions options;
    options.weight = args.weight == "cpu"    ? CollapsedWeight::kCpu
                     : args.weight == "wall" ? CollapsedWeight::kWall
                                             : CollapsedWeight::kSamples;
    if (args.per_thread && args.per_process) {
      throw std::runtime_error(
          "--per-thread and --per-process exclude each other (per-thread stacks start with the process)");
    }
    options.per_thread = args.per_thread;
    options.per_process = args.per_process;
    if (args.output == "-") {
      write_collapsed(profile, std::cout, options);
      std::cout.flush();
    } else {
      write_collapsed_file(profile, args.output, options);
    }
  } else if (format == "report") {
    ReportOptions options;
    options.limit = args.limit;
    // Whole names in a file; the terminal's width on one.
    options.width = args.output == "-" ? report_width_for_stdout() : 0;
    const Report report = compute_report(profile, options);
    const bool json = ends_with(args.output, ".json");
    // A file is opened as every output is (hpd::OutputFile) and replaced when the report is complete.
    std::unique_ptr<OutputFile> file;
    if (args.output != "-") file = std::make_unique<OutputFile>(args.output, OutputWrite::kReplace);
    std::ostringstream text;
    std::ostream& out = file ? text : std::cout;
    if (json)
      print_report_json(report, out, options);
    else
      print_report(report, out, options);
    out.flush();
    if (!out) throw std::runtime_error("writing '" + args.output + "' failed");
    if (file) {
      const std::string bytes = text.str();
      file->write(bytes.data(), bytes.size());
      file->commit();
    }
  } else {
    throw std::runtime_error("unknown format '" + format + "'");
  }
  if (!args.quiet && args.output != "-") {
    std::fprintf(stderr, "hpctl: wrote %s (%s, %zu threads)\n", args.output.c_str(), format.c_str(),
                 profile.threads.size());
  }
}

}  // namespace hpd::cli
