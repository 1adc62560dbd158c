#include "cpu_clock.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "hpd/base/proc_files.h"

namespace hpd::test {

namespace {

// The fields of /proc/PID/stat from field 3 (the state) on; empty when there is no such process. The
// command name (field 2) may hold spaces and parentheses: the fields after it follow the last ')'.
std::string stat_after_comm(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return "";
  const size_t close = line.rfind(')');
  return close == std::string::npos ? "" : line.substr(close + 1);
}

}  // namespace

double process_cpu_seconds(pid_t pid) {
  std::istringstream fields(stat_after_comm(pid));
  std::string skip;
  // Fields 3 (state) to 13, then 14 utime and 15 stime, in clock ticks.
  for (int i = 3; i <= 13; ++i) fields >> skip;
  unsigned long long utime = 0, stime = 0;
  if (!(fields >> utime >> stime)) return -1;
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double host_steal_ns() {
  return static_cast<double>(read_host_steal_ns().value_or(0));
}

bool process_running(pid_t pid) {
  std::istringstream fields(stat_after_comm(pid));
  std::string state;
  return fields >> state && state != "Z" && state != "X";
}

size_t perf_events_held(pid_t pid) {
  size_t n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::error_code link_ec;
    n += std::filesystem::read_symlink(entry.path(), link_ec).string() == "anon_inode:[perf_event]" ? 1 : 0;
  }
  return n;
}

bool holds_perf_event(pid_t pid) {
  return perf_events_held(pid) > 0;
}

bool wait_until(const std::function<bool()>& done, double cap_s, double interval_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(cap_s);
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
  }
}

bool wait_for_cpu(pid_t pid, double cpu_s, double cap_s) {
  bool gone = false;
  const bool met = wait_until(
      [&] {
        const double used = process_cpu_seconds(pid);
        gone = used < 0;
        return gone || used >= cpu_s;
      },
      cap_s);
  return met && !gone;
}

CpuLog::CpuLog(const std::string& path) {
  std::ifstream in(path);
  uint64_t mono = 0, cpu = 0;
  while (in >> mono >> cpu) pairs_.emplace_back(mono, cpu);
}

std::optional<double> CpuLog::cpu_at(uint64_t t) const {
  const auto after = std::lower_bound(pairs_.begin(), pairs_.end(), std::make_pair(t, uint64_t{0}));
  if (after == pairs_.begin() || after == pairs_.end()) return std::nullopt;
  const auto before = std::prev(after);
  const double f = static_cast<double>(t - before->first) / static_cast<double>(after->first - before->first);
  return static_cast<double>(before->second) + f * static_cast<double>(after->second - before->second);
}

}  // namespace hpd::test
