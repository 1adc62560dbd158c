// perf_event recording: attach, read rings until the end, build the RawProfile.
//
// The kernel refuses mmap() of an inherited per-task event opened with cpu == -1, so each existing
// thread gets one inherited event per CPU. The first event on a CPU owns that CPU's ring buffer and the
// others are redirected into it with PERF_EVENT_IOC_SET_OUTPUT. Threads and processes created later
// inherit the events of their creator; the child processes a --pid target has when it is attached
// (and theirs) are attached too.
#include "perf/perf_recorder.h"

#include <linux/perf_event.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <set>

#include "bpf/sched_frames.h"
#include "hpd/base/proc_files.h"
#include "hpd/base/proc_maps.h"
#include "hpd/base/process.h"
#include "hpd/base/unique_fd.h"
#include "hpd/symbolizer/symbolizer.h"
#include "kernel_symbols_kept.h"
#include "perf/perf_event_decoder.h"
#include "perf/perf_records.h"
#include "perf/record_ordering.h"
#include "perf/ring_buffer.h"
#include "proc/build_id.h"
#include "raw_profile_builder.h"
#include "recording_calls.h"
#include "recording_common.h"

namespace hpd {

namespace {

constexpr int kPollTimeoutMs = 100;
constexpr int kMaxRescans = 16;

int perf_event_open(perf_event_attr* attr, pid_t pid, int cpu) {
  return static_cast<int>(::syscall(SYS_perf_event_open, attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC));
}

// The stack bytes copied per sample: the dwarf copy, or in fp mode just enough for the frameless
// leaf's return address (CFI puts it within the first few dozen bytes).
constexpr uint32_t kLeafStackBytes = 256;

uint32_t stack_copy_bytes(const RecordOptions& options) {
  if (options.call_graph != CallGraph::kDwarf && !options.fp_with_cfi_fallback) return kLeafStackBytes;
  return options.stack_copy_bytes == 0 ? kDefaultStackCopyBytes : options.stack_copy_bytes;
}

// The smallest ring choose_ring_pages gives, and the smallest a refused ring is made (64 KiB).
constexpr size_t kMinRingPages = 16;

// The reader is woken when a quarter of the ring is written.
uint32_t wakeup_mark(size_t ring_pages) {
  return static_cast<uint32_t>(ring_pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) / 4);
}

// Ring size: about half a second of samples per CPU at ~512 bytes each plus the stack copy, within
// [16, 1024] pages (a dwarf copy of 32 KiB at 999 Hz fills 4 MiB in an eighth of a second, but the
// reader wakes at a quarter of the ring).
size_t choose_ring_pages(const RecordOptions& options) {
  if (options.ring_pages != 0) return options.ring_pages;
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t bytes = uint64_t{options.frequency_hz} * (512 + stack_copy_bytes(options)) / 2;
  size_t pages = kMinRingPages;
  while (pages < 1024 && pages * page < bytes) pages *= 2;
  return pages;
}

class PerfSession {
 public:
  PerfSession(const RecordOptions& options, const PerfPrivileges& privileges)
      : options_(options), privileges_(privileges), cpus_(online_cpus()), rings_(cpus_.size()) {
    kernel_frames_ =
        options.kernel == Switch::kOn || (options.kernel == Switch::kAuto && privileges.may_see_kernel());
    max_stack_ = static_cast<uint32_t>(std::clamp(privileges.max_stack, 1, 65535));
    ring_pages_ = choose_ring_pages(options);
    init_attr();
  }

  RecordResult run();

 private:
  struct CpuRing {
    UniqueFd owner;
    PerfRingBuffer ring;
    uint64_t read_end = 0;  // where the next read starts; the space before it is freed up to the
                            // ring's oldest record the ordering stage still holds in place
  };
  void init_attr();
  void apply_variant();
  UniqueFd open_event(int32_t pid, int32_t tid, int cpu);
  bool attach_thread(int32_t pid, int32_t tid, std::vector<uint64_t>* own_ids);
  bool map_ring(int32_t pid, int32_t tid, size_t cpu_index, UniqueFd& fd, bool may_reopen);
  bool attach_process(int32_t pid, bool all_own_ids);
  void attach_descendants();
  struct ProcessSnapshot;
  ProcessSnapshot snapshot(int32_t pid);
  void apply_snapshot(ProcessSnapshot& state);
  void add_attached(ProcessSnapshot& state);
  void add_threads(int32_t pid, const std::vector<std::pair<int32_t, std::string>>& names);
  void describe_process(RawProcess& process);
  void describe_launched();
  void apply_launched();
  void drain_all();
  void deliver_before(uint64_t time_ns);
  void release_rings();
  bool poll_once(std::vector<pollfd>& pfds);
  void fill_info();

  const RecordOptions& options_;
  PerfPrivileges privileges_;
  std::vector<int> cpus_;
  std::vector<CpuRing> rings_;  // parallel to cpus_
  std::vector<UniqueFd> redirected_;
  // Every event opened on a thread (owned by rings_ or redirected_), for its count at the end: the
  // thread's CPU time after its last sample on that CPU (PerfEventDecoder::finish_cpu_tails).
  struct DirectEvent {
    int32_t pid = 0;
    int32_t tid = 0;
    uint32_t cpu = 0;
    uint64_t id = 0;  // filled in once the decoder exists
    int fd = -1;
  };
  std::vector<DirectEvent> direct_;
  std::vector<WatchedTarget> targets_;
  std::unique_ptr<LaunchedCommand> command_;
  uint64_t released_ns_ = 0;  // when the launched or held-at-exec command was let run
  std::unique_ptr<RecordingCallCounter> calls_;
  bool launched_described_ = false;

  perf_event_attr attr_{};
  bool attr_settled_ = false;
  size_t variant_ = 0;  // index into the attribute fallbacks, see apply_variant()
  bool kernel_frames_ = false;
  uint32_t max_stack_ = 127;
  size_t ring_pages_ = 16;

  std::set<int32_t> attached_;
  std::vector<std::pair<int32_t, std::vector<uint64_t>>> own_ids_;
  RecordResult result_;
  HostStealMeter steal_;
  BuildIdReader build_ids_;
  // The ring's records, put in time order (ordering_), become events (decoder_), which the one
  // builder turns into the profile.
  std::unique_ptr<RecordOrdering> ordering_;
  RecordOrdering::Deliver to_decoder_;
  std::unique_ptr<PerfEventDecoder> decoder_;
  std::unique_ptr<RawProfileBuilder> builder_;
  EventSink to_builder_;
  // One per recording: its CFI and rule caches serve every process of the recording.
  Unwinder unwinder_;
  RecordLayout layout_;
  std::vector<uint8_t> scratch_;
  // A process as /proc showed it at `time_ns`.
  struct ProcessSnapshot {
    uint64_t time_ns = 0;
    RawProcess process;
    std::vector<std::pair<int32_t, std::string>> threads;
    std::vector<MapsEntry> maps;
  };
  // The launched command after its exec: handed to the builder when the records up to that time have
  // been delivered.
  std::optional<ProcessSnapshot> launched_;
  // Child processes of the --pid targets attached because they existed at the attach (and theirs), as
  // /proc showed them then (a child may be gone by the time the builder exists).
  std::vector<ProcessSnapshot> descendants_;
};

void PerfSession::init_attr() {
  perf_event_attr& a = attr_;
  std::memset(&a, 0, sizeof a);
  a.size = sizeof a;
  a.type = PERF_TYPE_SOFTWARE;
  a.config = options_.event == SamplingEvent::kCpuClock ? PERF_COUNT_SW_CPU_CLOCK : PERF_COUNT_SW_TASK_CLOCK;
  a.sample_period = std::max<uint64_t>(1, 1'000'000'000ULL / options_.frequency_hz);
  a.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ID | PERF_SAMPLE_CPU |
                  PERF_SAMPLE_PERIOD | PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_READ | PERF_SAMPLE_REGS_USER |
                  PERF_SAMPLE_STACK_USER;
  // fp: the kernel walks the frame pointers; the registers that locate the frameless leaf's return
  // address come along. dwarf: the kernel part of the chain only, and every register CFI may name.
  // fp with the CFI fallback: the frame-pointer chain, and what a CFI unwinding needs.
  const bool dwarf = options_.call_graph == CallGraph::kDwarf;
  a.sample_regs_user = dwarf || options_.fp_with_cfi_fallback ? kPerfRegsUnwind : kPerfRegsMinimal;
  a.sample_stack_user = stack_copy_bytes(options_);
  if (dwarf) {
    a.exclude_callchain_user = 1;
    if (!kernel_frames_) a.sample_type &= ~static_cast<uint64_t>(PERF_SAMPLE_CALLCHAIN);
  }
  a.read_format = 0;
  a.inherit = 1;
  // An inherited event's final count is written (PERF_RECORD_READ) when its task exits: the thread's
  // CPU time after its last sample on that CPU.
  a.inherit_stat = 1;
  a.mmap = 1;
  a.mmap2 = 1;
  a.comm = 1;
  a.comm_exec = 1;
  a.task = 1;
  a.sample_id_all = 1;
  a.use_clockid = 1;
  a.clockid = CLOCK_MONOTONIC;
  // No attr.build_id: with it the kernel marks the mmap records of every other session that watches
  // the same tasks as carrying build-ids (mmap_watch.cpp); build-ids are read from the files.
  // --off-cpu: a record at each context switch of a target thread, paired into off-CPU intervals by
  // the decoder (PERF_RECORD_MISC_SWITCH_OUT_PREEMPT tells a thread left runnable from a blocked one).
  a.context_switch = options_.off_cpu == Switch::kOn ? 1 : 0;
  a.exclude_hv = 1;
  a.exclude_kernel = kernel_frames_ ? 0 : 1;
  a.exclude_callchain_kernel = kernel_frames_ ? 0 : 1;
  a.sample_max_stack = static_cast<uint16_t>(max_stack_);
  // A launched command is attached before exec; counting starts with the new program.
  a.disabled = options_.target.command.empty() ? 0 : 1;
  a.enable_on_exec = options_.target.command.empty() ? 0 : 1;
  a.watermark = 1;
  a.wakeup_watermark = wakeup_mark(ring_pages_);
}

// Fallback for older kernels, tried when the first open fails with EINVAL:
// 0: PERF_SAMPLE_READ, 1: without it (READ + inherit needs 6.12).
void PerfSession::apply_variant() {
  if (variant_ == 0)
    attr_.sample_type |= PERF_SAMPLE_READ;
  else
    attr_.sample_type &= ~static_cast<uint64_t>(PERF_SAMPLE_READ);
}

UniqueFd PerfSession::open_event(int32_t pid, int32_t tid, int cpu) {
  for (;;) {
    const int fd = perf_event_open(&attr_, tid, cpu);
    if (fd >= 0) {
      attr_settled_ = true;
      return UniqueFd(fd);
    }
    const int err = errno;
    if (err == EINTR) continue;
    if (!attr_settled_ && (err == EINVAL || err == E2BIG || err == EOPNOTSUPP) && variant_ < 1) {
      ++variant_;
      apply_variant();
      continue;
    }
    if (err == ESRCH) return UniqueFd();
    throw RecordError(perf_open_error_message(err, pid, tid, privileges_));
  }
}

// Maps CPU `cpu_index`'s ring on `fd`, the event of `tid` that owns it. Over the locked-memory limit, the
// rings are made smaller, down to the smallest the recording would choose, and said in the summary
// (RecordResult::perf_ring_kib): the events of this thread's CPUs so far, whose rings took the limit,
// are opened again with the smaller ring's wake-up mark and mapped at the new size, provided nothing was
// written in their rings and no other event sends to them (else the limit stays an error). False when
// the thread exited meanwhile.
bool PerfSession::map_ring(int32_t pid, int32_t tid, size_t cpu_index, UniqueFd& fd, bool may_reopen) {
  int err = 0;
  size_t failed = cpu_index;
  const auto map_one = [&](size_t j, int event_fd) {
    try {
      rings_[j].ring = PerfRingBuffer::map(event_fd, ring_pages_);
      rings_[j].read_end = rings_[j].ring.view().header->data_tail;
      return true;
    } catch (const std::system_error& e) {
      err = e.code().value();
      failed = j;
      return false;
    }
  };
  if (map_one(cpu_index, fd.get())) return true;
  for (;;) {
    const bool over_limit = err == EPERM || err == ENOMEM;
    bool untouched = may_reopen && redirected_.empty();
    for (size_t j = 0; j < cpu_index; ++j)
      untouched &= !rings_[j].ring.mapped() || rings_[j].ring.view().header->data_head == 0;
    if (!over_limit || ring_pages_ <= kMinRingPages || !untouched) {
      std::string text = "cannot map a perf ring buffer of " + std::to_string(ring_pages_ * 4) +
                         " KiB for CPU " + std::to_string(cpus_[failed]) + ": " + std::strerror(err);
      if (over_limit) {
        text += "; it exceeds the locked-memory limit (/proc/sys/kernel/perf_event_mlock_kb is " +
                read_first_line("/proc/sys/kernel/perf_event_mlock_kb").value_or("?") +
                ", shared by all of this user's processes): raise RLIMIT_MEMLOCK, or run as root";
      }
      throw RecordError(text);
    }
    if (result_.perf_ring_kib_asked == 0) result_.perf_ring_kib_asked = ring_pages_ * 4;
    ring_pages_ /= 2;
    result_.perf_ring_kib = ring_pages_ * 4;
    attr_.wakeup_watermark = wakeup_mark(ring_pages_);
    for (size_t j = 0; j < cpu_index; ++j) {
      rings_[j].ring = PerfRingBuffer();  // unmapped first: its pages leave the limit
      rings_[j].owner.reset();
    }
    bool all = true;
    for (size_t j = 0; j <= cpu_index && all; ++j) {
      UniqueFd& owner = j == cpu_index ? fd : rings_[j].owner;
      owner = open_event(pid, tid, cpus_[j]);
      if (!owner) return false;
      all = map_one(j, owner.get());
    }
    if (all) return true;
  }
}

bool PerfSession::attach_thread(int32_t pid, int32_t tid, std::vector<uint64_t>* own_ids) {
  // Per CPU, this thread's event: the ring's owner, or one redirected into it.
  std::vector<const UniqueFd*> opened(cpus_.size(), nullptr);
  for (size_t i = 0; i < cpus_.size(); ++i) {
    UniqueFd fd = open_event(pid, tid, cpus_[i]);
    if (!fd) return false;  // the thread exited meanwhile
    if (own_ids != nullptr) {
      uint64_t id = 0;
      if (::ioctl(fd.get(), PERF_EVENT_IOC_ID, &id) == 0) own_ids->push_back(id);
    }
    CpuRing& ring = rings_[i];
    if (!ring.owner) {
      // Events opened again are given new ids: not where the thread's own ids are being collected.
      if (!map_ring(pid, tid, i, fd, own_ids == nullptr)) return false;
      ring.owner = std::move(fd);
      opened[i] = &ring.owner;
      continue;
    }
    if (::ioctl(fd.get(), PERF_EVENT_IOC_SET_OUTPUT, ring.owner.get()) != 0) {
      throw RecordError("cannot redirect the perf event of thread " + std::to_string(tid) + " on CPU " +
                        std::to_string(cpus_[i]) + " into its ring buffer: " + std::strerror(errno));
    }
    redirected_.push_back(std::move(fd));
    direct_.push_back(DirectEvent{pid, tid, static_cast<uint32_t>(cpus_[i]), 0, redirected_.back().get()});
  }
  // The ring owners' fds are final only now (map_ring may open them again).
  for (size_t i = 0; i < cpus_.size(); ++i) {
    if (opened[i] != nullptr)
      direct_.push_back(DirectEvent{pid, tid, static_cast<uint32_t>(cpus_[i]), 0, opened[i]->get()});
  }
  attached_.insert(tid);
  return true;
}

// Every thread of `pid`; false when none could be attached (it exited). `all_own_ids`: its threads
// may have inherited some events already (a child forked while its parent's events were being
// opened), so that only their own events' samples are kept.
bool PerfSession::attach_process(int32_t pid, bool all_own_ids) {
  std::vector<int32_t> tids = list_threads(pid);
  size_t attached = 0;
  for (const int32_t tid : tids) {
    std::vector<uint64_t> ids;
    if (!attach_thread(pid, tid, all_own_ids ? &ids : nullptr)) continue;
    ++attached;
    if (all_own_ids) own_ids_.emplace_back(tid, std::move(ids));
  }
  // Threads created during the attach by a not-yet-attached thread inherited nothing: attach them too.
  // Such a thread may also have inherited from an attached creator; its own event ids tell the copies apart.
  for (int round = 0; round < kMaxRescans; ++round) {
    bool found = false;
    for (const int32_t tid : list_threads(pid)) {
      if (attached_.contains(tid)) continue;
      found = true;
      std::vector<uint64_t> ids;
      if (attach_thread(pid, tid, &ids)) {
        ++attached;
        own_ids_.emplace_back(tid, std::move(ids));
      } else {
        attached_.insert(tid);  // gone; do not retry
      }
    }
    if (!found) break;
  }
  return attached > 0;
}

// The child processes the targets have now, and theirs: a process inherits the events of its parent
// only when it is forked after they were opened, and one forked while they were being opened (one per
// CPU) inherited those of the CPUs done by then. Each gets events of its own (their samples are the
// ones kept: PerfEventDecoder::set_own_event_ids); those forked from then on inherit complete sets.
void PerfSession::attach_descendants() {
  DescriptorBudget budget;
  std::vector<int32_t> parents = options_.target.pids;
  for (int round = 0; round < kMaxRescans && !parents.empty(); ++round) {
    std::vector<int32_t> found;
    for (const int32_t parent : parents) {
      for (const int32_t child : list_child_processes(parent))
        if (!attached_.contains(child)) found.push_back(child);
    }
    parents.clear();
    for (size_t i = 0; i < found.size(); ++i) {
      const int32_t child = found[i];
      // Not one whose credentials the client may not trace (the kernel ends the events of a task whose
      // exec makes it so from then on).
      if (attached_.contains(child) || !may_follow_child(options_, child)) continue;
      if (!budget.take(cpus_.size() * std::max<size_t>(1, list_threads(child).size()))) {
        result_.children_not_attached = found.size() - i;
        result_.children_attach_error = budget.refusal("thread");
        return;
      }
      // Read before its events exist too: it may exit before the read after, which sees what it
      // mapped in between.
      ProcessSnapshot before = snapshot(child);
      try {
        if (!attach_process(child, true)) continue;
      } catch (const RecordError& e) {
        // The targets are recorded still: the children left are said, not attached.
        result_.children_not_attached = found.size() - i;
        result_.children_attach_error = e.what();
        return;
      }
      ProcessSnapshot after = snapshot(child);
      // Its calls too: forked before the call counter followed its parent, the fork hook missed it.
      calls_->add_child(child);
      descendants_.push_back(after.maps.empty() ? std::move(before) : std::move(after));
      parents.push_back(child);
    }
  }
}

void PerfSession::describe_process(RawProcess& process) {
  describe_process_from_proc(process);
}

std::vector<std::pair<int32_t, std::string>> read_thread_names(int32_t pid) {
  std::vector<std::pair<int32_t, std::string>> names;
  for (const int32_t tid : list_threads(pid)) names.emplace_back(tid, read_thread_comm(pid, tid));
  return names;
}

void PerfSession::add_threads(int32_t pid, const std::vector<std::pair<int32_t, std::string>>& names) {
  for (const auto& [tid, name] : names) {
    const bool known = result_.profile.find_thread(pid, tid) != nullptr;
    RawThread& thread = result_.profile.thread(pid, tid);
    if (!known) thread.start_ns = result_.profile.info.start_mono_ns;
    if (!name.empty()) thread.name = name;
  }
}

// A process attached at the start, as /proc showed it after its events were opened (`state`).
void PerfSession::add_attached(ProcessSnapshot& state) {
  apply_snapshot(state);
  builder_->processes().add_initial_process(state.process.pid, state.maps);
}

// After exec: what MMAP2 records do not cover (the vDSO) comes from /proc, read now (the command may
// not live long) and handed to the builder in its place among the records (apply_launched).
void PerfSession::describe_launched() {
  launched_.emplace(snapshot(command_->pid()));
}

PerfSession::ProcessSnapshot PerfSession::snapshot(int32_t pid) {
  ProcessSnapshot state;
  state.process.pid = pid;
  describe_process(state.process);
  state.threads = read_thread_names(pid);
  state.maps = read_proc_maps(pid);
  state.time_ns = mono_now();
  return state;
}

// The process's description and threads from `state`; its maps are the caller's.
void PerfSession::apply_snapshot(ProcessSnapshot& state) {
  const int32_t pid = state.process.pid;
  RawProcess& process = result_.profile.process(pid);
  if (process.start_ns == 0) process.start_ns = result_.profile.info.start_mono_ns;
  if (!state.process.exe.empty()) process.exe = std::move(state.process.exe);
  if (!state.process.cmdline.empty()) process.cmdline = std::move(state.process.cmdline);
  if (!state.process.cgroup.empty()) process.cgroup = std::move(state.process.cgroup);
  if (process.name.empty()) process.name = std::move(state.process.name);
  add_threads(pid, state.threads);
}

void PerfSession::apply_launched() {
  ProcessSnapshot state = std::move(*launched_);
  launched_.reset();
  apply_snapshot(state);
  builder_->processes().add_maps(state.process.pid, state.maps, state.time_ns);
}

// One round: every ring read to its head, its records queued in time order (in place: the ring's
// space stays taken until they are delivered); those the round makes safe are delivered, and each
// ring freed up to its oldest record still queued (record_ordering.h).
void PerfSession::drain_all() {
  const uint64_t round_start = mono_now();
  for (size_t i = 0; i < rings_.size(); ++i) {
    CpuRing& ring = rings_[i];
    if (!ring.ring.mapped()) continue;
    DrainStats stats;
    ring.read_end =
        read_ring(ring.ring.view(), ring.read_end, scratch_, stats, [this, i](const RingRecord& r) {
          auto record = decode_record(r.bytes, layout_);
          if (!record)
            ++result_.profile.lost.lost_records;  // a record shorter than its layout: lost, as on eBPF
          else if (r.in_ring)
            ordering_->push_in_place(r.bytes, std::move(*record), i, r.position, to_decoder_);
          else
            ordering_->push(r.bytes, std::move(*record), to_decoder_);  // split across the ring's end
        });
    if (stats.corrupt) ++result_.profile.lost.lost_records;
  }
  deliver_before(ordering_->end_round(round_start));
}

void PerfSession::release_rings() {
  for (size_t i = 0; i < rings_.size(); ++i) {
    CpuRing& ring = rings_[i];
    if (!ring.ring.mapped()) continue;
    const RingView view = ring.ring.view();
    release_ring(view, ordering_->release_point(i, ring.read_end, view.size));
  }
}

void PerfSession::deliver_before(uint64_t time_ns) {
  if (launched_ && launched_->time_ns < time_ns) {
    ordering_->deliver_before(launched_->time_ns, to_decoder_);
    apply_launched();
  }
  ordering_->deliver_before(time_ns, to_decoder_);
  decoder_->end_of_pass(to_builder_);
  release_rings();
}

void PerfSession::fill_info() {
  RecordingInfo& info = result_.profile.info;
  info.interval_ns = attr_.sample_period;
  info.frequency_hz = options_.frequency_hz;
  info.backend = to_string(Backend::kPerf);
  info.event = to_string(options_.event);
  info.call_graph = to_string(options_.call_graph == CallGraph::kDwarf ? CallGraph::kDwarf : CallGraph::kFp);
  info.kernel_frames = kernel_frames_;
  info.logical_cpus = static_cast<uint32_t>(cpus_.size());
  describe_recording(options_, info);
}

RecordResult PerfSession::run() {
  raise_fd_limit();
  take_clock_pair(result_.profile.info.start_mono_ns, result_.profile.info.start_unix_ns);
  steal_.start();
  fill_info();

  // Before the fork: the counter decides whether the command starts with hpd's runtime preloaded.
  calls_ = std::make_unique<RecordingCallCounter>(options_);
  // Before anything is attached by pid: the processes the targets are now (or were at the caller's check).
  std::vector<UniqueFd> bound = bind_targets(options_);
  if (!options_.target.command.empty()) {
    command_ = launch_command(options_.target.command, calls_->launch_environment());
    attach_thread(command_->pid(), command_->pid(), nullptr);
    targets_.push_back(WatchedTarget{command_->pid(), open_pidfd(command_->pid()), false});
  } else {
    for (const int32_t pid : options_.target.pids) {
      if (!attach_process(pid, false))
        throw RecordError("no process with pid " + std::to_string(pid) + " (it exited)");
    }
    if (options_.follow_children) attach_descendants();
  }

  layout_ =
      RecordLayout{attr_.sample_type, attr_.read_format, attr_.sample_id_all != 0, attr_.sample_regs_user};
  result_.cpu_time_source =
      (attr_.sample_type & PERF_SAMPLE_READ) ? CpuTimeSource::kThreadCounter : CpuTimeSource::kSamplePeriod;
  const bool dwarf = options_.call_graph == CallGraph::kDwarf;
  decoder_ = std::make_unique<PerfEventDecoder>(
      PerfDecoderConfig{result_.cpu_time_source == CpuTimeSource::kThreadCounter, max_stack_, dwarf,
                        attr_.sample_regs_user, uint64_t{options_.off_cpu_min_us} * 1000});
  const bool cfi_fallback = !dwarf && options_.fp_with_cfi_fallback;
  for (auto& [tid, ids] : own_ids_) decoder_->set_own_event_ids(tid, std::move(ids));
  for (DirectEvent& event : direct_) {
    if (::ioctl(event.fd, PERF_EVENT_IOC_ID, &event.id) == 0)
      decoder_->add_direct_event(event.pid, event.tid, event.cpu, event.id);
  }
  // Two rounds of records at most, at the rate that fills every ring between two reads.
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  ordering_ = std::make_unique<RecordOrdering>(
      std::max<size_t>(size_t{32} << 20, 4 * ring_pages_ * page * cpus_.size()));
  to_decoder_ = [this](const PerfRecord& record, size_t bytes) {
    decoder_->decode(record, bytes, to_builder_);
  };
  if (kernel_frames_) {
    // /proc/kallsyms, read once for the recording; the symbolization of its kernel frames uses the same
    // table (RecordResult::kernel_symbols); in hpd, the one an earlier recording read
    // (kernel_symbols_kept.h).
    std::shared_ptr<const KernelSymbols> symbols = recording_kernel_symbols();
    result_.kernel_symbols = symbols;
    auto entries = std::make_shared<SchedulerFrames>(
        SchedulerFrames::from_symbols(*symbols, SchedulerFrames::is_syscall_entry));
    if (entries->size() > 0)
      decoder_->set_syscall_entries([entries](uint64_t a) { return entries->contains(a); });
  }
  // No maps reader: the MMAP2 records and the maps read below cover every mapping of the targets.
  builder_ = std::make_unique<RawProfileBuilder>(
      result_.profile, BuilderConfig{TrackerConfig{result_.profile.info.start_mono_ns}, dwarf, cfi_fallback},
      SystemLookups{{},
                    [this](int32_t pid, uint64_t start, uint64_t end, const std::string& path) {
                      return build_ids_.for_mapping(pid, start, end, path);
                    },
                    [this](RawProcess& process) { describe_process(process); }});
  builder_->set_unwinder(&unwinder_);
  to_builder_ = [this](const Event& event) { builder_->on_event(event); };
  if (kernel_frames_) result_.profile.intern_module("[kernel.kallsyms]", kernel_build_id(), true);

  // Maps are read after the events exist, so a library loaded in between is seen at least once.
  for (const int32_t pid : options_.target.pids) {
    ProcessSnapshot state = snapshot(pid);
    add_attached(state);
  }
  for (ProcessSnapshot& state : descendants_) add_attached(state);
  descendants_.clear();
  if (command_) calls_->add_launched(command_->pid(), options_.target.command.front());
  for (const int32_t pid : options_.target.pids) {
    if (options_.pid_held_at_exec)
      calls_->add_held_at_exec(pid);
    else
      calls_->add_process(pid);
  }
  // The events and /proc were reached by pid: each target must still be the bound process (a thread's
  // event is the kernel's own to end with the thread, but one opened after the pid changed hands is not
  // the target's).
  check_targets_running(options_.target.pids, bound);
  if (!command_) {
    for (size_t i = 0; i < options_.target.pids.size(); ++i)
      targets_.push_back(WatchedTarget{options_.target.pids[i], std::move(bound[i]), false});
  }
  released_ns_ = release_command(command_.get(), options_, *builder_);
  if (options_.on_attached) options_.on_attached();

  std::vector<pollfd> pfds;
  for (const CpuRing& ring : rings_) pfds.push_back(pollfd{ring.owner.get(), POLLIN, 0});
  const size_t first_target = pfds.size();
  for (const WatchedTarget& t : targets_) pfds.push_back(pollfd{t.pidfd ? t.pidfd.get() : -1, POLLIN, 0});

  const uint64_t loop_cpu_start = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  const uint64_t start = result_.profile.info.start_mono_ns;
  RecordingTicker ticker(options_, start);
  ticker.set_forget([this](uint64_t exited_before_ns) { builder_->forget_exited(exited_before_ns); });
  ticker.set_forget_stacks([this] { builder_->forget_released_stacks(); });
  bool stopped_early = false;
  for (;;) {
    const int n = ::poll(pfds.data(), pfds.size(), kPollTimeoutMs);
    if (n < 0 && errno != EINTR) throw RecordError(std::string("poll failed: ") + std::strerror(errno));
    for (size_t i = 0; i < first_target; ++i) {
      // A ring owner whose thread exited reports POLLHUP forever; keep reading its ring, stop polling it.
      if (pfds[i].revents & (POLLHUP | POLLERR)) pfds[i].fd = -1;
    }
    drain_all();
    calls_->poll();
    if (command_ && !launched_described_) {
      launched_described_ = true;
      describe_launched();
    }
    const auto outcome = ticker.tick(update_targets_exited(targets_, pfds, first_target, command_.get()),
                                     builder_->samples(), result_.profile);
    if (outcome == RecordingTicker::Outcome::kTargetsExited) {
      result_.target_exited = true;
      break;
    }
    if (outcome == RecordingTicker::Outcome::kStopped) {
      stopped_early = true;
      break;
    }
  }
  result_.profile.info.end_mono_ns = mono_now();
  result_.profile.info.state_host_steal(steal_.since_start());
  // Disabling a parent event disables its inherited children too; then the rings hold everything.
  for (const CpuRing& ring : rings_) {
    if (ring.owner) ::ioctl(ring.owner.get(), PERF_EVENT_IOC_DISABLE, 0);
  }
  for (const UniqueFd& fd : redirected_) ::ioctl(fd.get(), PERF_EVENT_IOC_DISABLE, 0);
  drain_all();
  deliver_before(UINT64_MAX);
  decoder_->finish_off_cpu(result_.profile.info.end_mono_ns, to_builder_);
  // The events are disabled: their counts are final.
  for (const DirectEvent& event : direct_) {
    uint64_t count = 0;
    if (::read(event.fd, &count, sizeof count) == static_cast<ssize_t>(sizeof count))
      decoder_->final_count(event.id, count);
  }
  decoder_->finish_cpu_tails(result_.profile.lost.lost_records == 0, to_builder_);
  result_.cpu_tail_samples = builder_->cpu_tails();
  result_.cpu_tails_unknown = decoder_->tails_unknown();
  // perf_event reports context switches as they happen, and nothing about where a thread already was.
  if (attr_.context_switch && !options_.target.pids.empty())
    result_.attach_state_error =
        "perf_event reports only the switches it sees: a thread blocked since before the recording shows "
        "nothing until it runs (the eBPF backend reads where each one waits)";
  calls_->finish(result_);
  finish_command(command_.get(), options_, released_ns_, stopped_early, result_);
  result_.collection_cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - loop_cpu_start;
  result_.duplicate_samples = decoder_->duplicate_samples();
  result_.ordered_records = ordering_->counters().delivered;
  result_.records_delivered_early = ordering_->counters().delivered_early;
  result_.records_late = ordering_->counters().late;
  result_.records_untimed = ordering_->counters().untimed;
  result_.records_copied_out = ordering_->counters().copied_out;
  result_.processes_without_maps = builder_->processes().processes_without_maps();
  result_.call_graph = options_.call_graph == CallGraph::kDwarf ? CallGraph::kDwarf : CallGraph::kFp;
  result_.stack_copy_bytes = static_cast<uint32_t>(attr_.sample_stack_user);
  const UnwindCounters& unwound = builder_->unwind_counters();
  result_.unwind_ns = unwound.ns;
  result_.unwound_samples = unwound.unwound;
  result_.leaf_callers_added = unwound.leaf_callers;
  result_.sample_bytes = unwound.sample_bytes;
  return std::move(result_);
}

}  // namespace

std::string perf_open_error_message(int err, int32_t pid, int32_t tid, const PerfPrivileges& privileges) {
  std::string target = "pid " + std::to_string(pid);
  if (tid != pid) target += " (thread " + std::to_string(tid) + ")";
  switch (err) {
    case EACCES:
    case EPERM: return "cannot open perf event for " + target + ": permission denied; " + privileges.advice();
    case ESRCH: return "no process with pid " + std::to_string(pid);
    case EMFILE:
    case ENFILE:
      return "cannot open perf event for " + target +
             ": too many open files (one is needed per thread and CPU); raise the limit with ulimit -n";
    case ENOENT:
    case ENODEV:
    case EOPNOTSUPP:
      return "cannot open perf event for " + target + ": the kernel does not offer this software event (" +
             std::strerror(err) + ")";
    default: return "cannot open perf event for " + target + ": " + std::strerror(err);
  }
}

RecordResult record_with_perf(const RecordOptions& options, const PerfPrivileges& privileges) {
  PerfSession session(options, privileges);
  return session.run();
}

}  // namespace hpd
