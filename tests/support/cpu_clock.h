// Waiting on a process's CPU time instead of the wall clock: a loaded machine gives a program a
// fraction of a CPU, so "a second of recording" can hold a tenth of the work a test counts on,
// while "until it has used 300 ms of CPU" holds the same work however busy the machine is.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hpd::test {

// CPU time (user + system) that all threads of process `pid` have used, exited threads included,
// in seconds (from /proc/PID/stat, 1/100 s resolution); -1 when there is no such process.
double process_cpu_seconds(pid_t pid);

// The CPU time the hypervisor took from this machine's CPUs so far (/proc/stat's steal, summed over
// the CPUs), in ns. A thread that runs while its virtual CPU is stolen gets neither CPU time nor run
// delay for it: its wall clock goes on, its CPU clock does not, and the kernel did not see it wait;
// perf's cpu-clock and task-clock (the sampling timers) count it as the thread's.
double host_steal_ns();

// Whether `pid` exists and is not a zombie (an exited child its parent has not reaped yet).
bool process_running(pid_t pid);

// Whether `pid` holds a perf_event descriptor: a recorder that opened its sampling events.
bool holds_perf_event(pid_t pid);
// How many perf_event descriptors `pid` holds (the perf backend: one per CPU for each thread it
// attached).
size_t perf_events_held(pid_t pid);

// Asks done() every `interval_s` until it holds (true) or `cap_s` of wall time passed (false). The cap
// is for a real break only: choose it far beyond what the slowest machine needs.
bool wait_until(const std::function<bool()>& done, double cap_s = 120, double interval_s = 0.01);

// Waits until `pid` has used `cpu_s` seconds of CPU in all (e.g. it has exec'd and is past its
// start-up); false when it exited first or the cap passed.
bool wait_for_cpu(pid_t pid, double cpu_s, double cap_s = 120);

// The log of the cpu_clock_log fixture: its CPU time against the monotonic clock, pairs 100 us apart.
class CpuLog {
 public:
  explicit CpuLog(const std::string& path);
  size_t size() const { return pairs_.size(); }
  // The CPU time (ns) the process had used at monotonic instant `t`, interpolated between the pairs
  // around it; nothing when `t` is outside the log.
  std::optional<double> cpu_at(uint64_t t) const;

 private:
  std::vector<std::pair<uint64_t, uint64_t>> pairs_;
};

}  // namespace hpd::test
