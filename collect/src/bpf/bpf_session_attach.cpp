// An eBPF recording's attach: the sampling program driven by perf events per thread or per CPU, and the
// call-counting runtime's uprobe (bpf_session.h).
#include "bpf/bpf_session.h"

#include <linux/perf_event.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "hpd/base/proc_files.h"
#include "hpd/base/process.h"
#include "hpd/calls/preload_abi.h"

namespace hpd::bpf_recording {

namespace {

// Pid and command targets are sampled with one inherited task-clock event per thread: its timer runs
// only while the thread runs, so neither the target's CPU nor an idle one takes interrupts that
// find nothing to record (per-CPU events cost the target ~15 us more per sample on the project's
// machine, docs/performance.md). Beyond this many threads (two descriptors each) per-CPU events
// are cheaper to hold.
constexpr size_t kMaxPerTaskEvents = 4096;
// Rounds of looking for threads that a not-yet-attached thread created during the attach.
constexpr int kMaxAttachRescans = 8;

// The process ran out of file descriptors while attaching per-thread events (two each).
class OutOfDescriptors : public RecordError {
 public:
  using RecordError::RecordError;
};

}  // namespace

// A command that runs hpd's call-counting runtime: each of its processes announces where it keeps the
// return addresses its hook replaced, and the walkers put them back (calls_unwind.bpf.h). Without the
// uprobe, stacks of instrumented code end at the hook; the recording goes on and says so.
// The walkers read the runtime's shadow stacks with the layout preload_abi.h gives.
static_assert(HPD_CALLS_RT_STATE_SHADOW == HPD_CALLS_STATE_SHADOW_OFFSET);
static_assert(HPD_CALLS_RT_STATE_DEPTH == HPD_CALLS_STATE_DEPTH_OFFSET);
static_assert(sizeof(hpd_calls_rt_frame) == sizeof(hpd_calls_shadow_frame));
static_assert(offsetof(hpd_calls_rt_frame, slot) == offsetof(hpd_calls_shadow_frame, slot));
static_assert(offsetof(hpd_calls_rt_frame, original) == offsetof(hpd_calls_shadow_frame, original));
static_assert(offsetof(hpd_calls_rt_frame, restored) == offsetof(hpd_calls_shadow_frame, restored));

void BpfSession::attach_calls_unwind(const std::string& runtime) {
  if (runtime.empty()) return;
  LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = HPD_CALLS_ANNOUNCE_SYMBOL);
  calls_announce_.reset(
      bpf_program__attach_uprobe_opts(skel_->progs.hpd_calls_announced, -1, runtime.c_str(), 0, &opts));
  if (!calls_announce_) {
    calls_->note("call counts: stacks of instrumented code end at the runtime's return hook (cannot probe " +
                 runtime + ": " + errno_text(errno) + ")");
    return;
  }
  skel_->bss->calls_runtime_active = 1;
  // dwarf mode unwinds on-CPU stacks in user space, from a copy, where the shadow stack is out of reach.
  if (!dwarf_) calls_->set_stacks_through_hook();
}

void BpfSession::attach_sampling() {
  // Tracepoints first, so that no fork or exec of a target between them and sampling is missed.
  if (const int err = profile_bpf__attach(skel_.get()); err != 0)
    throw RecordError(with_log("cannot attach the eBPF scheduler hooks: " + errno_text(err), log_));
  if (filter_ != HPD_FILTER_PIDS || !attach_per_task()) attach_per_cpu();
  add_descendants();
}

bool BpfSession::attach_per_task() {
  size_t threads = command_ ? 1 : 0;
  for (const int32_t pid : options_.target.pids) threads += list_threads(pid).size();
  if (threads > kMaxPerTaskEvents) return false;
  raise_fd_limit();
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      limit.rlim_cur < 2 * threads + 256)
    return false;
  per_task_ = true;
  try {
    // The launched command has not exec'd yet: its one event is inherited by everything it starts.
    if (command_ && !attach_thread(command_->pid(), period_ns_))
      throw RecordError("cannot sample the launched command: it exited before it started");
    for (const int32_t pid : options_.target.pids) {
      if (attach_process(pid, period_ns_) == 0)
        throw RecordError("no process with pid " + std::to_string(pid) + " (it exited)");
    }
  } catch (const OutOfDescriptors&) {
    // Other sessions (in hpd) hold descriptors too: per-CPU events need only a few. The samples
    // already taken stay; the program's period check accepts the per-CPU events' period.
    sampling_.clear();
    per_task_ = false;
    return false;
  }
  return true;
}

size_t BpfSession::attach_process(int32_t pid, uint64_t period_ns) {
  std::set<int32_t> seen;
  size_t attached = 0;
  for (const int32_t tid : list_threads(pid)) {
    seen.insert(tid);
    attached += attach_thread(tid, period_ns) ? 1 : 0;
  }
  // A thread created meanwhile by a thread not yet attached inherited nothing; one created by an
  // attached thread inherited its event and gets a second one here. The second has a longer period
  // (by the round number, in ns), by which the sampling program tells the copy apart and drops it.
  for (int round = 1; round <= kMaxAttachRescans; ++round) {
    bool found = false;
    for (const int32_t tid : list_threads(pid)) {
      if (!seen.insert(tid).second) continue;
      found = true;
      attached += attach_thread(tid, period_ns + static_cast<uint64_t>(round)) ? 1 : 0;
    }
    if (!found) break;
  }
  return attached;
}

// A process forked before the events it would inherit were opened has none: its threads get events of
// their own. Those of a child forked after its parent's events were opened (which add_descendants finds
// too) are copies of those it inherited, which the sampling program drops: their period is larger than
// any of its parent's, by kMaxAttachRescans + 1 ns per generation.
void BpfSession::sample_descendant(int32_t pid, int generation, DescriptorBudget& budget) {
  if (!per_task_) return;
  const size_t threads = list_threads(pid).size();
  if (sampling_.size() + threads <= kMaxPerTaskEvents && budget.take(2 * threads)) {
    try {
      attach_process(pid, period_ns_ + static_cast<uint64_t>(kMaxAttachRescans + 1) *
                                           static_cast<uint64_t>(generation + 1));
      return;
    } catch (const OutOfDescriptors&) {
    }
  }
  // Too many threads, or too few descriptors: every target, descendants included, is sampled per CPU.
  sampling_.clear();
  per_task_ = false;
  attach_per_cpu();
  budget = DescriptorBudget();  // counted again: the per-task events' descriptors are free
}

// Opens a software clock event on `pid` (a thread, or -1) and `cpu` (or -1) and drives the sampling
// program with it. False when the errno says the thread or CPU is gone; throws on any other failure.
bool BpfSession::attach_clock(uint64_t config, uint64_t period_ns, int pid, int cpu,
                              const std::string& what) {
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = config;
  attr.sample_period = period_ns;
  attr.inherit = pid != -1;  // new threads and child processes; the program filters the children
  UniqueFd fd(static_cast<int>(::syscall(SYS_perf_event_open, &attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)));
  if (!fd) {
    if (errno == ESRCH || errno == ENODEV || errno == ENOENT) return false;
    if (errno == EMFILE || errno == ENFILE)
      throw OutOfDescriptors("cannot open the sampling event of " + what + ": " + std::strerror(errno));
    throw RecordError("cannot open the sampling event of " + what + ": " + std::strerror(errno));
  }
  Link link(bpf_program__attach_perf_event(skel_->progs.hpd_on_cpu, fd.get()));
  if (!link && (errno == EMFILE || errno == ENFILE))
    throw OutOfDescriptors("cannot attach the sampling program to " + what + ": " + errno_text(errno));
  if (!link)
    throw RecordError(
        with_log("cannot attach the sampling program to " + what + ": " + errno_text(errno), log_));
  fd.release();  // the link closes it
  sampling_.push_back(std::move(link));
  return true;
}

bool BpfSession::attach_thread(int32_t tid, uint64_t period_ns) {
  return attach_clock(PERF_COUNT_SW_TASK_CLOCK, period_ns, tid, -1, "thread " + std::to_string(tid));
}

void BpfSession::attach_per_cpu() {
  for (const int cpu : cpus_)
    attach_clock(PERF_COUNT_SW_CPU_CLOCK, period_ns_, -1, cpu, "CPU " + std::to_string(cpu));
  if (sampling_.empty()) throw RecordError("no online CPU could be sampled");
}

}  // namespace hpd::bpf_recording
