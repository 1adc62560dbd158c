// Pieces both recording backends share: clocks, target liveness, the recording's description, the
// frameless-leaf fix of frame-pointer chains.
#pragma once

#include <time.h>

#include <cstdint>
#include <vector>

#include "hpd/collect/recorder.h"
#include "hpd/unwind/unwinder.h"
#include "util/unique_fd.h"

namespace hpd {

uint64_t clock_ns(clockid_t clock);
inline uint64_t mono_now() {
  return clock_ns(CLOCK_MONOTONIC);
}

// The wall clock at a monotonic instant: the tightest of a few mono/real/mono brackets.
void take_clock_pair(uint64_t& mono, uint64_t& unix_ns);

// A pidfd that becomes readable when the process exits; invalid on kernels without pidfd_open.
UniqueFd open_pidfd(int32_t pid);

// Whether the process is gone, for kernels without pidfd: no /proc entry, or a zombie without live threads.
bool process_gone(int32_t pid);

// Lifts the soft open-file limit to the hard one (one perf fd per thread and CPU adds up).
void raise_fd_limit();

// The options' target in words ("pid 12", "all processes", "cgroup /sys/fs/cgroup/x", the command),
// plus host name and kernel release, into `info`.
void describe_recording(const RecordOptions& options, RecordingInfo& info);

// fp mode: the kernel's frame-pointer walk goes from a frameless leaf (glibc's memmove, a function
// before its prologue) to the frame of the leaf's caller's caller; the leaf's own return address is
// only on the stack. Inserts it after the leaf of `user` (leaf first, user[0] == regs.ip()) unless it
// is already there; returns whether it did.
bool insert_frameless_leaf_caller(Unwinder& unwinder, const UnwindContext& context, const UserRegs& regs,
                                  const StackCopy& stack, std::vector<uint64_t>& user);

}  // namespace hpd
