// `hpctl report FILE` (flat table, or the callers/callees tree of one function), `hpctl annotate`
// (samples per source line) and `hpctl diff A B` (per-function change) from written profiles.
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <stdexcept>

#include "commands.h"
#include "hpd/export/firefox_reader.h"
#include "hpd/export/report.h"
#include "hpd/export/report_views.h"
#include "profile_input.h"
#include "symbol_api.h"

namespace hpd::cli {
namespace {

ReportSort parse_sort(const std::string& sort) {
  if (sort == "total") return ReportSort::kTotal;
  if (sort == "cpu") return ReportSort::kSelfCpu;
  if (sort == "wall") return ReportSort::kSelfWall;
  if (sort == "calls") return ReportSort::kCalls;
  if (sort == "self") return ReportSort::kSelf;
  throw std::runtime_error("--sort " + sort + ": expected self, total, cpu, wall or calls");
}

ReportOptions filter_options(const ReportFilter& filter, size_t limit) {
  ReportOptions options;
  options.limit = limit;
  options.pid = filter.pid;
  options.tid = filter.tid;
  options.thread = filter.thread;
  if (filter.wide) {
    options.width = 0;  // whole names, lines as long as they are
  } else {
    options.width = filter.width >= 0 ? static_cast<size_t>(filter.width) : report_width_for_stdout();
  }
  return options;
}

}  // namespace

size_t report_width_for_stdout() {
  // COLUMNS when exported (a shell's own is not, unless asked), even into a pipe (`| less`).
  if (const char* columns = std::getenv("COLUMNS"); columns != nullptr) {
    char* end = nullptr;
    const unsigned long n = std::strtoul(columns, &end, 10);
    if (end != columns && *end == '\0' && n > 0 && n < 100000) return n;
  }
  if (isatty(STDOUT_FILENO) == 0) return 0;  // a pipe or a file: whole names, for grep and scripts
  winsize size{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 80;
}

int run_report(const ReportArgs& args) {
  // A capture (.hpr, recognized by its magic, not its name) is symbolized here first.
  LoadedProfile loaded = load_profile(args.input, ModuleSearch{});
  print_notes(loaded.notes);
  const Profile& profile = loaded.profile;
  ReportOptions options = filter_options(args.filter, args.limit);
  options.sort = parse_sort(args.sort);
  options.function = args.function;
  if (!args.callers.empty() || !args.callees.empty()) {
    const bool callers = !args.callers.empty();
    // In a tree, --limit is the depth shown; 0 (the flat report's "all") shows every level.
    options.limit = args.limit_given ? args.limit : 0;
    const CallTreeView view =
        compute_call_tree(profile, options, callers ? args.callers : args.callees,
                          callers ? CallTreeDirection::kCallers : CallTreeDirection::kCallees);
    if (args.json) {
      print_call_tree_json(view, std::cout);
    } else {
      print_call_tree(view, std::cout, options);
    }
    return 0;
  }
  const Report report = compute_report(profile, options);
  if (args.json) {
    print_report_json(report, std::cout, options);
  } else {
    print_report(report, std::cout, options);
  }
  return 0;
}

int run_annotate(const AnnotateArgs& args) {
  LoadedProfile loaded = load_profile(args.input, ModuleSearch{});
  print_notes(loaded.notes);
  const Profile& profile = loaded.profile;
  const ReportOptions options = filter_options(args.filter, 0);
  Annotation annotation = annotate_function(profile, options, args.function);
  if (!annotation.source_found && !annotation.addresses.empty()) {
    // No source to show: each sampled address with its instruction, decoded from the library's file.
    const std::vector<uint32_t> funcs = find_functions(profile, args.function);
    for (const Frame& frame : profile.frames) {
      if (frame.native_symbol == kNoIndex || frame.inline_depth != 0) continue;
      if (std::find(funcs.begin(), funcs.end(), frame.func) == funcs.end()) continue;
      const NativeSymbol& symbol = profile.native_symbols[frame.native_symbol];
      if (symbol.lib == kNoIndex || symbol.size == 0) continue;
      SymbolApi api(profile);
      std::string error;
      const std::map<uint64_t, std::string> code =
          api.disassemble(profile.libs[symbol.lib], symbol.address, symbol.size, error);
      for (AnnotatedAddress& ad : annotation.addresses) {
        // Frame addresses of callers are return address - 1: the call instruction holds them.
        auto it = code.upper_bound(static_cast<uint64_t>(ad.address));
        if (it != code.begin()) ad.instruction = std::prev(it)->second;
      }
      if (code.empty() && !error.empty())
        std::fprintf(stderr, "hpctl: note: no disassembly: %s\n", error.c_str());
      break;
    }
  }
  if (args.json) {
    print_annotation_json(annotation, std::cout);
  } else {
    print_annotation(annotation, std::cout, options.width);
  }
  return 0;
}

int run_diff(const DiffArgs& args) {
  LoadedProfile a = load_profile(args.before, ModuleSearch{});
  print_notes(a.notes);
  LoadedProfile b = load_profile(args.after, ModuleSearch{});
  print_notes(b.notes);
  const ReportOptions options = filter_options(args.filter, args.limit);
  const Diff diff = diff_profiles(a.profile, b.profile, options);
  if (args.json) {
    print_diff_json(diff, std::cout, options);
  } else {
    print_diff(diff, std::cout, options);
  }
  return 0;
}

}  // namespace hpd::cli
