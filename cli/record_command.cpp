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
#include "mip_recording.h"
#include "progress.h"

namespace hpd::cli {
namespace {

std::atomic<bool> g_stop{false};

void on_stop_signal(int) { g_stop.store(true); }

// Refuses an output path that cannot be written, before anything is recorded. Probes by creating
// (and removing) a file beside it, which also catches read-only file systems where access() would not.
void check_output_writable(const std::string& output) {
  namespace fs = std::filesystem;
  if (output.empty()) throw std::runtime_error("the output path is empty");
  std::error_code ec;
  if (fs::is_directory(output, ec)) {
    throw std::runtime_error("cannot write '" + output + "': it is a directory; give a file name with -o");
  }
  fs::path dir = fs::path(output).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec)) {
    throw std::runtime_error("cannot write '" + output + "': directory '" + dir.string() + "' does not exist");
  }
  std::string probe = (dir / (".hpctl-probe-XXXXXX")).string();
  int fd = mkstemp(probe.data());
  if (fd < 0) {
    throw std::runtime_error("cannot write '" + output + "': " + std::strerror(errno) + " (in directory '" +
                             dir.string() + "')");
  }
  close(fd);
  unlink(probe.c_str());
  if (access(output.c_str(), F_OK) == 0 && access(output.c_str(), W_OK) != 0) {
    throw std::runtime_error("cannot write '" + output + "': " + std::strerror(errno));
  }
}

KernelFrames parse_kernel(const std::string& s) {
  if (s == "on") return KernelFrames::kOn;
  if (s == "off") return KernelFrames::kOff;
  return KernelFrames::kAuto;
}

std::string human_bytes(uint64_t n) {
  char buf[32];
  if (n >= (1u << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", n / 1048576.0);
  } else if (n >= 1024) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", n / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  }
  return buf;
}

}  // namespace

int run_record(const RecordArgs& args) {
  RecordOptions options;
  options.pids = args.pids;
  options.command = args.command;
  options.duration_s = args.duration_s;
  options.frequency_hz = args.frequency_hz;
  options.event = args.event;
  options.kernel = parse_kernel(args.kernel);
  options.stop = &g_stop;
  options.backend = args.backend == "bpf" ? Backend::kBpf : args.backend == "perf" ? Backend::kPerf : Backend::kAuto;
  options.all_processes = args.all;
  options.cgroup = args.cgroup;
  options.off_cpu = args.off_cpu == "on" ? OffCpu::kOn : args.off_cpu == "off" ? OffCpu::kOff : OffCpu::kAuto;
  options.off_cpu_min_us = args.off_cpu_min_us;
  options.follow_children = !args.no_follow_children;
  options.call_graph = args.call_graph == "fp"      ? CallGraph::kFp
                       : args.call_graph == "dwarf" ? CallGraph::kDwarf
                                                    : CallGraph::kAuto;
  options.stack_copy_bytes = args.stack_size;

  // Everything that can be checked is checked before the target is touched or a file is created.
  if (!args.pids.empty() && !args.command.empty()) {
    throw std::runtime_error("give either --pid or a command after --, not both");
  }
  if (args.pids.empty() && args.command.empty() && !args.all && args.cgroup.empty()) {
    throw std::runtime_error(
        "nothing to record: give --pid PID, --all, --cgroup PATH, or a command after -- (hpctl record -- ./app)");
  }
  validate_record_options(options);
  check_output_writable(args.output);

  ProgressLine progress(!args.quiet);
  options.on_progress = [&progress](const RecordProgress& p) {
    char line[160];
    if (p.duration_s > 0) {
      std::snprintf(line, sizeof line, "recording: %.1f s of %.1f s, %llu samples", p.elapsed_s, p.duration_s,
                    static_cast<unsigned long long>(p.samples));
    } else {
      std::snprintf(line, sizeof line, "recording: %.1f s, %llu samples (Ctrl-C to stop)", p.elapsed_s,
                    static_cast<unsigned long long>(p.samples));
    }
    progress.update(line);
  };

  // A capture file (.hpr) is streamed while recording: a crash loses at most the last quarter second.
  std::unique_ptr<CaptureWriter> capture;
  std::string capture_error;
  if (args.output.size() > 4 && args.output.compare(args.output.size() - 4, 4, ".hpr") == 0) {
    CaptureWriterOptions capture_options;
#ifdef HPD_VERSION
    capture_options.writer = std::string("hpd ") + HPD_VERSION;
#endif
    capture = std::make_unique<CaptureWriter>(args.output, capture_options);
    options.on_flush = [&capture, &capture_error](const RawProfile& raw) {
      if (!capture_error.empty()) return;
      try {
        capture->flush(raw);
      } catch (const std::exception& e) {
        capture_error = e.what();  // reported after the recording; the in-memory profile is still whole
      }
    };
  }

  // MIP counts: by default of targets that carry a MIP section; with --all or --cgroup only when asked.
  std::unique_ptr<MipRecording> mip;
  if (args.mip == "on" || (args.mip == "auto" && !args.all && args.cgroup.empty())) {
    mip = std::make_unique<MipRecording>(args.mip == "on");
    options.on_flush = [previous = std::move(options.on_flush), &mip](const RawProfile& raw) {
      if (previous) previous(raw);
      mip->on_flush(raw);
    };
  }

  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {}, old_term {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  RecordResult result;
  try {
    result = record(options);
  } catch (...) {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    progress.clear();
    if (capture) {
      capture.reset();
      std::error_code ec;
      std::filesystem::remove(args.output, ec);  // nothing was recorded
    }
    throw;
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (mip) mip->finish(result.profile);
  if (capture) {
    // Finished before symbolizing, so the capture is complete even if symbolization fails.
    if (!capture_error.empty()) throw std::runtime_error(capture_error);
    capture->finish(result.profile);
  }
  progress.update("symbolizing...");

  Symbolizer symbolizer;
  ConvertOptions convert_options;
  convert_options.kernel_frames = result.profile.info.kernel_frames;
  Profile profile = symbolize_profile(result.profile, symbolizer, convert_options);
  progress.update("writing " + args.output + "...");
  if (!capture) write_firefox_file(profile, args.output);
  progress.clear();

  if (args.print_report) {
    ReportOptions report_options;
    report_options.limit = args.report_limit;
    print_report(compute_report(profile, report_options), std::cout, report_options);
    std::cout.flush();
  }

  if (!args.quiet) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(args.output, ec);
    const auto& info = result.profile.info;
    const double seconds = (info.end_mono_ns - info.start_mono_ns) / 1e9;
    std::fprintf(stderr, "hpctl: %zu samples from %zu threads in %.2f s (%s backend)",
                 result.profile.samples.size(), profile.threads.size(), seconds, info.backend.c_str());
    const auto& lost = result.profile.lost;
    if (lost.lost_records != 0 || lost.throttle_events != 0) {
      std::fprintf(stderr, " (lost %llu records, %llu throttles)", static_cast<unsigned long long>(lost.lost_records),
                   static_cast<unsigned long long>(lost.throttle_events));
    }
    if (capture) {
      std::fprintf(stderr, "\nhpctl: wrote %s (%s). Convert it with `hpctl convert %s -o profile.json.gz`.\n",
                   args.output.c_str(), human_bytes(ec ? 0 : size).c_str(), args.output.c_str());
    } else {
      std::fprintf(stderr,
                   "\nhpctl: wrote %s (%s). Open it at https://profiler.firefox.com or with `samply load %s`.\n",
                   args.output.c_str(), human_bytes(ec ? 0 : size).c_str(), args.output.c_str());
    }
    std::fprintf(stderr, "hpctl: call graph: %s", to_string(result.call_graph));
    if (result.call_graph == CallGraph::kDwarf)
      std::fprintf(stderr, " (%u-byte stack copies)", result.stack_copy_bytes);
    if (!result.call_graph_reason.empty()) std::fprintf(stderr, "; auto: %s", result.call_graph_reason.c_str());
    std::fprintf(stderr, "\n");
    if (!result.backend_fallback_reason.empty() && args.backend == "auto") {
      std::fprintf(stderr, "hpctl: note: used perf_event, not eBPF: %s\n", result.backend_fallback_reason.c_str());
    }
    if (mip) {
      for (const std::string& note : mip->notes()) std::fprintf(stderr, "hpctl: %s\n", note.c_str());
      if (!result.profile.mip_snapshots.empty()) {
        std::fprintf(stderr, "hpctl: MIP: %zu snapshot(s) kept of %zu taken; counts are the last taken before exit\n",
                     result.profile.mip_snapshots.size(), mip->snapshots_taken());
      } else if (args.mip == "on") {
        std::fprintf(stderr, "hpctl: MIP: no target had a readable __llvm_mipraw section\n");
      }
    }
    if (result.profile.samples.empty()) {
      std::fprintf(stderr, "hpctl: warning: no samples were taken; the target used no CPU while recorded\n");
    }
    if (!args.command.empty() && result.command_exit_status != 0) {
      std::fprintf(stderr, "hpctl: note: the command exited with status %d\n", result.command_exit_status);
    }
  }
  return 0;
}

}  // namespace hpd::cli
