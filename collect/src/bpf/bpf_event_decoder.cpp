// eBPF ring-buffer records to builder events (bpf_event_decoder.h).
#include "bpf/bpf_event_decoder.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string_view>

namespace hpd {

namespace {

constexpr size_t kSampleHeaderBytes = offsetof(hpd_sample_event, ips);

// Copies a record that may be cut short (samples end after their frames) into `out`, zero-filled.
template <typename T>
bool read_record(std::span<const uint8_t> bytes, T& out, size_t need = sizeof(T)) {
  if (bytes.size() < need) return false;
  std::memset(&out, 0, sizeof out);
  std::memcpy(&out, bytes.data(), std::min(bytes.size(), sizeof out));
  return true;
}

// A sample record's fields before its frames, into `out` (its ips are left as they were): a whole
// hpd_sample_event is 2.7 KiB, zeroed and copied per sample, where the frames are copied once, from the
// record, by decode_sample (5% of a system-wide recording's CPU).
bool read_sample_head(std::span<const uint8_t> bytes, hpd_sample_event& out) {
  if (bytes.size() < kSampleHeaderBytes) return false;
  std::memcpy(static_cast<void*>(&out), bytes.data(), kSampleHeaderBytes);
  return true;
}

std::string_view comm_view(const hpd_event_header& header) {
  return {header.comm, strnlen(header.comm, sizeof header.comm)};
}

template <typename T>
T field_at(std::span<const uint8_t> bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof value);
  return value;
}

// Whether an on-CPU (or exit-stack) record carries what a second walk needs: its walk met a table not
// published yet, and it has the registers (ip, sp, bp) and a copy of the stack.
bool carries_pending_walk(std::span<const uint8_t> bytes) {
  if (bytes.size() < kSampleHeaderBytes) return false;
  const auto flags = field_at<uint32_t>(bytes, offsetof(hpd_sample_event, flags));
  const auto stack_bytes = field_at<uint32_t>(bytes, offsetof(hpd_sample_event, stack_bytes));
  const auto regs_valid = field_at<uint32_t>(bytes, offsetof(hpd_sample_event, regs_valid));
  constexpr uint32_t kNeeded = 1u << static_cast<unsigned>(DwarfReg::kRip) |
                               1u << static_cast<unsigned>(DwarfReg::kRsp) |
                               1u << static_cast<unsigned>(DwarfReg::kRbp);
  return (flags & HPD_SAMPLE_TABLES_PENDING) != 0 && stack_bytes != 0 && (regs_valid & kNeeded) == kNeeded;
}

}  // namespace

std::string comm_of(const hpd_event_header& header) {
  return std::string(comm_view(header));
}

void BpfEventDecoder::hold_pending_walks(std::function<void(int32_t pid)> on_held, size_t max_bytes,
                                         uint64_t max_age_ns) {
  hold_ = true;
  on_held_ = std::move(on_held);
  max_held_bytes_ = max_bytes;
  max_held_age_ns_ = max_age_ns;
}

bool BpfEventDecoder::off_cpu_waits_for_walk(std::span<const uint8_t> bytes,
                                             const hpd_event_header& header) const {
  if (header.type != HPD_EVENT_OFF_CPU || bytes.size() < kSampleHeaderBytes) return false;
  if ((field_at<uint32_t>(bytes, offsetof(hpd_sample_event, flags)) & HPD_SAMPLE_TABLES_PENDING) == 0)
    return false;
  // Walked again before its thread ran (OffCpuRewalk): that walk replaces the programs' when decoded.
  if (const auto r = rewalks_.find(header.tid); r != rewalks_.end() && r->second.time_ns == header.time_ns)
    return false;
  // The copy of its switch-out: decoded already, or held with its process's records before it.
  if (const auto c = switch_stacks_.find(header.tid);
      c != switch_stacks_.end() && c->second.time_ns == header.time_ns)
    return true;
  const auto held = held_.find(queue_of(header.pid));
  if (held == held_.end()) return false;
  return std::any_of(held->second.begin(), held->second.end(), [&](const Held& h) {
    hpd_event_header other;
    return read_record(std::span<const uint8_t>(h.bytes), other) && other.type == HPD_EVENT_SWITCH_STACK &&
           other.tid == header.tid && other.time_ns == header.time_ns;
  });
}

int32_t BpfEventDecoder::queue_of(int32_t pid) const {
  const auto with = held_with_.find(pid);
  return with != held_with_.end() ? with->second : pid;
}

void BpfEventDecoder::forget_queue(int32_t queue) {
  std::erase_if(held_with_, [&](const auto& with) { return with.second == queue; });
}

void BpfEventDecoder::decode(std::span<const uint8_t> bytes, const EventSink& sink) {
  hpd_event_header header;
  if (hold_ && read_record(bytes, header)) {
    // An exit stack is walked again as an on-CPU record is: the registers and the copy are its own.
    const bool walk = ((header.type == HPD_EVENT_ON_CPU || header.type == HPD_EVENT_EXIT_STACK) &&
                       carries_pending_walk(bytes)) ||
                      off_cpu_waits_for_walk(bytes, header);
    int32_t queue = queue_of(header.pid);
    if (hpd_fork_event fork; header.type == HPD_EVENT_FORK && read_record(bytes, fork) &&
                             fork.parent_pid != header.pid && held_.count(header.pid) == 0 &&
                             held_.count(queue_of(fork.parent_pid)) != 0) {
      // A new process whose parent's records wait: it waits behind them (held_with_).
      queue = queue_of(fork.parent_pid);
      held_with_[header.pid] = queue;
    }
    auto it = held_.find(queue);
    if (walk || it != held_.end()) {
      if (it == held_.end()) it = held_.try_emplace(queue).first;
      it->second.push_back(Held{std::vector<uint8_t>(bytes.begin(), bytes.end()), walk});
      held_bytes_ += bytes.size();
      held_bytes_peak_ = std::max(held_bytes_peak_, held_bytes_);
      if (walk) {
        ++held_walks_;
        if (on_held_) on_held_(header.pid);
      }
      // Too much waits (tables that take long to come, for many processes): the processes holding the
      // most give theirs up as they are, one by one, so that one whose tables are slow to come does not
      // take the second walk from the others.
      while (held_bytes_ > max_held_bytes_) release_largest(sink);
      return;
    }
  }
  decode_record(bytes, sink, nullptr);
}

void BpfEventDecoder::release_largest(const EventSink& sink) {
  auto largest = held_.end();
  size_t most = 0;
  for (auto it = held_.begin(); it != held_.end(); ++it) {
    size_t bytes = 0;
    for (const Held& h : it->second) bytes += h.bytes.size();
    if (largest == held_.end() || bytes > most) {
      largest = it;
      most = bytes;
    }
  }
  if (largest == held_.end()) return;
  for (const Held& h : largest->second) emit_held(h, sink, nullptr);
  forget_queue(largest->first);
  held_.erase(largest);
}

void BpfEventDecoder::emit_held(const Held& h, const EventSink& sink, const UserWalk* walk) {
  if (h.walk) --held_walks_;
  decode_record(h.bytes, sink, walk);
  held_bytes_ -= h.bytes.size();
}

void BpfEventDecoder::release_held(const HeldWalker& walker, uint64_t walkable_until_ns,
                                   const EventSink& sink, bool final) {
  for (auto it = held_.begin(); it != held_.end();) {
    std::deque<Held>& records = it->second;
    while (!records.empty()) {
      const Held& h = records.front();
      UserWalk walk;
      HeldWalk how = HeldWalk::kAsIs;
      if (h.walk) {
        hpd_sample_event e;
        // Checked when held (carries_pending_walk); the sizes are checked again by decode_record.
        read_record(std::span<const uint8_t>(h.bytes), e, kSampleHeaderBytes);
        size_t stack_at = kSampleHeaderBytes + (size_t{e.kernel_frames} + e.user_frames) * sizeof(uint64_t);
        std::span<const uint8_t> record(h.bytes);
        if (e.header.type == HPD_EVENT_OFF_CPU) {
          // Its registers and stack are those of its switch-out's copy, decoded before it (its process's
          // records are decoded in their order). The copy has no frames: its stack begins at ips.
          const auto copy = switch_stacks_.find(e.header.tid);
          if (copy != switch_stacks_.end() && copy->second.time_ns == e.header.time_ns) {
            hpd_sample_event c;
            record = std::span<const uint8_t>(copy->second.bytes);
            read_record(record, c, kSampleHeaderBytes);  // checked when decoded
            std::memcpy(e.regs, c.regs, sizeof e.regs);
            e.regs_valid = c.regs_valid;
            e.stack_bytes = c.stack_bytes;
            stack_at = kSampleHeaderBytes;
          } else {
            record = {};  // gone (it cannot be, but then the record keeps its walk)
          }
        }
        const bool sane = e.kernel_frames <= HPD_MAX_KERNEL_FRAMES && e.user_frames <= HPD_MAX_USER_FRAMES &&
                          !record.empty() && stack_at + e.stack_bytes <= record.size();
        if (!walker || !sane)
          how = HeldWalk::kAsIs;
        else if (e.header.time_ns > walkable_until_ns && !final)
          how = HeldWalk::kWait;  // a mapping of its time may still be unread
        else
          how = walker(e, record.subspan(stack_at, e.stack_bytes), walk);
        if (how == HeldWalk::kWait && max_held_age_ns_ != 0 && e.header.time_ns <= walkable_until_ns &&
            walkable_until_ns - e.header.time_ns >= max_held_age_ns_)
          how = HeldWalk::kAsIs;  // waited long enough: its tables may never come
        if (how == HeldWalk::kWait && !final) break;
      }
      emit_held(h, sink, how == HeldWalk::kWalked ? &walk : nullptr);
      records.pop_front();
    }
    if (records.empty()) {
      forget_queue(it->first);
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
}

void BpfEventDecoder::decode_record(std::span<const uint8_t> bytes, const EventSink& sink,
                                    const UserWalk* walk) {
  hpd_event_header header;
  if (!read_record(bytes, header)) {
    ++malformed_;
    return;
  }
  switch (header.type) {
    case HPD_EVENT_ON_CPU:
    case HPD_EVENT_OFF_CPU:
    case HPD_EVENT_EXIT_STACK: {
      hpd_sample_event e;
      if (!read_sample_head(bytes, e) || e.kernel_frames > HPD_MAX_KERNEL_FRAMES ||
          e.user_frames > HPD_MAX_USER_FRAMES || e.stack_bytes > HPD_MAX_STACK_COPY) {
        ++malformed_;
        return;
      }
      const size_t frames = size_t{e.kernel_frames} + e.user_frames;
      const size_t stack_at = kSampleHeaderBytes + frames * sizeof(uint64_t);
      if (bytes.size() < stack_at + e.stack_bytes) {
        ++malformed_;
        return;
      }
      decode_sample(e, bytes.subspan(kSampleHeaderBytes, frames * sizeof(uint64_t)),
                    bytes.subspan(stack_at, e.stack_bytes), bytes.size(), sink, false, walk);
      return;
    }
    case HPD_EVENT_SWITCH_STACK: {
      // Registers and a stack copy where ips begin (no frames); checked when its off-CPU record uses it.
      hpd_sample_event e;
      if (!read_record(bytes, e, kSampleHeaderBytes) || e.stack_bytes > HPD_MAX_STACK_COPY ||
          bytes.size() < kSampleHeaderBytes + e.stack_bytes) {
        ++malformed_;
        return;
      }
      SwitchStack& s = switch_stacks_[header.tid];
      s.time_ns = header.time_ns;
      s.bytes.assign(bytes.begin(), bytes.end());
      return;
    }
    case HPD_EVENT_FORK: {
      hpd_fork_event e;
      if (!read_record(bytes, e)) break;
      const hpd_event_header& h = e.header;
      sink(ForkEvent{h.pid, h.tid, e.parent_pid, e.parent_tid, h.time_ns, comm_view(h)});
      return;
    }
    case HPD_EVENT_EXEC:
    case HPD_EVENT_EXIT:
    case HPD_EVENT_CPU_TAIL: {
      hpd_task_event e;
      if (!read_record(bytes, e)) break;
      const hpd_event_header& h = e.header;
      if (header.type == HPD_EVENT_EXEC) {
        // Written once execve has set the new image's registers: the new image runs from here.
        sink(ExecEvent{h.pid, h.tid, h.time_ns, comm_view(h), true,
                       (e.task_flags & HPD_TASK_UNFOLLOWED) != 0});
      } else if (header.type == HPD_EVENT_EXIT) {
        switch_stacks_.erase(h.tid);
        sink(
            ExitEvent{h.pid, h.tid, h.time_ns, e.ringbuf_drops, (e.task_flags & HPD_TASK_TAIL_FOLLOWS) != 0});
      } else {
        sink(CpuTailEvent{h.pid, h.tid, h.time_ns, e.cpu_tail_ns, e.cpu_excess_ns});
      }
      return;
    }
    default: break;
  }
  ++malformed_;
}

void BpfEventDecoder::decode_sample(const hpd_sample_event& e, std::span<const uint8_t> frames,
                                    std::span<const uint8_t> stack, size_t record_bytes,
                                    const EventSink& sink, bool still_off_cpu, const UserWalk* walk) {
  const hpd_event_header& h = e.header;
  const bool off_cpu = h.type == HPD_EVENT_OFF_CPU;
  // Filled in place: a SampleEvent is a few hundred bytes, not worth a copy per sample.
  SampleEvent& s = event_.emplace<SampleEvent>();
  s.time_ns = h.time_ns;
  s.pid = h.pid;
  s.tid = h.tid;
  s.cpu = h.cpu;
  s.comm = comm_view(h);
  s.record_bytes = record_bytes;
  if (off_cpu) {
    // Switched out runnable (preempted, or yielding): the interval was spent waiting for a CPU.
    s.kind = e.flags & HPD_SAMPLE_PREEMPTED ? SampleKind::kWaitCpu : SampleKind::kOffCpu;
    s.off_cpu_ns = e.off_cpu_ns;
  } else if (h.type == HPD_EVENT_EXIT_STACK) {
    s.kind = SampleKind::kOnCpu;
    s.at_exit = true;
  } else {
    s.kind = SampleKind::kOnCpu;
    s.cpu_delta_ns = e.cpu_delta_ns;
    if (e.flags & HPD_SAMPLE_NO_BASELINE) ++samples_without_baseline_;
  }
  // __u64 is unsigned long long, uint64_t unsigned long: copy rather than alias.
  static_assert(sizeof(e.ips[0]) == sizeof(uint64_t));
  size_t frames_present = std::min(frames.size() / sizeof(uint64_t), ips_.size());
  std::memcpy(ips_.data(), frames.data(), frames_present * sizeof(uint64_t));
  size_t user_frames = e.user_frames;
  uint32_t user_end = e.user_end;
  uint32_t user_fp_frames = e.user_fp_frames;
  bool tables_pending = (e.flags & HPD_SAMPLE_TABLES_PENDING) != 0;
  // The user stack walked again from user space with the tables published: the second walk replaces
  // the programs' frame-pointer walk.
  const auto replace_user = [&](const UserWalk& w) {
    user_frames = std::min<size_t>(w.ips.size(), HPD_MAX_USER_FRAMES);
    std::copy_n(w.ips.begin(), user_frames, ips_.begin() + e.kernel_frames);
    frames_present = size_t{e.kernel_frames} + user_frames;
    user_end = w.end;
    user_fp_frames = w.fp_frames;
    tables_pending = false;
  };
  if (walk != nullptr && !off_cpu && tables_pending) {
    // On-CPU, held with a copy of its stack until the tables were published.
    replace_user(*walk);
    ++on_cpu_rewalked_;
  } else if (off_cpu && tables_pending) {
    // Walked while the thread was still off the CPU, or else from the copy of its switch-out's stack.
    if (const auto it = rewalks_.find(h.tid); it != rewalks_.end() && it->second.time_ns == h.time_ns) {
      replace_user(it->second.walk);
      ++rewalked_;
      rewalks_.erase(it);
    } else if (walk != nullptr) {
      replace_user(*walk);
      ++rewalked_;
      ++off_cpu_rewalked_from_copy_;
    }
  }
  const std::span<const uint64_t> ips(ips_.data(), frames_present);
  s.kernel = ips.first(e.kernel_frames);
  s.user = ips.subspan(e.kernel_frames, user_frames);
  // The programs read whether the thread is in a system call from its user registers (orig_ax).
  s.user_leaf = e.flags & HPD_SAMPLE_IN_SYSCALL ? UserLeaf::kAfterSyscall : UserLeaf::kInterrupted;

  if (user_end < HPD_USER_END_COUNT) ++user_ends_[off_cpu ? 1 : 0][user_end];
  if (tables_pending) ++tables_pending_;
  if (user_fp_frames > 0) ++with_fp_frames_;
  // The programs' walk says how it ended: complete only when it reached the thread's first frame.
  switch (user_end) {
    case HPD_USER_END_NONE:
      // No word (no walk: a kernel thread; or records of older programs): only the limits tell.
      s.walk_end = user_frames >= HPD_MAX_USER_FRAMES || e.kernel_frames >= HPD_MAX_KERNEL_FRAMES
                       ? StackEnd::kTruncated
                       : StackEnd::kUnknown;
      break;
    case HPD_USER_END_ROOT:
    case HPD_USER_END_FP_ZERO: s.walk_end = StackEnd::kComplete; break;
    case HPD_USER_END_DEPTH: s.walk_end = StackEnd::kTruncated; break;
    default: s.walk_end = StackEnd::kFailed; break;
  }
  s.kernel_truncated = e.kernel_frames >= HPD_MAX_KERNEL_FRAMES;
  s.kernel_failed = e.kernel_error < 0;

  const bool have_regs = (e.regs_valid >> static_cast<unsigned>(DwarfReg::kRip) & 1) &&
                         (e.regs_valid >> static_cast<unsigned>(DwarfReg::kRsp) & 1);
  const auto set_user_state = [&](const hpd_sample_event& from, std::span<const uint8_t> copy) {
    UserRegs regs;
    for (size_t i = 0; i < HPD_USER_REGS && i < kDwarfRegCount; ++i) {
      if ((from.regs_valid >> i) & 1) regs.set(static_cast<DwarfReg>(i), from.regs[i]);
    }
    s.regs = regs;
    s.stack = copy;
    s.stack_size = stack_copy_bytes_;
  };
  // Held records' registers and stack served their second walk; the builder's use of them (dwarf
  // unwinding, a frameless leaf's caller) is for the other modes.
  if (have_regs && !off_cpu && !hold_) set_user_state(e, stack);
  // dwarf mode: the copy its switch-out took, which the builder unwinds as an on-CPU sample's; without
  // it the record keeps the programs' frame-pointer walk.
  auto copy = off_cpu ? switch_stacks_.find(h.tid) : switch_stacks_.end();
  if (copy != switch_stacks_.end() && copy->second.time_ns != h.time_ns) copy = switch_stacks_.end();
  if (copy != switch_stacks_.end()) {
    hpd_sample_event c;
    read_record(std::span<const uint8_t>(copy->second.bytes), c, kSampleHeaderBytes);
    const bool has_regs = (c.regs_valid >> static_cast<unsigned>(DwarfReg::kRip) & 1) &&
                          (c.regs_valid >> static_cast<unsigned>(DwarfReg::kRsp) & 1);
    // dwarf mode's copy is the builder's to unwind; cfi mode's served the second walk above.
    if (switch_stacks_expected_) {
      if (has_regs)
        set_user_state(
            c, std::span<const uint8_t>(copy->second.bytes).subspan(kSampleHeaderBytes, c.stack_bytes));
      ++off_cpu_with_copy_;
    }
    s.record_bytes += copy->second.bytes.size();  // its ring traffic: the record and its copy
  } else if (off_cpu && switch_stacks_expected_) {
    ++off_cpu_without_copy_;
  }
  // The copy is dropped once the record (both its samples, when split) has been given to the sink.
  struct DropCopy {
    std::unordered_map<int32_t, SwitchStack>& map;
    std::unordered_map<int32_t, SwitchStack>::iterator it;
    ~DropCopy() {
      if (it != map.end()) map.erase(it);
    }
  } drop_copy{switch_stacks_, copy};
  // A blocked interval whose wakeup was seen: blocked up to the wakeup, then runnable and waiting for
  // a CPU until the switch-in. Two samples with the switch-out's stack, the second at the wakeup.
  // Without a wakeup inside the interval (not seen, or after the recording's end) all of it stays
  // blocked: when the wait began is not known.
  const uint64_t end_ns = h.time_ns + e.off_cpu_ns;
  if (off_cpu && s.kind == SampleKind::kOffCpu && e.woken_ns > h.time_ns && e.woken_ns < end_ns) {
    ++split_at_wakeup_;
    s.off_cpu_ns = e.woken_ns - h.time_ns;
    sink(event_);
    // The sink only reads the event: the same frames serve the second sample, which carries what the
    // scheduler charged the thread for this wait (the programs took it out of its next on-CPU delta).
    s.kind = SampleKind::kWaitCpu;
    s.time_ns = e.woken_ns;
    s.off_cpu_ns = end_ns - e.woken_ns;
    s.cpu_delta_ns = e.charged_ns;
    s.record_bytes = 0;  // the record was counted with the first sample
    if (e.charged_ns != 0) {
      ++charged_waits_;
      charged_ns_ += e.charged_ns;
    }
    sink(event_);
    return;
  }
  if (off_cpu && s.kind == SampleKind::kOffCpu && e.woken_ns == 0 && !still_off_cpu) ++without_wakeup_;
  if (off_cpu && e.charged_ns != 0) {
    // Not split (the programs charge only a wait after a wakeup inside the interval): kept all the same,
    // as the programs took it out of the thread's next on-CPU delta.
    s.cpu_delta_ns = e.charged_ns;
    ++charged_waits_;
    charged_ns_ += e.charged_ns;
  }
  sink(event_);
}

void BpfEventDecoder::replace_off_cpu_user_stack(int32_t tid, uint64_t time_ns, std::vector<uint64_t> ips,
                                                 uint32_t end, uint32_t fp_frames) {
  rewalks_[tid] = OffCpuWalk{time_ns, UserWalk{std::move(ips), end, fp_frames}};
}

void BpfEventDecoder::decode_still_off_cpu(const hpd_sample_event& event, uint64_t end_ns,
                                           const EventSink& sink) {
  if (event.kernel_frames > HPD_MAX_KERNEL_FRAMES || event.user_frames > HPD_MAX_USER_FRAMES) {
    ++malformed_;
    return;
  }
  hpd_sample_event e = event;
  e.header.type = HPD_EVENT_OFF_CPU;
  e.off_cpu_ns = end_ns > e.header.time_ns ? end_ns - e.header.time_ns : 0;
  e.charged_ns = 0;   // in the map: the wakeup's run queue clock; the thread has not run since
  e.stack_bytes = 0;  // a map value carries no stack copy
  const std::span<const uint8_t> frames(reinterpret_cast<const uint8_t*>(e.ips),
                                        (size_t{e.kernel_frames} + e.user_frames) * sizeof(uint64_t));
  decode_sample(e, frames, {}, 0, sink, true);
}

}  // namespace hpd
