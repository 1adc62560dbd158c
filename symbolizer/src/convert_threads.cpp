// The Profile's threads and their samples (converter.h).
#include "converter.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <unordered_set>

namespace hpd::conversion {

uint64_t Converter::thread_key(int32_t pid, int32_t tid) {
  return static_cast<uint64_t>(static_cast<uint32_t>(pid)) << 32 | static_cast<uint32_t>(tid);
}

void Converter::build_threads(const std::vector<uint32_t>& sample_instance,
                              const std::vector<uint32_t>& sum_instance) {
  std::unordered_map<uint64_t, uint32_t> sample_counts;
  for (const RawSample& s : raw_.samples) ++sample_counts[thread_key(s.pid, s.tid)];
  std::unordered_map<uint64_t, uint32_t> sum_counts;
  for (const RawSampleSum& s : raw_.released) ++sum_counts[thread_key(s.pid, s.tid)];
  // Threads that made sampled allocations have a thread of their own too (their allocations go
  // there), whether or not they were sampled on the CPU.
  std::unordered_set<uint64_t> allocating;
  for (const RawAllocation& a : raw_.allocations) allocating.insert(thread_key(a.pid, a.tid));
  std::unordered_map<uint64_t, uint32_t> thread_index;
  const bool keep_unsampled = records_named_processes(raw_.info);
  auto add_thread = [&](int32_t pid, int32_t tid, const RawThread* rt) {
    Thread t;
    t.pid = pid;
    t.tid = tid;
    const ProcessView* view = view_of(pid);
    if (view->process != nullptr) {
      t.process_name = view->process->name;
      t.process_cgroup = view->process->cgroup;
    }
    t.name = rt != nullptr && !rt->name.empty() ? rt->name
             : !t.process_name.empty()          ? t.process_name
                                                : "thread " + std::to_string(tid);
    t.is_main = pid == tid;
    if (rt != nullptr) {
      t.start_ns = rt->start_ns;
      t.end_ns = rt->end_ns;
      t.lost = rt->lost;
    }
    t.samples.reserve(sample_counts[thread_key(pid, tid)]);
    t.sample_sums.reserve(sum_counts[thread_key(pid, tid)]);
    thread_index.emplace(thread_key(pid, tid), static_cast<uint32_t>(out_.threads.size()));
    out_.threads.push_back(std::move(t));
  };
  for (const RawThread& rt : raw_.threads) {
    const uint64_t key = thread_key(rt.pid, rt.tid);
    const bool lost_any = rt.lost.lost_records != 0 || rt.lost.throttle_events != 0 ||
                          rt.lost.stack_failures != 0 || rt.lost.truncated_stacks != 0;
    if ((keep_unsampled || sample_counts.count(key) != 0 || sum_counts.count(key) != 0 || lost_any ||
         allocating.count(key) != 0) &&
        thread_index.count(key) == 0)
      add_thread(rt.pid, rt.tid, &rt);
  }
  const auto thread_of = [&](int32_t pid, int32_t tid) {
    auto it = thread_index.find(thread_key(pid, tid));
    if (it == thread_index.end()) {
      add_thread(pid, tid, nullptr);
      it = thread_index.find(thread_key(pid, tid));
    }
    return it->second;
  };
  for (size_t i = 0; i < raw_.released.size(); ++i) {
    const RawSampleSum& s = raw_.released[i];
    SampleSum out;
    out.stack = sum_instance[i] == kNoIndex ? kNoIndex : instances_[sum_instance[i]].profile_stack;
    out.kind = s.kind;
    out.stack_end = s.stack_end;
    out.samples = s.samples;
    out.cpu_delta_ns = s.cpu_delta_ns;
    out.off_cpu_ns = s.off_cpu_ns;
    out.first_ns = s.first_ns;
    out.last_ns = s.last_ns;
    out.not_taken = s.not_taken;
    out_.threads[thread_of(s.pid, s.tid)].sample_sums.push_back(out);
  }
  for (size_t i = 0; i < raw_.samples.size(); ++i) {
    const RawSample& s = raw_.samples[i];
    const uint32_t thread = thread_of(s.pid, s.tid);
    Sample out;
    out.time_ns = s.time_ns;
    out.stack = sample_instance[i] == kNoIndex ? kNoIndex : instances_[sample_instance[i]].profile_stack;
    out.cpu_delta_ns = s.cpu_delta_ns;
    out.off_cpu_ns = s.off_cpu_ns;
    out.kind = s.kind;
    out.stack_end = s.stack_end;
    out_.threads[thread].samples.push_back(out);
  }
  for (Thread& t : out_.threads) {
    if (!std::is_sorted(t.samples.begin(), t.samples.end(),
                        [](const Sample& a, const Sample& b) { return a.time_ns < b.time_ns; })) {
      std::stable_sort(t.samples.begin(), t.samples.end(),
                       [](const Sample& a, const Sample& b) { return a.time_ns < b.time_ns; });
    }
  }
}

void Converter::add_main_thread_if_missing(int32_t pid) {
  for (const Thread& t : out_.threads) {
    if (t.pid == pid) return;
  }
  Thread t;
  t.pid = t.tid = pid;
  t.is_main = true;
  const ProcessView* view = view_of(pid);
  if (view->process != nullptr) {
    t.process_name = view->process->name;
    t.start_ns = view->process->start_ns;
    t.end_ns = view->process->end_ns;
  }
  if (const RawThread* rt = raw_.find_thread(pid, pid); rt != nullptr) {
    t.name = rt->name;
    if (rt->start_ns != 0) t.start_ns = rt->start_ns;
    if (rt->end_ns != 0) t.end_ns = rt->end_ns;
  }
  if (t.name.empty()) t.name = !t.process_name.empty() ? t.process_name : "thread " + std::to_string(pid);
  out_.threads.push_back(std::move(t));
}

}  // namespace hpd::conversion
