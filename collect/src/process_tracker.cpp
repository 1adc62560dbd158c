// Processes, threads and mappings from the events of either backend (process_tracker.h).
//
// Where the two former per-backend builders disagreed, the rule kept is the one that is true for
// both rings; each says why where it is applied. RawProfile::process() and thread() may grow their
// vectors: a reference is taken again after any call that can add a process or thread.
#include "process_tracker.h"

#include <algorithm>

namespace hpd {

namespace {
// Exits of never-seen threads remembered for a fork that may follow (a record the perf ordering stage
// delivered out of order): a fork comes within a round or two of its exit, so a few thousand cover
// any burst; past that, start over.
constexpr size_t kMaxExitsBeforeFork = 4096;
}  // namespace

std::string module_path_for(std::string_view path) {
  if (path.empty() || path == "//anon" || path.starts_with("/anon_hugepage") || path == "[anon]")
    return "[anon]";
  // The kernel copies a special mapping's name into 16 bytes for perf's mmap records: Linux 6.18's page
  // of optimized uprobes comes as "[uprobes-trampo".
  if (path == "[uprobes-trampo") return "[uprobes-trampoline]";
  return std::string(path);
}

bool names_mapped_file(std::string_view path) {
  const std::string module = module_path_for(path);
  return module.front() == '/' || module == "[vdso]";
}

bool add_mapping_once(RawProcess& process, const RawMapping& mapping, uint64_t image_since_ns) {
  for (const RawMapping& m : process.mappings) {
    if (m.unmapped_ns == 0 && m.time_ns >= image_since_ns && m.start == mapping.start &&
        m.end == mapping.end && m.file_offset == mapping.file_offset && m.module == mapping.module) {
      return false;
    }
  }
  process.mappings.push_back(mapping);
  return true;
}

bool add_module_mapping(RawProfile& profile, RawProcess& process, RawMapping mapping, std::string_view path,
                        std::string build_id, const BuildIdLookup& build_ids, uint64_t image_since_ns,
                        const MappedModule* asked) {
  const std::string module = module_path_for(path);
  // Asked even when the record carries the build-id: the file is held open from here on, while
  // the process lives (see HeldFile).
  MappedModule looked;
  if (asked == nullptr && build_ids && names_mapped_file(module))
    looked = build_ids(process.pid, mapping.start, mapping.end, std::string(path));
  const MappedModule& found = asked != nullptr ? *asked : looked;
  if (build_id.empty()) build_id = found.build_id;
  mapping.module = profile.intern_module(module, build_id);
  RawModule& m = profile.modules[mapping.module];
  if (!m.file && found.file) m.file = found.file;
  if (m.image.empty() && !found.image.empty()) m.image = found.image;
  return add_mapping_once(process, mapping, image_since_ns);
}

void end_mappings_at_exec(RawProcess& process, uint64_t exec_ns, uint64_t ended_ns) {
  for (RawMapping& m : process.mappings) {
    if (m.unmapped_ns == 0 && m.time_ns <= exec_ns) m.unmapped_ns = ended_ns != 0 ? ended_ns : exec_ns;
  }
}

ProcessTracker::ProcessTracker(RawProfile& profile, TrackerConfig config, SystemLookups lookups)
    : profile_(profile), config_(config), lookups_(std::move(lookups)) {}

void ProcessTracker::add_initial_process(int32_t pid, const std::vector<MapsEntry>& maps) {
  RawProcess& process = profile_.process(pid);
  if (process.start_ns == 0) process.start_ns = config_.start_ns;
  states_[pid].maps_read = true;
  add_maps(pid, maps, 0);
}

void ProcessTracker::add_maps(int32_t pid, const std::vector<MapsEntry>& maps, uint64_t time_ns) {
  RawProcess& process = profile_.process(pid);
  const uint64_t image_since = states_[pid].exec_ns;
  for (const MapsEntry& e : maps) {
    if (e.executable)
      add_module_mapping(profile_, process, RawMapping{e.start, e.end, e.offset, kNoIndex, time_ns}, e.path,
                         {}, lookups_.build_ids, image_since);
  }
}

void ProcessTracker::read_maps(int32_t pid, uint64_t time_ns, uint64_t mapping_time_ns) {
  ProcessState& state = states_[pid];
  state.maps_read = true;
  state.maps_read_at = time_ns;
  if (lookups_.read_maps) add_maps(pid, lookups_.read_maps(pid), mapping_time_ns);
}

// One rule for a process first seen through any record but its fork: it existed before the
// recording (or its fork record was lost), so it starts at the recording's start. The perf builder
// started it at the first record's time, which made every process attached by --pid or found by a
// sample look younger than it is; a fork that comes later still corrects the start (on_fork).
RawProcess& ProcessTracker::ensure_process(int32_t pid, uint64_t time_ns) {
  // The profile is ours to change: its const lookup saves a second search on the hot path.
  if (const RawProcess* known = profile_.find_process(pid)) return const_cast<RawProcess&>(*known);
  RawProcess& process = profile_.process(pid);
  process.start_ns = config_.start_ns;
  if (lookups_.describe) lookups_.describe(process);
  apply_pending_mappings(pid);
  // Its maps as /proc shows them now stand for the whole recording (mapped before: time 0).
  if (lookups_.read_maps) read_maps(pid, time_ns, 0);
  return profile_.process(pid);
}

void ProcessTracker::forget(std::span<const int32_t> pids, std::span<const int32_t> tids) {
  for (const int32_t pid : pids) states_.erase(pid);
  for (const int32_t tid : tids) started_unseen_.erase(tid);
}

RawThread& ProcessTracker::ensure_thread(int32_t pid, int32_t tid, uint64_t time_ns) {
  if (const RawThread* known = profile_.find_thread(pid, tid)) return const_cast<RawThread&>(*known);
  ensure_process(pid, time_ns);
  RawThread& thread = profile_.thread(pid, tid);
  // Same rule as for processes: a thread first seen without its fork existed at the start.
  thread.start_ns = config_.start_ns;
  started_unseen_.insert(tid);
  return thread;
}

RawThread& ProcessTracker::thread_for(int32_t pid, int32_t tid, uint64_t time_ns, std::string_view comm) {
  RawThread& thread = ensure_thread(pid, tid, time_ns);
  // The name a thread gives itself (prctl, pthread_setname_np) or gets at exec shows in later records.
  if (!comm.empty() && thread.name != comm) {
    thread.name.assign(comm);
    if (pid == tid) profile_.process(pid).name = thread.name;
  }
  return thread;  // naming adds no process or thread: the reference still holds
}

bool ProcessTracker::unfollowed(int32_t pid, uint64_t time_ns) const {
  const RawProcess* process = profile_.find_process(pid);
  return process != nullptr && process->unfollowed_ns != 0 && time_ns >= process->unfollowed_ns;
}

void ProcessTracker::on_comm(const CommEvent& e) {
  thread_for(e.pid, e.tid, e.time_ns, e.name);
}

void ProcessTracker::close_exec_window(RawProcess& process, ProcessState& state, uint64_t ended_ns) {
  end_mappings_at_exec(process, state.exec_ns, ended_ns);
  state.exec_open = false;
  state.exec_ended_ns = ended_ns;
}

void ProcessTracker::on_exec_start(const ExecStartEvent& e) {
  ProcessState& state = states_[e.pid];
  // Two exec starts without a sample of the image between them: the first image's mappings end here.
  if (state.exec_open && profile_.find_process(e.pid) != nullptr)
    close_exec_window(profile_.process(e.pid), state, e.time_ns);
  state.exec_ns = e.time_ns;
  state.exec_open = true;
}

// The old image's mappings serve until the new image is seen running: until then a sample (in the
// kernel, inside execve) still holds the old image's user registers although the new image is being
// mapped. One rule for both backends: they end at the exec record when it is written after execve
// set the new registers (eBPF), else at the first sample that shows the new image (note_sample; the
// perf COMM record comes before the new image is mapped). The perf builder ended them at the next
// exec at the latest, the eBPF one ignored samples as proof: both now do both.
void ProcessTracker::on_exec(const ExecEvent& e) {
  // The kernel's records of this exec's start and of the new image's mappings were written before
  // this record: deliver them first.
  if (drain_mmaps_) drain_mmaps_();
  if (profile_.find_process(e.pid) == nullptr) profile_.process(e.pid).start_ns = config_.start_ns;
  ProcessState& state = states_[e.pid];
  // Without an exec start record for this exec (no mmap records), this record's time stands in. With
  // one, its window may be closed already: a sample taken inside execve after the new registers were
  // set (on or off the CPU, its user address in the new image) shows the new image before this record.
  // The window stays as that sample closed it; reopened here at this record's time, it ended the new
  // image's first mappings (the program, ld.so, the vDSO) as if they were the old image's.
  const bool started = state.exec_ns > state.last_exec_record_ns && state.exec_ns <= e.time_ns;
  if (!started) {
    if (state.exec_open) close_exec_window(profile_.process(e.pid), state, e.time_ns);
    state.exec_ns = e.time_ns;
    state.exec_open = true;
  }
  state.last_exec_record_ns = e.time_ns;
  if (e.unfollowed) {
    // Not followed from here on: every mapping ends, and nothing of the new image (its name, path,
    // arguments, mappings) is read for a client that may not see it.
    RawProcess& process = profile_.process(e.pid);
    process.unfollowed_ns = e.time_ns;
    end_mappings_at_exec(process, e.time_ns, e.time_ns);
    state.exec_open = false;
    state.exec_ended_ns = e.time_ns;
    return;
  }
  if (e.image_running && state.exec_open) close_exec_window(profile_.process(e.pid), state, e.time_ns);
  {
    RawProcess& process = profile_.process(e.pid);
    if (!e.name.empty()) process.name.assign(e.name);
    // The old image's path and arguments are not the new one's, even when /proc cannot be read.
    process.exe.clear();
    process.cmdline.clear();
    if (lookups_.describe) lookups_.describe(process);
  }
  state.hit_start = state.hit_end = 0;
  state.counted_without_maps = false;
  state.reread_at_once = true;
  apply_pending_mappings(e.pid);
  // The maps as /proc shows them now: a net under mapping records lost (by the source, or dropped
  // here while they waited for their process). With every record kept, it only repeats them: an open,
  // a read and a file lookup per mapping, for every exec of a system-wide recording.
  const bool records_whole = drain_mmaps_ && mmaps_lost_ && mmaps_lost_() == 0 && mmaps_dropped_ == 0;
  if (lookups_.read_maps && !records_whole) read_maps(e.pid, e.time_ns, e.time_ns);
  thread_for(e.pid, e.tid, e.time_ns, e.name);
}

void ProcessTracker::note_sample(int32_t pid, uint64_t time_ns, bool user_mode,
                                 std::span<const uint64_t> user) {
  const auto it = states_.find(pid);
  if (it == states_.end() || !it->second.exec_open || time_ns <= it->second.exec_ns) return;
  ProcessState& state = it->second;
  RawProcess& process = profile_.process(pid);
  bool running_new = user_mode;
  if (!running_new && !user.empty()) {
    // Otherwise only a user address that the new image covers and the old one does not proves it
    // (the new image may map a file where the old one had it).
    bool in_new = false, in_old = false;
    for (const RawMapping& m : process.mappings) {
      if (m.unmapped_ns != 0 || user.front() < m.start || user.front() >= m.end) continue;
      (m.time_ns > state.exec_ns ? in_new : in_old) = true;
    }
    running_new = in_new && !in_old;
  }
  // Ended at this sample, not at the exec's start: samples taken inside execve before it hold the old
  // image's registers (and a record out of order, eBPF's or one perf's ordering stage counts, may
  // still bring one), and the old image explains them.
  if (running_new) close_exec_window(process, state, time_ns);
}

// One rule: a fork is the truth of a task's birth. A new process copies the parent's name, path,
// arguments and live mappings (as of the fork: time_ns is the fork's), and /proc, which may already
// show a later image, is not read. The perf builder copied ended mappings too, and re-read the name
// and path from /proc; the eBPF one never described a child of an unknown parent.
void ProcessTracker::on_fork(const ForkEvent& e) {
  if (e.pid != e.parent_pid) {
    ProcessState& state = states_[e.pid];
    if (!state.forked) {
      state.forked = true;
      const bool known = profile_.find_process(e.pid) != nullptr;
      profile_.process(e.pid).start_ns = e.time_ns;
      if (const RawProcess* parent = profile_.find_process(e.parent_pid)) {
        const std::vector<RawMapping> inherited = parent->mappings;
        const std::string name = parent->name, exe = parent->exe, cgroup = parent->cgroup;
        const std::vector<std::string> cmdline = parent->cmdline;
        RawProcess& child = profile_.process(e.pid);
        for (RawMapping m : inherited) {
          if (m.unmapped_ns != 0) continue;
          m.time_ns = e.time_ns;
          add_mapping_once(child, m);
        }
        // A child first seen through another record was described from /proc already.
        if (!known || child.name.empty()) child.name = name;
        if (!known || child.exe.empty()) child.exe = exe;
        if (!known || child.cmdline.empty()) child.cmdline = cmdline;
        if (!known || child.cgroup.empty()) child.cgroup = cgroup;  // a fork stays in its parent's
        state.maps_read = true;
        state.maps_read_at = e.time_ns;
      } else if (!known) {
        // Nothing to copy from: described now, its maps read when its samples arrive.
        if (lookups_.describe) lookups_.describe(profile_.process(e.pid));
        state.maps_read = false;
      }
      apply_pending_mappings(e.pid);
    }
  }
  std::string creator_name;
  if (const RawThread* creator = profile_.find_thread(e.parent_pid, e.parent_tid))
    creator_name = creator->name;
  const bool known = profile_.find_thread(e.pid, e.tid) != nullptr;
  RawThread& thread = ensure_thread(e.pid, e.tid, e.time_ns);
  if (!known || started_unseen_.erase(e.tid) > 0) thread.start_ns = e.time_ns;
  started_unseen_.erase(e.tid);
  // Its exit came first (a perf record out of order, see exited_before_fork_). An exit older than the
  // fork belongs to an earlier thread that had this tid.
  if (auto exited = exited_before_fork_.find(e.tid); exited != exited_before_fork_.end()) {
    if (exited->second >= e.time_ns) end_thread(thread, e.pid, e.tid, exited->second);
    exited_before_fork_.erase(exited);
  }
  // The new task's name is its creator's until it renames itself.
  if (!e.name.empty())
    thread.name.assign(e.name);
  else if (thread.name.empty())
    thread.name = creator_name;
}

// One rule: a thread that exits without ever having been seen is not added (no empty tracks for the
// threads of --all); the perf builder added it. The process ends with its last thread: the leader's
// exit marks it, later thread exits extend it.
void ProcessTracker::on_exit(const ExitEvent& e) {
  if (e.pid == e.tid && profile_.find_process(e.pid) == nullptr) {
    if (auto it = pending_.find(e.pid); it != pending_.end()) {
      pending_count_ -= it->second.size();
      pending_.erase(it);
    }
  }
  if (profile_.find_thread(e.pid, e.tid) == nullptr && e.records_lost == 0) {
    if (e.pid == e.tid && profile_.find_process(e.pid) != nullptr) {
      RawProcess& process = profile_.process(e.pid);
      process.end_ns = std::max(process.end_ns, e.time_ns);
    }
    if (exited_before_fork_.size() >= kMaxExitsBeforeFork) exited_before_fork_.clear();
    exited_before_fork_[e.tid] = e.time_ns;
    return;
  }
  RawThread& thread = ensure_thread(e.pid, e.tid, e.time_ns);
  thread.lost.lost_records += e.records_lost;
  end_thread(thread, e.pid, e.tid, e.time_ns);
}

void ProcessTracker::end_thread(RawThread& thread, int32_t pid, int32_t tid, uint64_t time_ns) {
  thread.end_ns = std::max(thread.end_ns, time_ns);
  RawProcess& process = profile_.process(pid);
  if (pid == tid || process.end_ns != 0) process.end_ns = std::max(process.end_ns, time_ns);
}

// One rule: the mappings of a process not in the profile yet wait for its first record (bounded),
// rather than creating it (perf did): with --all most of them belong to processes never sampled,
// and the eBPF backend's mmap watch rings may bring a child's mappings before its fork record from
// the BPF ring (perf's time order brings the fork first, but for the records it counts as out of order).
void ProcessTracker::on_mmap(const MmapEvent& e) {
  if (e.length == 0) return;
  const RawMapping mapping{e.start, e.start + e.length, e.file_offset, kNoIndex, e.time_ns};
  if (profile_.find_process(e.pid) == nullptr) {
    if (pending_count_ >= kMaxPendingMappings) {
      ++mmaps_dropped_;
      return;
    }
    PendingMapping& p = pending_[e.pid].emplace_back(
        PendingMapping{mapping, std::string(e.path), std::string(e.build_id), {}, false});
    if (e.found != nullptr) {
      // Kept, so the live process is not asked again (it is mostly gone by then); hpd's own vDSO
      // image, which nearly every process maps, not copied per process.
      p.found = *e.found;
      if (!p.found->image.empty() && p.found->image == own_vdso()) {
        p.found->image.clear();
        p.own_vdso = true;
      }
    }
    ++pending_count_;
    return;
  }
  add_mmap_mapping(e.pid, mapping, e.path, e.build_id, e.found);
}

void ProcessTracker::add_mmap_mapping(int32_t pid, const RawMapping& mapping, std::string_view path,
                                      std::string_view build_id, const MappedModule* found) {
  const ProcessState& state = states_[pid];
  RawProcess& process = profile_.process(pid);
  ++mmaps_recorded_;
  if (state.exec_ns == 0 || mapping.time_ns >= state.exec_ns) {
    add_module_mapping(profile_, process, mapping, path, std::string(build_id), lookups_.build_ids,
                       state.exec_ns, found);
    return;
  }
  // A record of the replaced image that comes after its exec began (the eBPF backend's mmap watch,
  // drained apart from its exec records; perf's time order brings it before, but for the records it
  // counts as out of order): it explains that image's samples, and ends with it. (The eBPF builder
  // dropped it.)
  if (add_module_mapping(profile_, process, mapping, path, std::string(build_id), lookups_.build_ids, 0,
                         found) &&
      !state.exec_open && state.exec_ended_ns != 0) {
    process.mappings.back().unmapped_ns = state.exec_ended_ns;
  }
}

void ProcessTracker::apply_pending_mappings(int32_t pid) {
  const auto it = pending_.find(pid);
  if (it == pending_.end()) return;
  std::vector<PendingMapping> list = std::move(it->second);
  pending_.erase(it);
  pending_count_ -= list.size();
  for (PendingMapping& p : list) {
    if (p.own_vdso) p.found->image = own_vdso();
    add_mmap_mapping(pid, p.mapping, p.path, p.build_id, p.found ? &*p.found : nullptr);
  }
}

bool ProcessTracker::has_user_mapping(int32_t pid, uint64_t address, uint64_t time_ns) {
  ProcessState& state = states_[pid];
  if (address >= state.hit_start && address < state.hit_end) return true;
  const RawMapping* m = profile_.process(pid).find_mapping(address, time_ns);
  if (m == nullptr && drain_mmaps_) {
    // The kernel may have reported the mapping since the last drain (it did before this sample).
    drain_mmaps_();
    m = profile_.process(pid).find_mapping(address, time_ns);
  }
  if (m == nullptr && lookups_.read_maps &&
      (!state.maps_read || state.reread_at_once ||
       time_ns >= state.maps_read_at + config_.maps_reread_interval_ns)) {
    // Something mapped after the last read (ld.so loading libraries, dlopen, JIT); the maps may show it.
    read_maps(pid, time_ns, time_ns);
    m = profile_.process(pid).find_mapping(address, time_ns);
    states_[pid].reread_at_once = m != nullptr;
  }
  if (m == nullptr) return false;
  ProcessState& s = states_[pid];
  s.hit_start = m->start;
  s.hit_end = m->unmapped_ns == 0 ? m->end : m->start;  // an ended mapping is not cached
  return true;
}

void ProcessTracker::note_unplaced(int32_t pid, std::span<const uint64_t> user, uint64_t time_ns) {
  if (user.empty()) return;
  ProcessState& state = states_[pid];
  if (user.front() >= state.hit_start && user.front() < state.hit_end) return;
  // Without a source of new mappings the search could only say what the count needs no search for.
  if ((lookups_.read_maps || drain_mmaps_) && has_user_mapping(pid, user.front(), time_ns)) return;
  if (state.counted_without_maps || state.has_mappings) return;
  // Mappings are never removed (an ended one stays, with its end): once there, always there.
  if (!profile_.process(pid).mappings.empty()) {
    state.has_mappings = true;
    return;
  }
  state.counted_without_maps = true;
  ++processes_without_maps_;
}

}  // namespace hpd
