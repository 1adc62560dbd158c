// `hpctl record`: record in process (eBPF or perf_event backend), symbolize, write, report.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "commands.h"
#include "hpd/capture/capture.h"
#include "hpd/collect/recorder.h"
#include "hpd/collect/unwind_cache.h"
#include "hpd/export/firefox.h"
#include "hpd/export/report.h"
#include "hpd/session/record_pipeline.h"
#include "hpd/symbolizer/convert.h"
#include "hpd/symbolizer/symbolizer.h"
#include "progress.h"
#include "record_text.h"

namespace hpd::cli {
namespace {

std::atomic<bool> g_stop{false};

void on_stop_signal(int) {
  g_stop.store(true);
}

// One choice's word as typed, or an error naming the option and the words it takes.
template <typename Choice>
Choice choice_of(const std::string& word, std::optional<Choice> (*parse)(std::string_view),
                 std::string (*words)(), const char* option) {
  if (const std::optional<Choice> choice = parse(word)) return *choice;
  throw std::runtime_error(std::string(option) + " must be " + words() + ", not '" + word + "'");
}

}  // namespace

session::RecordRequest to_record_request(const RecordArgs& args) {
  session::RecordRequest r;
  r.target = args.target;
  r.duration_s = args.duration_s;
  r.frequency_hz = args.frequency_hz;
  r.output = args.output;
  r.event = choice_of(args.event, parse_sampling_event, sampling_event_words, "--event");
  r.kernel = choice_of(args.kernel, parse_switch, switch_words, "--kernel");
  r.backend = choice_of(args.backend, parse_backend, backend_words, "--backend");
  r.off_cpu = choice_of(args.off_cpu, parse_switch, switch_words, "--off-cpu");
  r.off_cpu_min_us = args.off_cpu_min_us;
  r.follow_children = !args.no_follow_children;
  r.call_graph = choice_of(args.call_graph, parse_call_graph, call_graph_words, "--call-graph");
  r.stack_size = args.stack_size;
  r.cfi_rows = args.cfi_rows;
  r.mip = choice_of(args.mip, parse_switch, switch_words, "--mip");
  r.calls = args.calls;
  r.calls_counter = choice_of(args.calls_counter, parse_call_counter, call_counter_words, "--calls-counter");
  if (args.call_latency && !args.calls) throw std::runtime_error("--call-latency goes with --calls");
  r.call_latency = args.call_latency;
  if (args.alloc_mean != 0 && !args.alloc) throw std::runtime_error("--alloc-mean goes with --alloc");
  r.alloc = args.alloc;
  r.alloc_mean = args.alloc_mean;
  return r;
}

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

namespace {

// The number environment variable `name` holds: set, all of it a decimal number, at most `max`.
std::optional<uint64_t> environment_number(const char* name, uint64_t max) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(text, &end, 10);
  if (*end != '\0' || n > max) return std::nullopt;
  return n;
}

// The unwind-table cache of local recordings: the user's cache directory (hpd/collect/unwind_cache.h),
// bounded by $HPD_UNWIND_CACHE_MB (MiB, 0: none; default 256).
void configure_local_unwind_cache() {
  UnwindCacheSettings settings;
  settings.directory = user_unwind_cache_directory();
  if (const std::optional<uint64_t> mb = environment_number("HPD_UNWIND_CACHE_MB", uint64_t{1} << 20))
    settings.max_bytes = *mb << 20;
  settings.warn = [](const std::string& text) {
    std::fprintf(stderr, "\nhpctl: warning: %s\n", text.c_str());
  };
  configure_unwind_cache(settings);
}

// $HPD_STACK_MEMORY_KB (KiB; 0: never) instead of the bound the output set on what a capture not
// symbolized at the end keeps of its stacks (RecordOptions::stack_memory_bound); none is set otherwise.
void configure_stack_memory_bound(RecordOptions& options) {
  if (options.stack_memory_bound == 0) return;
  if (const std::optional<uint64_t> kb = environment_number("HPD_STACK_MEMORY_KB", uint64_t{1} << 30))
    options.stack_memory_bound = static_cast<size_t>(*kb << 10);
}

uint64_t monotonic_now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// When hpctl started (its static objects are made before main): the request, for a local recording's
// "first sample N ms after the request".
const uint64_t g_started_mono_ns = monotonic_now_ns();

}  // namespace

int run_record(const RecordArgs& args) {
  // Everything that can be checked is checked before the target is touched or a file is created.
  const session::RecordRequest request = to_record_request(args);
  RecordOptions options = session::record_options_from_request(request);
  options.stop = &g_stop;
  options.requested_mono_ns = g_started_mono_ns;
  validate_record_options(options);
  session::check_output_writable(request.output);

  ProgressLine progress(!args.quiet);
  const bool open_ended = args.duration_s <= 0;
  options.on_progress = [&progress, open_ended](const RecordProgress& p) {
    progress.update(session::format_record_progress(p, open_ended));
  };
  session::RecordingOutput output(request);
  output.attach(options, args.print_report);
  configure_stack_memory_bound(options);
  configure_local_unwind_cache();

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
  // A capture is symbolized only for the report printed here (hpctl report reads it later otherwise).
  const std::optional<Profile> profile = output.finish(result);
  progress.clear();

  if (args.print_report) {
    ReportOptions report_options;
    report_options.limit = args.report_limit;
    report_options.width = report_width_for_stdout();
    print_report(compute_report(*profile, report_options), std::cout, report_options);
    std::cout.flush();
  }
  const session::RecordSummary summary = session::summarize_recording(result, profile, output);
  if (!args.quiet) print_record_summary(request, summary);
  // Like the command itself (and perf record): scripts see its failure, also after a Ctrl-C.
  return args.target.command.empty() ? 0 : summary.command_exit_status;
}

}  // namespace hpd::cli
