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

std::string_view comm_view(const hpd_event_header& header) {
  return {header.comm, strnlen(header.comm, sizeof header.comm)};
}

}  // namespace

std::string comm_of(const hpd_event_header& header) {
  return std::string(comm_view(header));
}

void BpfEventDecoder::decode(std::span<const uint8_t> bytes, const EventSink& sink) {
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
      if (!read_record(bytes, e, kSampleHeaderBytes) || e.kernel_frames > HPD_MAX_KERNEL_FRAMES ||
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
      decode_sample(e, frames, bytes.subspan(stack_at, e.stack_bytes), bytes.size(), sink);
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
        sink(ExitEvent{h.pid, h.tid, h.time_ns, e.ringbuf_drops});
      } else {
        sink(CpuTailEvent{h.pid, h.tid, h.time_ns, e.cpu_tail_ns});
      }
      return;
    }
    default: break;
  }
  ++malformed_;
}

void BpfEventDecoder::decode_sample(const hpd_sample_event& e, size_t frames_present,
                                    std::span<const uint8_t> stack, size_t record_bytes,
                                    const EventSink& sink, bool still_off_cpu) {
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
  std::memcpy(ips_.data(), e.ips, frames_present * sizeof(uint64_t));
  size_t user_frames = e.user_frames;
  uint32_t user_end = e.user_end;
  uint32_t user_fp_frames = e.user_fp_frames;
  bool tables_pending = (e.flags & HPD_SAMPLE_TABLES_PENDING) != 0;
  if (off_cpu && tables_pending) {
    // Walked again from user space while the thread was still off the CPU, with the tables published.
    if (const auto it = rewalks_.find(h.tid); it != rewalks_.end() && it->second.time_ns == h.time_ns) {
      const Rewalk& w = it->second;
      user_frames = std::min<size_t>(w.ips.size(), HPD_MAX_USER_FRAMES);
      std::copy_n(w.ips.begin(), user_frames, ips_.begin() + e.kernel_frames);
      frames_present = size_t{e.kernel_frames} + user_frames;
      user_end = w.end;
      user_fp_frames = w.fp_frames;
      tables_pending = false;
      ++rewalked_;
      rewalks_.erase(it);
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
  if (have_regs && !off_cpu) {
    UserRegs regs;
    for (size_t i = 0; i < HPD_USER_REGS && i < kDwarfRegCount; ++i) {
      if ((e.regs_valid >> i) & 1) regs.set(static_cast<DwarfReg>(i), e.regs[i]);
    }
    s.regs = regs;
    s.stack = stack;
    s.stack_size = stack_copy_bytes_;
  }
  // A blocked interval whose wakeup was seen: blocked up to the wakeup, then runnable and waiting for
  // a CPU until the switch-in. Two samples with the switch-out's stack, the second at the wakeup.
  // Without a wakeup inside the interval (not seen, or after the recording's end) all of it stays
  // blocked: when the wait began is not known.
  const uint64_t end_ns = h.time_ns + e.off_cpu_ns;
  if (off_cpu && s.kind == SampleKind::kOffCpu && e.woken_ns > h.time_ns && e.woken_ns < end_ns) {
    ++split_at_wakeup_;
    s.off_cpu_ns = e.woken_ns - h.time_ns;
    sink(event_);
    // The sink only reads the event: the same frames serve the second sample.
    s.kind = SampleKind::kWaitCpu;
    s.time_ns = e.woken_ns;
    s.off_cpu_ns = end_ns - e.woken_ns;
    s.record_bytes = 0;  // the record was counted with the first sample
    sink(event_);
    return;
  }
  if (off_cpu && s.kind == SampleKind::kOffCpu && e.woken_ns == 0 && !still_off_cpu) ++without_wakeup_;
  sink(event_);
}

void BpfEventDecoder::replace_off_cpu_user_stack(int32_t tid, uint64_t time_ns, std::vector<uint64_t> ips,
                                                 uint32_t end, uint32_t fp_frames) {
  rewalks_[tid] = Rewalk{time_ns, std::move(ips), end, fp_frames};
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
  e.stack_bytes = 0;  // a map value carries no stack copy
  decode_sample(e, size_t{e.kernel_frames} + e.user_frames, {}, 0, sink, true);
}

}  // namespace hpd
