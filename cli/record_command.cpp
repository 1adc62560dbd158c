// `hpctl record`: record in process (eBPF or perf_event backend), symbolize, write, report.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include "commands.h"
#include "hpd/capture/capture.h"
#include "hpd/collect/recorder.h"
#include "hpd/export/firefox.h"
#include "hpd/export/report.h"
#include "hpd/symbolizer/convert.h"
#include "hpd/symbolizer/symbolizer.h"
#include "progress.h"
#include "record_pipeline.h"

namespace hpd::cli {
namespace {

std::atomic<bool> g_stop{false};

void on_stop_signal(int) {
  g_stop.store(true);
}

}  // namespace

void keep_previous_output(const RecordArgs& args) {
  struct stat st {};
  // lstat: only a regular file is rotated. A symbolic link is left in place for the output check
  // (refused in a directory others may write), a device or FIFO is written in place.
  if (::lstat(args.output.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  const std::string old = args.output + ".old";
  if (std::rename(args.output.c_str(), old.c_str()) != 0) {
    throw std::runtime_error("cannot keep the previous " + args.output + " as " + old + ": " +
                             std::strerror(errno));
  }
  if (!args.quiet)
    std::fprintf(stderr, "hpctl: the previous %s is now %s\n", args.output.c_str(), old.c_str());
}

int run_record(const RecordArgs& args) {
  // Everything that can be checked is checked before the target is touched or a file is created.
  RecordOptions options = record_options_from_args(args);
  options.stop = &g_stop;
  validate_record_options(options);
  check_output_writable(args.output);

  ProgressLine progress(!args.quiet);
  const bool open_ended = args.duration_s <= 0;
  options.on_progress = [&progress, open_ended](const RecordProgress& p) {
    progress.update(format_record_progress(p, open_ended));
  };
  RecordingOutput output(args);
  output.attach(options);

  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  RecordResult result;
  try {
    result = record(options);
  } catch (...) {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    progress.clear();
    output.abandon();  // nothing was recorded
    throw;
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  progress.update(output.is_capture() ? "finishing " + args.output + "..."
                                      : "symbolizing and writing " + args.output + "...");
  const Profile profile = output.finish(result);
  progress.clear();

  if (args.print_report) {
    ReportOptions report_options;
    report_options.limit = args.report_limit;
    report_options.width = report_width_for_stdout();
    print_report(compute_report(profile, report_options), std::cout, report_options);
    std::cout.flush();
  }
  const RecordSummary summary = summarize_recording(result, profile, output);
  if (!args.quiet) print_record_summary(args, summary);
  // Like the command itself (and perf record): scripts see its failure, also after a Ctrl-C.
  return args.command.empty() ? 0 : summary.command_exit_status;
}

}  // namespace hpd::cli
