// Ends a recording (hpd::record) on a condition instead of a fixed duration: the targets' CPU time
// since every event was attached, or any other condition, asked at each progress tick (about every
// 250 ms). A loaded machine then stretches the recording instead of starving it. Header-only: for
// tests that link hpd_collect.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "cpu_clock.h"
#include "hpd/collect/recorder.h"

namespace hpd::test {

class RecordUntil {
 public:
  // Installs the stop flag and the hooks on `options` (chaining hooks already there); this object must
  // outlive the record() call. The recording ends when every condition holds, or after cap_s seconds of
  // wall time, which only a real break reaches (met() is then false).
  explicit RecordUntil(RecordOptions& options, double cap_s = 120) {
    options.duration_s = cap_s;
    options.stop = &stop_;
    auto attached = std::move(options.on_attached);
    options.on_attached = [this, attached] {
      for (auto& [pid, cpu] : cpu_) cpu.at_attach = process_cpu_seconds(pid);
      attached_ = true;
      if (attached) attached();
    };
    auto progress = std::move(options.on_progress);
    options.on_progress = [this, progress](const RecordProgress& p) {
      if (attached_ && !stop_ && all_hold()) {
        for (auto& [pid, cpu] : cpu_) cpu.at_stop = cpu_since_attach(pid);
        met_ = true;
        stop_ = true;
      }
      if (progress) progress(p);
    };
  }
  RecordUntil(const RecordUntil&) = delete;
  RecordUntil& operator=(const RecordUntil&) = delete;

  // Condition: process `pid` has used `cpu_s` seconds of CPU since every event was attached.
  RecordUntil& cpu_of(pid_t pid, double cpu_s) {
    cpu_[pid].wanted = cpu_s;
    return *this;
  }
  // Condition: done() holds.
  RecordUntil& when(std::function<bool()> done) {
    conditions_.push_back(std::move(done));
    return *this;
  }

  // Every condition held before the cap.
  bool met() const { return met_; }
  // CPU seconds a cpu_of() process had used since the attach when the conditions were found met (0
  // when they never were): the samples of a process are at least about this times the rate.
  double cpu_at_stop(pid_t pid) const {
    const auto it = cpu_.find(pid);
    return it == cpu_.end() ? 0 : it->second.at_stop;
  }

 private:
  struct Cpu {
    double wanted = 0;
    double at_attach = -1;
    double at_stop = 0;
  };

  double cpu_since_attach(pid_t pid) const {
    const Cpu& cpu = cpu_.at(pid);
    const double now = process_cpu_seconds(pid);
    return now < 0 || cpu.at_attach < 0 ? -1 : now - cpu.at_attach;
  }
  bool all_hold() const {
    for (const auto& [pid, cpu] : cpu_) {
      if (cpu_since_attach(pid) < cpu.wanted) return false;
    }
    for (const auto& done : conditions_) {
      if (!done()) return false;
    }
    return true;
  }

  std::atomic<bool> stop_{false};
  std::atomic<bool> attached_{false};
  bool met_ = false;
  std::map<pid_t, Cpu> cpu_;
  std::vector<std::function<bool()>> conditions_;
};

}  // namespace hpd::test
