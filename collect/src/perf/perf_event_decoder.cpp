// perf_event records to builder events (perf_event_decoder.h).
#include "perf/perf_event_decoder.h"

#include <sys/mman.h>

namespace hpd {

void PerfEventDecoder::set_own_event_ids(int32_t tid, std::vector<uint64_t> ids) {
  own_ids_[tid] = std::unordered_set<uint64_t>(ids.begin(), ids.end());
}

std::optional<MmapEvent> mmap_event_of(const Mmap2Record& r) {
  if ((r.prot & PROT_EXEC) == 0) return std::nullopt;
  return MmapEvent{r.pid, time_of(r.sample_id), r.address, r.length, r.page_offset, r.filename, r.build_id};
}

uint64_t PerfEventDecoder::cpu_delta(const SampleRecord& s) {
  if (!config_.read_values || !s.read_value) return s.period;
  auto& per_cpu = last_value_[s.tid];
  if (per_cpu.size() <= s.cpu) per_cpu.resize(s.cpu + 1, 0);
  uint64_t& last = per_cpu[s.cpu];
  // A smaller value means a new event behind a reused tid: its count started from zero.
  const uint64_t delta = *s.read_value >= last ? *s.read_value - last : *s.read_value;
  last = *s.read_value;
  return delta;
}

bool PerfEventDecoder::from_own_event(int32_t tid, uint64_t id) {
  auto it = own_ids_.find(tid);
  return it == own_ids_.end() || it->second.contains(id);
}

void PerfEventDecoder::decode_sample(const SampleRecord& s, size_t bytes, const EventSink& sink) {
  if (!from_own_event(s.tid, s.id)) {
    ++duplicates_;
    return;
  }
  // Filled in place: a SampleEvent is a few hundred bytes, not worth a copy per sample.
  SampleEvent& e = event_.emplace<SampleEvent>();
  e.time_ns = s.time;
  e.pid = s.pid;
  e.tid = s.tid;
  e.cpu = s.cpu;
  e.kind = SampleKind::kOnCpu;
  e.cpu_delta_ns = cpu_delta(s);
  e.record_bytes = bytes;
  const uint16_t mode = s.misc & PERF_RECORD_MISC_CPUMODE_MASK;
  e.user_mode = mode == PERF_RECORD_MISC_USER;
  split_callchain(s.callchain, split_);
  if (split_.kernel.empty() && split_.user.empty() && s.ip != 0) {
    // No callchain at all: keep at least the sampled instruction.
    (mode == PERF_RECORD_MISC_KERNEL ? split_.kernel : split_.user).push_back(s.ip);
    e.walk_end = StackEnd::kFailed;
  } else if (split_.address_count >= config_.max_stack) {
    e.walk_end = StackEnd::kTruncated;
  } else {
    // The walk stopped on its own (null or invalid frame pointer). The kernel's frame-pointer walk
    // does not tell "reached the outermost frame" from "hit code built without frame pointers": the
    // builder looks at where the chain ended.
    e.walk_end = StackEnd::kComplete;
    e.fp_chain_ended = !config_.dwarf && !split_.user.empty();
  }
  e.kernel = split_.kernel;
  e.user = split_.user;
  // The user pc of a sample taken in user mode is the interrupted instruction. In the kernel (perf
  // samples there only with kernel frames), the outermost kernel frame says how the thread entered:
  // by a system call (its pc is after the `syscall`) or by an interrupt or exception (its pc is the
  // interrupted instruction). A chain cut by the depth limit does not reach the entry.
  if (e.user_mode) {
    e.user_leaf = UserLeaf::kInterrupted;
  } else if (is_syscall_entry_ && !split_.kernel.empty() && split_.address_count < config_.max_stack) {
    e.user_leaf = is_syscall_entry_(split_.kernel.back()) ? UserLeaf::kAfterSyscall : UserLeaf::kInterrupted;
  }
  if (s.regs_abi != PERF_SAMPLE_REGS_ABI_NONE && !s.user_regs.empty()) {
    e.regs = UserRegs::from_perf(config_.regs_mask, s.user_regs);
    e.stack = s.user_stack;
    e.stack_size = s.stack_size;
  } else {
    // dwarf mode without registers: a kernel thread, or the kernel could not read the user state.
    e.user_state_lost = config_.dwarf && e.user_mode;
  }
  sink(event_);
}

void PerfEventDecoder::decode(const PerfRecord& record, size_t bytes, const EventSink& sink) {
  if (const auto* s = std::get_if<SampleRecord>(&record)) {
    decode_sample(*s, bytes, sink);
  } else if (const auto* m = std::get_if<Mmap2Record>(&record)) {
    if (auto e = mmap_event_of(*m)) sink(*e);
  } else if (const auto* c = std::get_if<CommRecord>(&record)) {
    const uint64_t time = time_of(c->sample_id);
    if (c->exec) {
      // The kernel writes the exec's COMM record before the new image's MMAP2 records, and before
      // execve has set the new registers: the old image still runs until a sample shows otherwise.
      sink(ExecStartEvent{c->pid, time});
      sink(ExecEvent{c->pid, c->tid, time, c->comm, false, false});
    } else {
      sink(CommEvent{c->pid, c->tid, time, c->comm});
    }
  } else if (const auto* t = std::get_if<TaskRecord>(&record)) {
    if (t->fork) {
      // A task created by one with events of its own inherits copies of both sets: its creator's
      // rule holds for it (the copies' samples carry the ids of the events they were copied from).
      if (auto creator = own_ids_.find(t->ptid); creator != own_ids_.end() && t->tid != t->ptid) {
        std::unordered_set<uint64_t> ids = creator->second;
        own_ids_[t->tid] = std::move(ids);
      }
      on_fork(*t);
      sink(ForkEvent{t->pid, t->tid, t->ppid, t->ptid, t->time, {}});
    } else {
      on_exit(*t);
      sink(ExitEvent{t->pid, t->tid, t->time, 0});
    }
  } else if (const auto* rd = std::get_if<ReadRecord>(&record)) {
    on_read(*rd);
  } else if (const auto* l = std::get_if<LostRecord>(&record)) {
    sink(LostEvent{l->lost, 0});
  } else if (const auto* th = std::get_if<ThrottleRecord>(&record)) {
    if (!th->unthrottle) sink(LostEvent{0, 1});
  } else if (const auto* sw = std::get_if<SwitchRecord>(&record)) {
    // A thread with an inherited and a direct event has its switches written twice: keep one.
    if (from_own_event(sw->sample_id.tid, sw->sample_id.id)) switches_.push_back(*sw);
  }
}

void PerfEventDecoder::add_direct_event(int32_t pid, int32_t tid, uint32_t cpu, uint64_t id) {
  direct_events_[id] = DirectEvent{pid, tid, cpu, 0, false};
  direct_alive_.insert(tid);
}

void PerfEventDecoder::final_count(uint64_t id, uint64_t total) {
  auto it = direct_events_.find(id);
  if (it == direct_events_.end()) return;
  it->second.final_count = total;
  it->second.final_read = true;
}

// The kernel writes a fork record once per event of the creator (one per CPU): the first one counts.
void PerfEventDecoder::on_fork(const TaskRecord& t) {
  if (t.tid == t.ptid || roots_.contains(t.tid)) return;
  std::vector<int32_t> roots;
  if (auto creator = roots_.find(t.ptid); creator != roots_.end()) roots = creator->second;
  if (direct_alive_.contains(t.ptid)) roots.push_back(t.ptid);
  for (const int32_t root : roots) ++live_descendants_[root];
  roots_[t.tid] = std::move(roots);
}

// Once per task (its exit record comes once per event too). The tid may be given to another task: its
// events and counters are new. What its tail needs is kept: a thread created during the recording gets
// READ records after its exit record; a directly attached thread's counts are read at the end.
void PerfEventDecoder::on_exit(const TaskRecord& t) {
  const auto last = last_value_.find(t.tid);
  const auto own = own_ids_.find(t.tid);
  bool inherited = false;
  if (auto root = roots_.find(t.tid); root != roots_.end()) {
    for (const int32_t r : root->second) {
      if (auto live = live_descendants_.find(r); live != live_descendants_.end() && live->second > 0)
        --live->second;
    }
    roots_.erase(root);
    inherited = true;
  }
  if (direct_alive_.erase(t.tid) != 0) {
    if (last != last_value_.end()) direct_last_[t.tid] = std::move(last->second);
  } else if (inherited && config_.read_values && !exited_.contains(t.tid)) {
    Exited& x = exited_[t.tid];
    x.pid = t.pid;
    x.pass = pass_;
    if (last != last_value_.end()) x.last = std::move(last->second);
    if (own != own_ids_.end()) x.own_ids = std::move(own->second);
  }
  if (own != own_ids_.end()) own_ids_.erase(own);
  if (last != last_value_.end()) last_value_.erase(last);
}

// The final count of an inherited event of an exiting task, on its event's CPU: what it counted after
// the task's last sample there is the task's tail on that CPU. It is also in the count of the event it
// was inherited from, read at the end.
void PerfEventDecoder::on_read(const ReadRecord& r) {
  const auto event = direct_events_.find(r.sample_id.id);
  if (event == direct_events_.end()) return;  // not one of this recording's events (a perf.data file)
  inherited_final_[r.sample_id.id] += r.value;
  auto x = exited_.find(r.tid);
  if (x == exited_.end()) return;  // a direct thread's copy, or its exit record was lost
  if (x->second.own_ids && !x->second.own_ids->contains(r.sample_id.id)) return;
  const uint32_t cpu = event->second.cpu;
  const uint64_t last = cpu < x->second.last.size() ? x->second.last[cpu] : 0;
  if (r.value > last) x->second.tail_ns += r.value - last;
}

void PerfEventDecoder::emit_exited_tails(uint64_t before_pass, const EventSink& sink) {
  for (auto it = exited_.begin(); it != exited_.end();) {
    if (it->second.pass >= before_pass) {
      ++it;
      continue;
    }
    if (it->second.tail_ns != 0) sink(CpuTailEvent{it->second.pid, it->first, 0, it->second.tail_ns, 0});
    it = exited_.erase(it);
  }
}

void PerfEventDecoder::finish_cpu_tails(bool counts_complete, const EventSink& sink) {
  emit_exited_tails(UINT64_MAX, sink);
  if (!config_.read_values) return;
  // Per direct thread: its tail over its CPUs, or unknown.
  struct Tail {
    int32_t pid = 0;
    uint64_t ns = 0;
    bool known = true;
  };
  std::unordered_map<int32_t, Tail> tails;
  for (const auto& [id, event] : direct_events_) {
    Tail& tail = tails[event.tid];
    tail.pid = event.pid;
    if (!counts_complete || !event.final_read || live_descendants_[event.tid] != 0) {
      tail.known = false;
      continue;
    }
    const auto inherited = inherited_final_.find(id);
    const uint64_t others = inherited == inherited_final_.end() ? 0 : inherited->second;
    if (event.final_count < others) {
      tail.known = false;
      continue;
    }
    const std::vector<uint64_t>* last = nullptr;
    if (direct_alive_.contains(event.tid)) {
      if (auto it = last_value_.find(event.tid); it != last_value_.end()) last = &it->second;
    } else if (auto it = direct_last_.find(event.tid); it != direct_last_.end()) {
      last = &it->second;
    }
    const uint64_t own = event.final_count - others;
    const uint64_t before = last != nullptr && event.cpu < last->size() ? (*last)[event.cpu] : 0;
    if (own > before) tail.ns += own - before;
  }
  for (const auto& [tid, tail] : tails) {
    if (!tail.known) {
      ++tails_unknown_;
    } else if (tail.ns != 0) {
      sink(CpuTailEvent{tail.pid, tid, 0, tail.ns, 0});
    }
  }
  // Threads created during the recording and still running: their events' counts cannot be read.
  tails_unknown_ += roots_.size();
}

void PerfEventDecoder::emit_off_cpu(int32_t pid, int32_t tid, uint32_t cpu, uint64_t out_ns, uint64_t in_ns,
                                    bool runnable, const EventSink& sink) {
  if (in_ns - out_ns < config_.off_cpu_min_ns) return;
  SampleEvent& e = event_.emplace<SampleEvent>();
  e.time_ns = out_ns;
  e.pid = pid;
  e.tid = tid;
  e.cpu = cpu;
  e.kind = runnable ? SampleKind::kWaitCpu : SampleKind::kOffCpu;
  e.off_cpu_ns = in_ns - out_ns;
  e.no_stack_taken = true;  // a switch record carries no stack
  sink(event_);
}

void PerfEventDecoder::end_of_pass(const EventSink& sink) {
  std::stable_sort(switches_.begin(), switches_.end(), [](const SwitchRecord& a, const SwitchRecord& b) {
    if (a.sample_id.tid != b.sample_id.tid) return a.sample_id.tid < b.sample_id.tid;
    return a.sample_id.time < b.sample_id.time;
  });
  for (const SwitchRecord& r : switches_) {
    const SampleId& id = r.sample_id;
    SwitchState& state = switch_state_[id.tid];
    state.pid = id.pid;
    if (r.out) {
      if (state.in_ns != 0 && state.in_ns >= id.time) {
        // Its switch-in was read in an earlier pass, out of time order (end_of_pass).
        emit_off_cpu(id.pid, id.tid, id.cpu, id.time, state.in_ns, r.preempt, sink);
        state.in_ns = 0;
        continue;
      }
      state.in_ns = 0;  // older than this switch-out: the switch-in of an interval not seen whole
      state.out_ns = id.time;
      state.out_cpu = id.cpu;
      state.out_runnable = r.preempt;
    } else if (state.out_ns != 0 && state.out_ns <= id.time) {
      emit_off_cpu(id.pid, id.tid, state.out_cpu, state.out_ns, id.time, state.out_runnable, sink);
      state.out_ns = 0;
    } else {
      state.in_ns = id.time;
    }
  }
  switches_.clear();
  // The READ records of a task's exit come after its exit record, written microseconds later: by the
  // end of the pass after its exit's, they are in.
  ++pass_;
  emit_exited_tails(pass_ - 1, sink);
}

void PerfEventDecoder::finish_off_cpu(uint64_t end_ns, const EventSink& sink) {
  end_of_pass(sink);
  for (auto& [tid, state] : switch_state_) {
    if (state.out_ns != 0 && state.out_ns < end_ns)
      emit_off_cpu(state.pid, tid, state.out_cpu, state.out_ns, end_ns, state.out_runnable, sink);
    state.out_ns = 0;
  }
}

}  // namespace hpd
