// The events both recording backends decode their rings into, in the RawProfile's terms; the one
// RawProfileBuilder (raw_profile_builder.h) turns them into a profile. Each backend's session has a
// decoder next to it: perf/perf_event_decoder.h (perf_event records), bpf/bpf_event_decoder.h (the
// eBPF programs' records). Strings and spans point into the decoded record: an event is consumed
// before the next record is decoded.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <variant>

#include "hpd/model/raw_profile.h"
#include "hpd/unwind/unwinder.h"

namespace hpd {

struct MappedModule;  // proc/build_id.h

// A timer sample of a running thread (kOnCpu), or an interval a thread spent off the CPU: blocked
// (kOffCpu) or runnable, waiting for a CPU (kWaitCpu).
struct SampleEvent {
  uint64_t time_ns = 0;  // CLOCK_MONOTONIC
  int32_t pid = 0;
  int32_t tid = 0;
  uint32_t cpu = 0;
  // The thread's name when the record carries it (eBPF records do): a name the thread gave itself
  // shows here before any other record says so. Empty: not carried.
  std::string_view comm;
  SampleKind kind = SampleKind::kOnCpu;
  uint64_t cpu_delta_ns = 0;         // on-CPU: the thread's CPU time since its previous sample
  uint64_t off_cpu_ns = 0;           // kOffCpu, kWaitCpu: how long the thread stayed off the CPU
  std::span<const uint64_t> kernel;  // leaf first
  std::span<const uint64_t> user;    // leaf first, as the collector walked it
  // How the collector's walk of these frames ended, as its record says (kUnknown: it does not say).
  // The builder replaces it when it unwinds the user stack itself.
  StackEnd walk_end = StackEnd::kUnknown;
  // The user part is a frame-pointer chain that stopped by itself (walk_end kComplete): it is whole
  // only if its last frame is its thread's first; the builder checks that against the CFI.
  bool fp_chain_ended = false;
  bool kernel_truncated = false;  // the kernel part filled the collector's limit
  bool kernel_failed = false;  // the kernel part could not be read: the stack failed, whatever the user part
  bool user_mode = false;      // known to be taken in user mode (perf's cpumode); false: unknown
  // What the user leaf (the thread's user pc) is: the instruction it was interrupted at (user mode,
  // an interrupt, an exception, a preemption) or the one after `syscall`. Unset: the collector does
  // not know, and the builder presumes it from the kernel part (presumed_user_leaf).
  std::optional<UserLeaf> user_leaf;
  // The user registers and the copied top of the user stack, for unwinding in user space (dwarf) or
  // for the frameless leaf's caller (fp). `stack_size` is the copy that was asked for (0 = unknown).
  std::optional<UserRegs> regs;
  std::span<const uint8_t> stack;
  uint64_t stack_size = 0;
  // dwarf mode, no user registers although the sample was taken in user mode: the user stack is lost.
  bool user_state_lost = false;
  // The collector takes no stack for this sample by design (perf_event's off-CPU intervals come from
  // switch records): no stack, and no failed one.
  bool no_stack_taken = false;
  // Not a sample: the stack where the thread exits (eBPF), kept for the CPU time it used after its
  // last sample (CpuTailEvent). It carries no CPU time of its own.
  bool at_exit = false;
  size_t record_bytes = 0;  // the record's size, for the bytes-per-sample statistics
};

// An executable mapping made (perf MMAP2, also read by the eBPF backend's mmap watch).
struct MmapEvent {
  int32_t pid = 0;
  uint64_t time_ns = 0;  // 0: unknown (before the recording)
  uint64_t start = 0;
  uint64_t length = 0;
  uint64_t file_offset = 0;
  std::string_view path;
  std::string_view build_id;  // lower-case hex when the record carries one
  // What the live process told of the mapping's file when the record was read, if it was asked
  // already (the eBPF session asks once for its unwind tables and the profile): not asked again.
  const MappedModule* found = nullptr;
};

// A thread's name changed (prctl, pthread_setname_np), not by an exec.
struct CommEvent {
  int32_t pid = 0;
  int32_t tid = 0;
  uint64_t time_ns = 0;
  std::string_view name;
};

// An exec began: the kernel is about to map the new image (perf's COMM record with the exec flag,
// written before the new image's MMAP2 records). Mappings made before it are the old image's.
struct ExecStartEvent {
  int32_t pid = 0;
  uint64_t time_ns = 0;
};

// A process exec'd: its new name, path and arguments can be read.
struct ExecEvent {
  int32_t pid = 0;
  int32_t tid = 0;
  uint64_t time_ns = 0;
  std::string_view name;
  // The record was written once execve had set the new image's registers (the eBPF exec record): the
  // old image's mappings end here. false (perf): they end at the first sample showing the new image.
  bool image_running = false;
  // The exec gave the process credentials the client may not trace: not followed from here on.
  bool unfollowed = false;
};

// A thread or process was created.
struct ForkEvent {
  int32_t pid = 0;
  int32_t tid = 0;
  int32_t parent_pid = 0;
  int32_t parent_tid = 0;
  uint64_t time_ns = 0;
  std::string_view name;  // the new task's name when the record carries it; else the creator's
};

// A thread exited.
struct ExitEvent {
  int32_t pid = 0;
  int32_t tid = 0;
  uint64_t time_ns = 0;
  uint64_t records_lost = 0;  // this thread's records the ring dropped (eBPF)
  bool tail_follows = false;  // a CpuTailEvent of this thread will come (eBPF)
};

// The CPU time a thread used after its last timer sample, known at its last switch-out; or how much
// CPU time its last samples were given that was not its own (excess_ns: their runtime, brought up to
// the sample's instant, was ahead of the thread's final one).
struct CpuTailEvent {
  int32_t pid = 0;
  int32_t tid = 0;
  uint64_t time_ns = 0;
  uint64_t cpu_ns = 0;
  uint64_t excess_ns = 0;
};

// Records the kernel could not deliver (a full ring), and sampling throttled by the kernel.
struct LostEvent {
  uint64_t records = 0;
  uint64_t throttles = 0;
};

// Records of one thread that a ring dropped, counted per thread by the collector (the total is
// counted apart, as a LostEvent or the collector's global counter).
struct ThreadLostEvent {
  int32_t pid = 0;
  int32_t tid = 0;
  uint64_t records = 0;
};

using Event = std::variant<SampleEvent, MmapEvent, CommEvent, ExecStartEvent, ExecEvent, ForkEvent, ExitEvent,
                           CpuTailEvent, LostEvent, ThreadLostEvent>;

}  // namespace hpd
