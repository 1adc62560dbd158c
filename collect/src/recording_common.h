// Pieces both recording backends share: clocks, target liveness, the recording's description, the
// frameless-leaf fix of frame-pointer chains.
#pragma once

#include <poll.h>
#include <time.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hpd/base/process.h"
#include "hpd/base/unique_fd.h"
#include "hpd/collect/recorder.h"
#include "hpd/unwind/unwinder.h"

namespace hpd {

class RawProfileBuilder;

uint64_t clock_ns(clockid_t clock);
inline uint64_t mono_now() {
  return clock_ns(CLOCK_MONOTONIC);
}

// The wall clock at a monotonic instant: the tightest of a few mono/real/mono brackets.
void take_clock_pair(uint64_t& mono, uint64_t& unix_ns);

// Fills what /proc says of a live process into its description: executable, command line, cgroup,
// and its name when it has none yet (each left as it is when unreadable). Both backends' one reader.
void describe_process_from_proc(RawProcess& process);

// Whether the process has ended, for kernels without pidfd: no such process (no_such_process), no /proc
// entry, or a zombie without live threads (which no_such_process counts as there).
bool process_ended(int32_t pid);

// The pidfds the targets (options.target.pids) are bound to, in order: those options.pid_fds lends,
// duplicated, else opened now (invalid on kernels without pidfd_open).
std::vector<UniqueFd> bind_targets(const RecordOptions& options);

// Throws RecordError unless every target is still the process it was bound to and still running (a
// thread of it has not begun to exit): called once the events are attached and /proc was read by
// number, it proves that all of that reached the bound processes, not another that got a pid, and that
// the kernel-side exit hooks will see each target leave.
void check_targets_running(const std::vector<int32_t>& pids, const std::vector<UniqueFd>& pidfds);

// The recording's command (RecordOptions::target.command): base's LaunchedCommand, forked and held before its
// exec so that the events attached to its pid see the exec, then let run; their errors as RecordError.
std::unique_ptr<LaunchedCommand> launch_command(const std::vector<std::string>& argv,
                                                const std::vector<std::string>& environment);
// The command a recording holds until its events are attached: the one it launched (`command`, let run
// here), or the target a launcher holds stopped at its exec (RecordOptions::pid_held_at_exec, let run
// by on_attached, right after this). Until then it ran none of its program: from the release on, its
// samples are the program's (RawProfileBuilder::drop_samples_before drops those of the hold: through
// hpd, the stopped thread blocked in ptrace_stop). Returns the release (monotonic ns; 0: none held).
uint64_t release_command(LaunchedCommand* command, const RecordOptions& options, RawProfileBuilder& builder);
// At the recording's end, once every sample is in: the launched command reaped (terminated first when
// the recording was stopped early, or when it does not end by itself) and its exit status kept; the held
// command's process, and its threads seen from the recording's start, begin at its release, not at the
// recording's start (the Firefox Profiler shows "not started yet" there, rather than an empty buffer).
void finish_command(LaunchedCommand* command, const RecordOptions& options, uint64_t released_ns,
                    bool stopped_early, RecordResult& result);

// A recorded process and how its exit is noticed: its pidfd is polled beside the rings; without
// one (old kernels) /proc is checked, or the launched command reaped.
struct WatchedTarget {
  int32_t pid = 0;
  UniqueFd pidfd;
  bool exited = false;
};

// Updates the targets' `exited` from a poll round whose entries first_target.. are the targets'
// pidfds, in order; reaps the launched command (if any) once its process is gone. Returns whether
// every target has exited (false when there are none, as with --all).
bool update_targets_exited(std::vector<WatchedTarget>& targets, const std::vector<pollfd>& pfds,
                           size_t first_target, LaunchedCommand* command);

// Whether, right after an on_flush, the recording lets go of the stacks only its released samples'
// sums name (RecordOptions::stack_memory_bound): every sample was released (a sample held names a stack
// of this generation) and the stacks and sums take more than the bound.
bool released_stacks_due(const RecordOptions& options, const RawProfile& profile);

// The per-round decisions of a backend's poll loop: whether the recording ends (every target
// exited, a stop was requested, the duration is over) and when to call on_progress and on_flush
// (every 250 ms). Both backends use it so that they end and report alike.
class RecordingTicker {
 public:
  enum class Outcome { kContinue, kTargetsExited, kStopped };
  RecordingTicker(const RecordOptions& options, uint64_t start_ns);
  // Called after each poll round and drain; `all_exited` comes from update_targets_exited().
  Outcome tick(bool all_exited, uint64_t samples, RawProfile& profile);
  // What drops the profile's exited processes and unused stacks when RecordOptions::forget_before
  // asks for it (RawProfileBuilder::forget_exited).
  void set_forget(std::function<void(uint64_t exited_before_ns)> forget) { forget_ = std::move(forget); }
  // What lets go of the released samples' stacks when RecordOptions::stack_memory_bound is reached
  // (RawProfileBuilder::forget_released_stacks).
  void set_forget_stacks(std::function<void()> forget) { forget_stacks_ = std::move(forget); }

 private:
  const RecordOptions& options_;
  std::function<void(uint64_t)> forget_;
  std::function<void()> forget_stacks_;
  uint64_t start_ns_;
  uint64_t duration_ns_;
  uint64_t last_progress_;
  uint64_t last_flush_;
};

// Lifts the soft open-file limit to the hard one (one perf fd per thread and CPU adds up).
void raise_fd_limit();

// Whether the recording may follow process `pid`, a child of its targets that was running when it
// began: with RecordOptions::restrict_to_client, only one that runs with the client's uid and gid (all
// of its real, effective, saved and filesystem ids), the rule the eBPF exec hook applies at an exec.
bool may_follow_child(const RecordOptions& options, int32_t pid);

// The descriptors the events of the targets' child processes found at the start may take: those of
// the open-file limit not open yet, but kReserved, which the rest of the recording needs (the targets'
// pidfds, the capture, the modules read to symbolize): a target with thousands of descendants on many
// CPUs would exhaust the limit.
class DescriptorBudget {
 public:
  static constexpr size_t kReserved = 256;
  DescriptorBudget();  // counts the descriptors open now
  // Whether `n` more fit; they are counted as taken when they do.
  bool take(size_t n);
  // Why a child was left, for RecordResult::children_attach_error; `each`: whose events take one
  // descriptor per CPU ("thread", "process").
  [[nodiscard]] std::string refusal(const std::string& each) const;

 private:
  bool limited_ = false;
  uint64_t limit_ = 0;
  size_t in_use_ = 0;
};

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
