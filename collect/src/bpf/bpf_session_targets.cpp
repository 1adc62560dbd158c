// An eBPF recording's targets: the target and filter maps, and the targets' state at the start
// (bpf_session.h).
#include "bpf/bpf_session.h"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "hpd/base/proc_files.h"
#include "hpd/base/proc_maps.h"
#include "hpd/base/process.h"

namespace hpd::bpf_recording {

namespace {

// Generations of the targets' descendants looked for at the attach.
constexpr int kMaxDescendantRounds = 16;

UniqueFd open_cgroup(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) throw RecordError("cannot open cgroup " + path + ": " + std::strerror(errno));
  return fd;
}

}  // namespace

void BpfSession::set_targets() {
  if (filter_ == HPD_FILTER_CGROUP) {
    cgroup_fd_ = open_cgroup(options_.target.cgroup);
    const uint32_t key = 0;
    const uint32_t fd = static_cast<uint32_t>(cgroup_fd_.get());
    if (bpf_map_update_elem(bpf_map__fd(skel_->maps.target_cgroup), &key, &fd, BPF_ANY) != 0) {
      throw RecordError("cannot select cgroup " + options_.target.cgroup + ": " + std::strerror(errno) +
                        " (it must be a cgroup v2 directory)");
    }
  }
  if (filter_ != HPD_FILTER_PIDS) return;
  const int fd = bpf_map__fd(skel_->maps.targets);
  const uint8_t yes = 1;
  std::vector<int32_t> pids = options_.target.pids;
  if (command_) pids.push_back(command_->pid());
  for (const int32_t pid : pids) {
    if (bpf_map_update_elem(fd, &pid, &yes, BPF_ANY) != 0)
      throw RecordError("cannot add pid " + std::to_string(pid) +
                        " to the eBPF targets: " + std::strerror(errno));
  }
}

// Called once the scheduler hooks and the targets' sampling events are attached: a child forked from
// then on is the fork program's (and found here too, which is harmless). Each child found becomes a
// target, with its threads' CPU baselines, its mappings watched, its own sampling events (per-task
// mode: sample_descendant) and (cfi) its tables; one gone meanwhile is skipped. For a client, a child
// whose credentials it may not trace (a set-user-ID program it ran) is not followed, nor are its
// children, as hpd_exec stops following a process at such an exec: its ids are read before it becomes a
// target and again after, so that an exec between the two (which hpd_exec let pass, the child not a
// target yet) is seen by the second.
void BpfSession::add_descendants() {
  if (filter_ != HPD_FILTER_PIDS || !options_.follow_children) return;
  const int targets = bpf_map__fd(skel_->maps.targets);
  const uint8_t yes = 1;
  const int32_t self = ::getpid();
  DescriptorBudget budget;
  std::set<int32_t> known(options_.target.pids.begin(), options_.target.pids.end());
  std::vector<int32_t> parents = options_.target.pids;
  for (int round = 0; round < kMaxDescendantRounds && !parents.empty(); ++round) {
    std::vector<int32_t> found;
    for (const int32_t parent : parents) {
      for (const int32_t child : list_child_processes(parent))
        if (child != self && known.insert(child).second) found.push_back(child);
    }
    parents.clear();
    for (size_t i = 0; i < found.size(); ++i) {
      const int32_t child = found[i];
      if (!may_follow_child(options_, child)) continue;
      // Its mappings from now on (the watch's event is inherited by the children it forks next), then
      // those it has, read once it is watched.
      try {
        if (mmap_watch_.watches_pids() && !budget.take(cpus_.size()))
          throw RecordError(budget.refusal("process"));
        mmap_watch_.add(child);
      } catch (const RecordError& e) {
        result_.children_not_attached = found.size() - i;
        result_.children_attach_error = e.what();
        return;
      }
      for (const int32_t tid : list_threads(child)) seed_thread(child, tid);
      if (bpf_map_update_elem(targets, &child, &yes, BPF_ANY) != 0) {
        result_.children_not_attached = found.size() - i;
        result_.children_attach_error = "cannot add it to the eBPF targets: " + errno_text(errno);
        return;
      }
      const std::vector<MapsEntry> maps = read_proc_maps(child);
      // Exited (or a zombie), or other credentials now.
      if (maps.empty() || !may_follow_child(options_, child)) {
        bpf_map_delete_elem(targets, &child);
        continue;
      }
      if (cfi_maps_) cfi_maps_->add_process_maps(child, maps);
      sample_descendant(child, round, budget);
      // Its calls too: forked before the call counter followed its parent, the fork hook missed it.
      if (calls_) calls_->add_child(child);
      descendants_.push_back(child);
      parents.push_back(child);
    }
  }
  if (cfi_maps_ && !descendants_.empty()) cfi_maps_->wait_for_tables(kInitialTablesWaitMs);
}

void BpfSession::seed_thread(int32_t pid, int32_t tid) {
  const auto runtime = read_thread_runtime_ns(pid, tid);
  if (!runtime) return;
  hpd_thread_state state{};
  state.last_runtime_ns = *runtime;
  state.pid = pid;
  state.seeded = 1;
  // BPF_NOEXIST: a sample or fork that got there first has the better baseline.
  bpf_map_update_elem(bpf_map__fd(skel_->maps.threads), &tid, &state, BPF_NOEXIST);
}

// Before the recording's start: each target thread's context switches so far. A thread that is off
// the CPU when hpd_attach_state runs and has not switched since was off the CPU since before the start.
void BpfSession::snapshot_switches() {
  if (!attach_state_) return;
  for (const int32_t pid : options_.target.pids) {
    for (const int32_t tid : list_threads(pid)) {
      if (const auto n = read_thread_context_switches(pid, tid)) switches_before_start_.emplace_back(tid, *n);
    }
  }
}

// Once the scheduler hooks are attached: the record of each target thread that is off the CPU, in the
// `blocked` map its switch-in consumes (attach_state.bpf.h), so that a thread blocked before the
// recording began and all through it is seen where it waits. Without it (a kernel that refuses the
// iterator) the recording goes on, and its summary says what is missing.
void BpfSession::read_attach_state() {
  if (!attach_state_) return;
  const int fd = bpf_map__fd(skel_->maps.attach_switches);
  for (auto [tid, switches] : switches_before_start_) bpf_map_update_elem(fd, &tid, &switches, BPF_ANY);
  skel_->bss->attach_start_ns = result_.profile.info.start_mono_ns;
  Link link(bpf_program__attach_iter(skel_->progs.hpd_attach_state, nullptr));
  if (!link) {
    result_.attach_state_error = "cannot attach the task iterator: " + errno_text(errno);
    return;
  }
  const UniqueFd iter(bpf_iter_create(bpf_link__fd(link.get())));
  if (!iter) {
    result_.attach_state_error = "cannot run the task iterator: " + errno_text(errno);
    return;
  }
  // The program writes nothing: reading to the end runs it over every task.
  char buffer[64];
  ssize_t n = 0;
  while ((n = ::read(iter.get(), buffer, sizeof buffer)) > 0) {
  }
  if (n < 0) result_.attach_state_error = "the task iterator failed: " + errno_text(errno);
  const auto* bss = skel_->bss;
  // A command hpctl launched for hpd is its target pid held stopped at its exec (pid_held_at_exec): off
  // the CPU only because it is held. Its wait until released is counted where it is held, at its first
  // instruction, but it is no thread that was already waiting when the recording began: not counted
  // as one (the summary's note would tell of a blocked thread the program never had).
  if (!options_.pid_held_at_exec)
    result_.off_cpu_at_attach =
        bss->attach_blocked_records + bss->attach_runnable_records - bss->attach_raced;
  // Their user stacks are walked now, while they are still off the CPU (most stay so), with the
  // mappings made before now read and published.
  if (rewalk_ && !skel_->bss->calls_runtime_active) {
    const uint64_t mappings_read_at = mono_now();
    drain_mmaps();
    cfi_maps_->poll();
    rewalk_->poll(*cfi_maps_, *decoder_, mappings_read_at, mono_now());
  }
}

// Threads that exist before sampling starts get their current sum_exec_runtime as the baseline, so
// that their first sample's CPU delta is exact rather than a guess.
void BpfSession::seed_cpu_baselines() {
  std::vector<int32_t> pids = options_.target.pids;
  if (filter_ != HPD_FILTER_PIDS) pids = list_processes();
  const int32_t self = ::getpid();
  for (const int32_t pid : pids) {
    if (pid == self) continue;
    for (const int32_t tid : list_threads(pid)) seed_thread(pid, tid);
  }
}

void BpfSession::describe_process(RawProcess& process) {
  describe_process_from_proc(process);
}

// The processes of a cgroup v2 directory and of the cgroups below it.
std::vector<int32_t> cgroup_processes(const std::string& directory) {
  std::vector<int32_t> out;
  std::error_code ec;
  std::vector<std::string> dirs = {directory};
  for (auto it = std::filesystem::recursive_directory_iterator(directory, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec)) dirs.push_back(it->path().string());
  }
  for (const std::string& dir : dirs) {
    std::ifstream procs(dir + "/cgroup.procs");
    for (int32_t pid = 0; procs >> pid;) out.push_back(pid);
  }
  return out;
}

void BpfSession::describe_initial(int32_t pid) {
  RawProcess& process = result_.profile.process(pid);
  process.start_ns = result_.profile.info.start_mono_ns;
  process.name = read_comm(pid);
  describe_process(process);
  for (const int32_t tid : list_threads(pid)) {
    RawThread& thread = result_.profile.thread(pid, tid);
    thread.start_ns = result_.profile.info.start_mono_ns;
    thread.name = read_thread_comm(pid, tid);
  }
  builder_->processes().add_initial_process(pid, read_proc_maps(pid));
}

}  // namespace hpd::bpf_recording
