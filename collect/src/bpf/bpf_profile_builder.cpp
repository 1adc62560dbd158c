// BPF record-to-RawProfile conversion.
#include "bpf/bpf_profile_builder.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <ctime>

#include "perf/profile_builder.h"
#include "recording_common.h"

namespace hpd {

namespace {

constexpr size_t kSampleHeaderBytes = offsetof(hpd_sample_event, ips);

template <typename T>
bool read_record(std::span<const uint8_t> bytes, T& out, size_t need = sizeof(T)) {
  if (bytes.size() < need) return false;
  std::memset(&out, 0, sizeof out);
  std::memcpy(&out, bytes.data(), std::min(bytes.size(), sizeof out));
  return true;
}

}  // namespace

std::string comm_of(const hpd_event_header& header) {
  return std::string(header.comm, strnlen(header.comm, sizeof header.comm));
}

BpfProfileBuilder::BpfProfileBuilder(RawProfile& profile, BpfBuilderConfig config, MapsReader read_maps,
                                     BuildIdLookup build_ids, ProcessDescriber describe)
    : profile_(profile),
      config_(config),
      read_maps_(std::move(read_maps)),
      build_ids_(std::move(build_ids)),
      describe_(std::move(describe)) {}

void BpfProfileBuilder::add_initial_process(int32_t pid, const std::vector<MapsEntry>& maps) {
  RawProcess& process = profile_.process(pid);
  if (process.start_ns == 0) process.start_ns = config_.start_ns;
  ProcessState& state = states_[pid];
  state.maps_read = true;
  add_maps(process, maps, 0);
}

void BpfProfileBuilder::add_maps(RawProcess& process, const std::vector<MapsEntry>& maps, uint64_t time_ns) {
  const uint64_t image_since = states_[process.pid].exec_ns;
  for (const MapsEntry& e : maps) {
    if (e.executable)
      add_module_mapping(profile_, process, RawMapping{e.start, e.end, e.offset, kNoIndex, time_ns}, e.path,
                         {}, build_ids_, image_since);
  }
}

void BpfProfileBuilder::read_maps(RawProcess& process, ProcessState& state, uint64_t time_ns,
                                  uint64_t mapping_time_ns) {
  state.maps_read = true;
  state.maps_read_at = time_ns;
  if (read_maps_) add_maps(process, read_maps_(process.pid), mapping_time_ns);
}

RawProcess& BpfProfileBuilder::ensure_process(int32_t pid, uint64_t time_ns) {
  const bool known = profile_.find_process(pid) != nullptr;
  RawProcess& process = profile_.process(pid);
  if (!known) {
    // First seen through a sample: it existed before the recording (or its fork was missed).
    process.start_ns = config_.start_ns;
    if (describe_) describe_(process);
    apply_pending_mappings(pid);
    read_maps(profile_.process(pid), states_[pid], time_ns, 0);
  }
  return profile_.process(pid);
}

RawThread& BpfProfileBuilder::ensure_thread(int32_t pid, int32_t tid, uint64_t time_ns, const char* comm) {
  ensure_process(pid, time_ns);
  const bool known = profile_.find_thread(pid, tid) != nullptr;
  RawThread& thread = profile_.thread(pid, tid);
  if (!known) thread.start_ns = config_.start_ns;
  // The name a thread gives itself (prctl, pthread_setname_np) or gets at exec shows in later records.
  const size_t len = strnlen(comm, HPD_COMM_LEN);
  if (len > 0 && (thread.name.size() != len || thread.name.compare(0, len, comm, len) != 0)) {
    thread.name.assign(comm, len);
    if (pid == tid) profile_.process(pid).name = thread.name;
  }
  return thread;
}

void BpfProfileBuilder::on_record(std::span<const uint8_t> bytes) {
  hpd_event_header header;
  if (!read_record(bytes, header)) {
    ++malformed_;
    return;
  }
  switch (header.type) {
    case HPD_EVENT_ON_CPU:
    case HPD_EVENT_OFF_CPU: {
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
      unwind_.sample_bytes += bytes.size();
      on_sample(e, frames, bytes.subspan(stack_at, e.stack_bytes));
      return;
    }
    case HPD_EVENT_FORK: {
      hpd_fork_event e;
      if (!read_record(bytes, e)) break;
      on_fork(e);
      return;
    }
    case HPD_EVENT_EXEC:
    case HPD_EVENT_EXIT:
    case HPD_EVENT_CPU_TAIL: {
      hpd_task_event e;
      if (!read_record(bytes, e)) break;
      if (header.type == HPD_EVENT_EXEC)
        on_exec(e);
      else if (header.type == HPD_EVENT_EXIT)
        on_exit(e);
      else
        on_cpu_tail(e);
      return;
    }
    default: break;
  }
  ++malformed_;
}

bool BpfProfileBuilder::has_user_mapping(RawProcess& process, ProcessState& state, uint64_t address,
                                         uint64_t time_ns) {
  if (address >= state.hit_start && address < state.hit_end) return true;
  const RawMapping* m = process.find_mapping(address, time_ns);
  if (m == nullptr && drain_mmaps_) {
    // The kernel may have reported the mapping since the last drain (it did before this sample).
    drain_mmaps_();
    m = process.find_mapping(address, time_ns);
  }
  if (m == nullptr && read_maps_ &&
      (!state.maps_read || state.reread_at_once ||
       time_ns >= state.maps_read_at + config_.maps_reread_interval_ns)) {
    // Something mapped after the last read (ld.so loading libraries, dlopen, JIT); the maps may show it.
    read_maps(process, state, time_ns, time_ns);
    m = process.find_mapping(address, time_ns);
    state.reread_at_once = m != nullptr;
  }
  if (m == nullptr) return false;
  state.hit_start = m->start;
  state.hit_end = m->unmapped_ns == 0 ? m->end : m->start;  // an ended mapping is not cached
  return true;
}

namespace {

uint64_t mono_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

StackEnd BpfProfileBuilder::apply_user_state(const hpd_sample_event& e, const RawProcess& process,
                                             std::span<const uint8_t> stack) {
  UserRegs regs;
  for (size_t i = 0; i < HPD_USER_REGS && i < kDwarfRegCount; ++i) {
    if ((e.regs_valid >> i) & 1) regs.set(static_cast<DwarfReg>(i), e.regs[i]);
  }
  const StackCopy copy{regs.sp(), stack, config_.stack_copy_bytes};
  const UnwindContext context{&process, &profile_.modules, e.header.time_ns};
  const uint64_t start = mono_ns();
  StackEnd end = StackEnd::kUnknown;
  if (config_.dwarf) {
    end = unwinder_->unwind(context, regs, copy, unwound_);
    std::swap(user_, unwound_);
    ++unwind_.unwound;
  } else if (insert_frameless_leaf_caller(*unwinder_, context, regs, copy, user_)) {
    ++unwind_.leaf_callers;
  }
  unwind_.ns += mono_ns() - start;
  return end;
}

void BpfProfileBuilder::on_sample(const hpd_sample_event& e, size_t frames_present,
                                  std::span<const uint8_t> stack) {
  const hpd_event_header& h = e.header;
  // A sample of a process no longer followed (one the ring held before its exec record): not the
  // client's to have.
  if (const RawProcess* gone = profile_.find_process(h.pid);
      gone != nullptr && gone->unfollowed_ns != 0 && h.time_ns >= gone->unfollowed_ns) {
    ++unfollowed_samples_;
    return;
  }
  RawThread& thread = ensure_thread(h.pid, h.tid, h.time_ns, h.comm);
  RawProcess& process = profile_.process(h.pid);
  ProcessState& state = states_[h.pid];

  RawSample sample;
  sample.time_ns = h.time_ns;
  sample.pid = h.pid;
  sample.tid = h.tid;
  sample.cpu = static_cast<uint16_t>(h.cpu);
  if (h.type == HPD_EVENT_OFF_CPU) {
    sample.kind = SampleKind::kOffCpu;
    sample.off_cpu_ns = e.off_cpu_ns;
  } else {
    sample.kind = SampleKind::kOnCpu;
    sample.cpu_delta_ns = e.cpu_delta_ns;
    if (e.flags & HPD_SAMPLE_NO_BASELINE) ++samples_without_baseline_;
  }

  // __u64 is unsigned long long, uint64_t unsigned long: copy rather than alias.
  static_assert(sizeof(e.ips[0]) == sizeof(uint64_t));
  std::memcpy(ips_.data(), e.ips, frames_present * sizeof(uint64_t));
  const std::span<const uint64_t> ips(ips_.data(), frames_present);
  auto kernel = ips.first(e.kernel_frames);
  if (h.type == HPD_EVENT_OFF_CPU && is_scheduler_frame_) {
    // The blocking function, not the scheduler, is the leaf of an off-CPU stack.
    size_t skip = 0;
    while (skip < kernel.size() && is_scheduler_frame_(kernel[skip])) ++skip;
    kernel = kernel.subspan(skip);
  }
  const auto fp_user = ips.subspan(e.kernel_frames, e.user_frames);
  user_.assign(fp_user.begin(), fp_user.end());
  const bool have_regs = (e.regs_valid >> static_cast<unsigned>(DwarfReg::kRip) & 1) &&
                         (e.regs_valid >> static_cast<unsigned>(DwarfReg::kRsp) & 1);
  const bool unwind_here = unwinder_ != nullptr && have_regs && h.type == HPD_EVENT_ON_CPU;
  // The walk needs the mapping of the leaf: read the maps again if it is new (dlopen, JIT).
  if (unwind_here && config_.dwarf) has_user_mapping(process, state, e.regs[16], h.time_ns);
  StackEnd unwound = unwind_here ? apply_user_state(e, process, stack) : StackEnd::kUnknown;
  // The walk met a return address in no known mapping (a library mapped after the last read): if a
  // new read of the maps shows it, walk again.
  if (unwind_here && config_.dwarf && unwinder_->last_unmapped_pc() != 0 &&
      has_user_mapping(process, state, unwinder_->last_unmapped_pc(), h.time_ns)) {
    unwound = apply_user_state(e, process, stack);
  }
  const std::span<const uint64_t> user(user_);
  const bool user_process = !process.mappings.empty();
  const int kind_index = h.type == HPD_EVENT_OFF_CPU ? 1 : 0;
  if (e.user_end < HPD_USER_END_COUNT) ++user_ends_[kind_index][e.user_end];
  if (e.flags & HPD_SAMPLE_TABLES_PENDING) ++tables_pending_;
  if (e.user_fp_frames > 0) ++with_fp_frames_;
  if (unwound != StackEnd::kUnknown) {
    sample.stack_end = unwound;
    if (sample.stack_end != StackEnd::kFailed && e.kernel_frames >= HPD_MAX_KERNEL_FRAMES)
      sample.stack_end = StackEnd::kTruncated;
  } else if (user.empty() && user_process) {
    sample.stack_end = StackEnd::kFailed;
  } else if (e.user_end != HPD_USER_END_NONE) {
    // The programs' walk says how it ended: complete only when it reached the thread's first frame.
    switch (e.user_end) {
      case HPD_USER_END_ROOT:
      case HPD_USER_END_FP_ZERO: sample.stack_end = StackEnd::kComplete; break;
      case HPD_USER_END_DEPTH: sample.stack_end = StackEnd::kTruncated; break;
      default: sample.stack_end = StackEnd::kFailed; break;
    }
    if (sample.stack_end == StackEnd::kComplete && e.kernel_frames >= HPD_MAX_KERNEL_FRAMES)
      sample.stack_end = StackEnd::kTruncated;
  } else if (e.user_frames >= HPD_MAX_USER_FRAMES || e.kernel_frames >= HPD_MAX_KERNEL_FRAMES) {
    sample.stack_end = StackEnd::kTruncated;
  } else if (user.empty()) {
    // A kernel thread: its kernel stack is all there is.
    sample.stack_end = StackEnd::kComplete;
  } else {
    // A user walk that says nothing of its end (records of older programs): not known complete.
    sample.stack_end = StackEnd::kUnknown;
  }
  if (e.kernel_error < 0 && sample.stack_end != StackEnd::kFailed) sample.stack_end = StackEnd::kFailed;
  if (sample.stack_end == StackEnd::kFailed) {
    ++profile_.lost.stack_failures;
    ++thread.lost.stack_failures;
  } else if (sample.stack_end == StackEnd::kTruncated) {
    ++profile_.lost.truncated_stacks;
    ++thread.lost.truncated_stacks;
  }
  if (!kernel.empty() || !user.empty()) sample.stack = profile_.stacks.intern(kernel, user);

  if (!user.empty() && !has_user_mapping(process, state, user[0], h.time_ns) && !state.counted_without_maps &&
      process.mappings.empty()) {
    // It exited (or exec'd and exited) before its maps could be read: its frames stay unresolved.
    state.counted_without_maps = true;
    ++processes_without_maps_;
  }
  if (sample.kind == SampleKind::kOnCpu) last_on_cpu_[h.tid] = profile_.samples.size();
  profile_.samples.push_back(sample);
  ++samples_;
}

void BpfProfileBuilder::on_fork(const hpd_fork_event& e) {
  const hpd_event_header& h = e.header;
  const uint64_t time = h.time_ns;
  if (h.pid != e.parent_pid && profile_.find_process(h.pid) == nullptr) {
    // A new process: fork copied the parent's address space and name. An exec, if any, sends its own
    // record, so /proc (which may already show the new image) is not read here.
    RawProcess& child = profile_.process(h.pid);
    child.start_ns = time;
    ProcessState& state = states_[h.pid];
    state.maps_read = true;
    state.maps_read_at = time;
    if (const RawProcess* parent = profile_.find_process(e.parent_pid)) {
      const std::vector<RawMapping> inherited = parent->mappings;
      const std::string name = parent->name;
      const std::string exe = parent->exe;
      const std::vector<std::string> cmdline = parent->cmdline;
      RawProcess& c = profile_.process(h.pid);
      for (RawMapping m : inherited) {
        if (m.unmapped_ns != 0) continue;
        m.time_ns = time;
        c.mappings.push_back(m);
      }
      c.name = name;
      c.exe = exe;
      c.cmdline = cmdline;
    } else {
      state.maps_read = false;  // nothing to copy from: read /proc when its samples arrive
    }
    apply_pending_mappings(h.pid);
  }
  const bool known = profile_.find_thread(h.pid, h.tid) != nullptr;
  RawThread& thread = ensure_thread(h.pid, h.tid, time, h.comm);
  if (!known) thread.start_ns = time;
}

void BpfProfileBuilder::on_exec(const hpd_task_event& e) {
  const hpd_event_header& h = e.header;
  // The kernel's records of this exec's start and of the new image's mappings were written before
  // this record: deliver them first.
  if (drain_mmaps_) drain_mmaps_();
  const bool known = profile_.find_process(h.pid) != nullptr;
  RawProcess& process = profile_.process(h.pid);
  if (!known) process.start_ns = config_.start_ns;
  if ((e.task_flags & HPD_TASK_UNFOLLOWED) != 0) {
    // Not followed from here on (hpd_exec): the old image's mappings end, and nothing of the new
    // image (its name, path, arguments, mappings) is read for a client that may not see it.
    process.unfollowed_ns = h.time_ns;
    end_mappings_at_exec(process, h.time_ns, h.time_ns);
    return;
  }
  {
    // The mappings made before the exec began (the kernel's COMM record; without mmap records this
    // record's time stands in) are the old image's. They serve until this record: it is written
    // once execve has set the new image's registers, and until then a sample (in the kernel, in
    // execve) still holds the old image's user registers, although the new image is being mapped.
    ProcessState& state = states_[h.pid];
    const bool started = state.exec_ns > state.last_exec_record_ns && state.exec_ns <= h.time_ns;
    state.exec_ns = started ? state.exec_ns : h.time_ns;
    state.last_exec_record_ns = h.time_ns;
    end_mappings_at_exec(process, state.exec_ns, h.time_ns);
  }
  process.name = comm_of(h);
  process.exe.clear();
  process.cmdline.clear();
  if (describe_) describe_(process);
  ProcessState& state = states_[h.pid];
  state.hit_start = state.hit_end = 0;
  state.counted_without_maps = false;
  state.reread_at_once = true;
  apply_pending_mappings(h.pid);
  read_maps(process, state, h.time_ns, h.time_ns);
  ensure_thread(h.pid, h.tid, h.time_ns, h.comm);
}

void BpfProfileBuilder::on_exit(const hpd_task_event& e) {
  const hpd_event_header& h = e.header;
  if (h.pid == h.tid && profile_.find_process(h.pid) == nullptr) {
    if (auto it = pending_.find(h.pid); it != pending_.end()) {
      pending_count_ -= it->second.size();
      pending_.erase(it);
    }
  }
  if (profile_.find_thread(h.pid, h.tid) == nullptr && e.ringbuf_drops == 0) {
    // A thread that never had a sample: nothing to show; keep the profile free of empty tracks.
    if (h.pid == h.tid && profile_.find_process(h.pid) != nullptr) {
      RawProcess& process = profile_.process(h.pid);
      process.end_ns = std::max<uint64_t>(process.end_ns, h.time_ns);
    }
    return;
  }
  RawThread& thread = ensure_thread(h.pid, h.tid, h.time_ns, h.comm);
  thread.end_ns = std::max<uint64_t>(thread.end_ns, h.time_ns);
  thread.lost.lost_records += e.ringbuf_drops;

  RawProcess& process = profile_.process(h.pid);
  // The process ends with its last thread; the leader's exit marks it, later thread exits extend it.
  if (h.pid == h.tid || process.end_ns != 0) process.end_ns = std::max<uint64_t>(process.end_ns, h.time_ns);
}

void BpfProfileBuilder::on_mmap(int32_t pid, uint64_t start, uint64_t length, uint64_t file_offset,
                                const std::string& path, const std::string& build_id, uint64_t time_ns) {
  if (length == 0) return;
  const RawMapping mapping{start, start + length, file_offset, 0, time_ns};
  if (profile_.find_process(pid) != nullptr) {
    const auto state = states_.find(pid);
    if (state != states_.end() && time_ns < state->second.exec_ns) return;  // of the replaced image
    add_mmap_mapping(profile_.process(pid), mapping, path, build_id);
    return;
  }
  if (pending_count_ >= kMaxPendingMappings) {
    ++mmaps_dropped_;
    return;
  }
  pending_[pid].push_back(PendingMapping{mapping, path, build_id});
  ++pending_count_;
}

void BpfProfileBuilder::on_exec_start(int32_t pid, uint64_t time_ns) {
  // Mappings from now on are the new image's; the old ones end with the eBPF exec record (on_exec).
  states_[pid].exec_ns = time_ns;
}

void BpfProfileBuilder::add_mmap_mapping(RawProcess& process, const RawMapping& mapping,
                                         const std::string& path, const std::string& build_id) {
  add_module_mapping(profile_, process, mapping, path, build_id, build_ids_, states_[process.pid].exec_ns);
  ++mmaps_recorded_;
}

void BpfProfileBuilder::apply_pending_mappings(int32_t pid) {
  const auto it = pending_.find(pid);
  if (it == pending_.end()) return;
  const std::vector<PendingMapping> list = std::move(it->second);
  pending_.erase(it);
  pending_count_ -= list.size();
  RawProcess& process = profile_.process(pid);
  const uint64_t exec_ns = states_[pid].exec_ns;
  for (const PendingMapping& p : list) {
    if (p.mapping.time_ns >= exec_ns) add_mmap_mapping(process, p.mapping, p.path, p.build_id);
  }
}

void BpfProfileBuilder::on_cpu_tail(const hpd_task_event& e) {
  const auto last = last_on_cpu_.find(e.header.tid);
  if (last == last_on_cpu_.end()) return;  // no sample: the thread is not in the profile
  // The CPU time the thread used after its last sample becomes a sample of its own, where the last
  // one was (the task is gone: no stack to take), at the thread's end.
  if (e.cpu_tail_ns > 0 && last->second < profile_.samples.size()) {
    RawSample tail = profile_.samples[last->second];
    if (const RawThread* thread = profile_.find_thread(tail.pid, tail.tid))
      tail.time_ns = std::max(tail.time_ns, thread->end_ns);
    tail.cpu_delta_ns = e.cpu_tail_ns;
    profile_.samples.push_back(tail);
    ++cpu_tails_;
  }
  last_on_cpu_.erase(last);
}

void BpfProfileBuilder::on_still_off_cpu(const hpd_sample_event& event, uint64_t end_ns) {
  if (event.kernel_frames > HPD_MAX_KERNEL_FRAMES || event.user_frames > HPD_MAX_USER_FRAMES) {
    ++malformed_;
    return;
  }
  hpd_sample_event e = event;
  e.header.type = HPD_EVENT_OFF_CPU;
  e.off_cpu_ns = end_ns > e.header.time_ns ? end_ns - e.header.time_ns : 0;
  e.stack_bytes = 0;  // a map value carries no stack copy
  on_sample(e, size_t{e.kernel_frames} + e.user_frames, {});
}

void BpfProfileBuilder::add_thread_drops(int32_t pid, int32_t tid, uint64_t drops) {
  if (drops == 0) return;
  // A thread (or process) known only from its drops is described like one first seen in a sample.
  ensure_thread(pid, tid, config_.start_ns, "").lost.lost_records += drops;
}

}  // namespace hpd
