// hpd_record_driver: records a command through hpd::record() with a chosen backend and prints what
// the recording cost the recorder (CPU per sample, peak memory). For the overhead benchmark
// (bench/overhead_backends.sh) and for trying the backends before hpctl has their flags.
// Usage: hpd_record_driver [--backend auto|bpf|perf] [-F HZ] [--off-cpu|--no-off-cpu] [--no-kernel]
//                          [--call-graph auto|cfi|fp|dwarf] [--ring-pages N] [--all] [--cgroup PATH]
//                          [--cfi-rows N] [--no-cfi-index] [--no-steal-clock] [--duration S] [--quiet] --
//                          COMMAND ARGS...
// With kernel.bpf_stats_enabled=1 the eBPF programs' run counts and ns per run are printed too.
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "hpd/collect/recorder.h"
#include "record_option_args.h"

namespace {

double cpu_seconds(const rusage& r) {
  return double(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         double(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

double per_run(uint64_t ns, uint64_t runs) {
  return runs == 0 ? 0.0 : double(ns) / double(runs);
}

int usage() {
  std::fprintf(stderr,
               "usage: hpd_record_driver [--backend auto|bpf|perf] [-F HZ] [--off-cpu|--no-off-cpu] "
               "[--no-kernel] [--call-graph auto|cfi|fp|dwarf] [--stack-size BYTES] [--ring-pages N] [--all] "
               "[--cgroup PATH] [--cfi-rows N] [--no-cfi-index] [--no-steal-clock] "
               "[--duration S] [--quiet] -- COMMAND ARGS...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  hpd::RecordOptions options;
  bool quiet = false;
  int i = 1;
  for (; i < argc; ++i) {
    const auto taken = hpd::testing::parse_record_option(argc, argv, i, options);
    if (taken == hpd::testing::RecordOptionArg::kMissingValue) return usage();
    if (taken == hpd::testing::RecordOptionArg::kTaken) continue;
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    } else if (arg == "--quiet") {
      quiet = true;
    } else {
      return usage();
    }
  }
  for (; i < argc; ++i) options.target.command.emplace_back(argv[i]);

  rusage before, after;
  ::getrusage(RUSAGE_SELF, &before);
  hpd::RecordResult result;
  // The recorder's output goes to stderr; the recorded command keeps stdout for itself.
  try {
    result = hpd::record(options);
  } catch (const hpd::RecordError& e) {
    std::fprintf(stderr, "hpd_record_driver: %s\n", e.what());
    return 1;
  }
  ::getrusage(RUSAGE_SELF, &after);
  const auto& p = result.profile;
  uint64_t on = 0, off = 0, cpu_ns = 0, off_ns = 0;
  for (const auto& s : p.samples) {
    cpu_ns += s.cpu_delta_ns;                // off-CPU samples too: what the scheduler charged for a wait
    if (hpd::is_off_cpu_interval(s.kind)) {  // blocked or waiting for a CPU
      ++off;
      off_ns += s.off_cpu_ns;
    } else {
      ++on;
    }
  }
  const double recorder_cpu = cpu_seconds(after) - cpu_seconds(before);
  const double loop_us = double(result.collection_cpu_ns) / 1e3;
  if (!quiet) {
    std::fprintf(
        stderr,
        "hpd_record_driver: backend=%s samples=%llu off_cpu_samples=%llu cpu_ms=%.1f off_cpu_ms=%.1f "
        "threads=%zu processes=%zu lost=%llu stack_failures=%llu truncated=%llu "
        "recorder_cpu_ms=%.1f collection_cpu_ms=%.1f collection_us_per_sample=%.2f peak_rss_kb=%ld "
        "leaf_callers=%llu bpf_sample_runs=%llu bpf_sample_ns_per_run=%.1f bpf_switch_runs=%llu "
        "bpf_switch_ns_per_run=%.1f bpf_wakeup_runs=%llu bpf_wakeup_ns_per_run=%.1f blocked_split=%llu "
        "blocked_without_wakeup=%llu waits_charged=%llu waits_charged_ms=%.3f ring_pages_warmed=%llu "
        "bytes_per_sample=%.0f "
        "fallback='%s'\n",
        p.info.backend.c_str(), (unsigned long long)on, (unsigned long long)off, double(cpu_ns) / 1e6,
        double(off_ns) / 1e6, p.threads.size(), p.processes.size(), (unsigned long long)p.lost.lost_records,
        (unsigned long long)p.lost.stack_failures, (unsigned long long)p.lost.truncated_stacks,
        recorder_cpu * 1e3, loop_us / 1e3, on + off ? loop_us / double(on + off) : 0.0, after.ru_maxrss,
        (unsigned long long)result.leaf_callers_added, (unsigned long long)result.bpf_sample_prog_runs,
        per_run(result.bpf_sample_prog_ns, result.bpf_sample_prog_runs),
        (unsigned long long)result.bpf_switch_prog_runs,
        per_run(result.bpf_switch_prog_ns, result.bpf_switch_prog_runs),
        (unsigned long long)result.bpf_wakeup_prog_runs,
        per_run(result.bpf_wakeup_prog_ns, result.bpf_wakeup_prog_runs),
        (unsigned long long)result.blocked_split_at_wakeup, (unsigned long long)result.blocked_without_wakeup,
        (unsigned long long)result.waits_charged_as_cpu, double(result.waits_charged_ns) / 1e6,
        (unsigned long long)result.bpf_ring_pages_warmed,
        p.samples.empty() ? 0.0 : double(result.sample_bytes) / double(p.samples.size()),
        result.backend_fallback_reason.c_str());
  }
  return result.command_exit_status >= 0 ? result.command_exit_status : 0;
}
