// Record-to-RawProfile conversion.
#include "perf/profile_builder.h"

#include <sys/mman.h>
#include <time.h>

#include <algorithm>

#include "recording_common.h"

namespace hpd {

std::string module_path_for(const std::string& path) {
  if (path.empty() || path == "//anon" || path.starts_with("/anon_hugepage") || path == "[anon]")
    return "[anon]";
  return path;
}

PerfProfileBuilder::PerfProfileBuilder(RawProfile& profile, ProfileBuilderConfig config,
                                       BuildIdLookup build_ids, ProcessDescriber describe)
    : profile_(profile), config_(config), build_ids_(std::move(build_ids)), describe_(std::move(describe)) {}

void PerfProfileBuilder::add_maps(int32_t pid, const std::vector<MapsEntry>& maps, uint64_t time_ns) {
  RawProcess& process = profile_.process(pid);
  for (const MapsEntry& e : maps) {
    if (e.executable)
      add_module_mapping(profile_, process, RawMapping{e.start, e.end, e.offset, kNoIndex, time_ns}, e.path,
                         {}, build_ids_, last_exec_of(pid));
  }
}

uint64_t PerfProfileBuilder::last_exec_of(int32_t pid) const {
  const auto it = last_exec_.find(pid);
  return it == last_exec_.end() ? 0 : it->second;
}

void PerfProfileBuilder::end_exec_window(const SampleRecord& s) {
  const auto it = exec_window_.find(s.pid);
  if (it == exec_window_.end() || s.time <= it->second) return;
  RawProcess& process = profile_.process(s.pid);
  bool running_new = (s.misc & PERF_RECORD_MISC_CPUMODE_MASK) == PERF_RECORD_MISC_USER;
  if (!running_new && !split_.user.empty()) {
    // A kernel sample proves it only with a user address that the new image covers and the old
    // one does not (the new image may map a file where the old one had it).
    const uint64_t address = split_.user.front();
    bool in_new = false, in_old = false;
    for (const RawMapping& m : process.mappings) {
      if (m.unmapped_ns != 0 || address < m.start || address >= m.end) continue;
      (m.time_ns > it->second ? in_new : in_old) = true;
    }
    running_new = in_new && !in_old;
  }
  if (!running_new) return;
  // Ended at this sample, not at the exec's start: samples from other CPUs' rings that were taken
  // inside execve may still come, and the old image explains them.
  end_mappings_at_exec(process, it->second, s.time);
  exec_window_.erase(it);
}

void PerfProfileBuilder::set_own_event_ids(int32_t tid, std::vector<uint64_t> ids) {
  own_ids_[tid] = std::unordered_set<uint64_t>(ids.begin(), ids.end());
}

namespace {

uint64_t mono_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

void PerfProfileBuilder::on_record(const PerfRecord& record, size_t bytes) {
  if (std::holds_alternative<SampleRecord>(record)) unwind_.sample_bytes += bytes;
  on_record(record);
}

void PerfProfileBuilder::on_record(const PerfRecord& record) {
  if (const auto* s = std::get_if<SampleRecord>(&record)) {
    on_sample(*s);
  } else if (const auto* m = std::get_if<Mmap2Record>(&record)) {
    on_mmap2(*m);
  } else if (const auto* c = std::get_if<CommRecord>(&record)) {
    on_comm(*c);
  } else if (const auto* t = std::get_if<TaskRecord>(&record)) {
    on_task(*t);
  } else if (const auto* l = std::get_if<LostRecord>(&record)) {
    profile_.lost.lost_records += l->lost;
  } else if (const auto* th = std::get_if<ThrottleRecord>(&record)) {
    if (!th->unthrottle) ++profile_.lost.throttle_events;
  }
}

RawProcess& PerfProfileBuilder::ensure_process(int32_t pid, uint64_t time_ns) {
  const bool known = profile_.find_process(pid) != nullptr;
  RawProcess& process = profile_.process(pid);
  if (!known) {
    process.start_ns = time_ns;
    if (describe_) describe_(process);
  }
  return process;
}

RawThread& PerfProfileBuilder::ensure_thread(int32_t pid, int32_t tid, uint64_t time_ns) {
  const bool known = profile_.find_thread(pid, tid) != nullptr;
  ensure_process(pid, time_ns);
  RawThread& thread = profile_.thread(pid, tid);
  if (!known) thread.start_ns = time_ns;
  return thread;
}

uint64_t PerfProfileBuilder::cpu_delta(const SampleRecord& s) {
  if (!config_.read_values || !s.read_value) return s.period;
  auto& per_cpu = last_value_[s.tid];
  if (per_cpu.size() <= s.cpu) per_cpu.resize(s.cpu + 1, 0);
  uint64_t& last = per_cpu[s.cpu];
  // A smaller value means a new event behind a reused tid: its count started from zero.
  const uint64_t delta = *s.read_value >= last ? *s.read_value - last : *s.read_value;
  last = *s.read_value;
  return delta;
}

void PerfProfileBuilder::on_sample(const SampleRecord& s) {
  if (auto it = own_ids_.find(s.tid); it != own_ids_.end() && !it->second.contains(s.id)) {
    ++duplicates_;
    return;
  }
  RawThread& thread = ensure_thread(s.pid, s.tid, s.time);

  RawSample sample;
  sample.time_ns = s.time;
  sample.pid = s.pid;
  sample.tid = s.tid;
  sample.cpu = static_cast<uint16_t>(s.cpu);
  sample.kind = SampleKind::kOnCpu;
  sample.cpu_delta_ns = cpu_delta(s);

  split_callchain(s.callchain, split_);
  end_exec_window(s);
  const StackEnd user_end = apply_user_stack(s);
  if (user_end != StackEnd::kUnknown) {
    sample.stack_end = user_end;
    if (split_.user.empty() && split_.kernel.empty() && s.ip != 0) split_.user.push_back(s.ip);
  } else if (split_.kernel.empty() && split_.user.empty() && s.ip != 0) {
    // No callchain at all: keep at least the sampled instruction.
    const uint16_t mode = s.misc & PERF_RECORD_MISC_CPUMODE_MASK;
    (mode == PERF_RECORD_MISC_KERNEL ? split_.kernel : split_.user).push_back(s.ip);
    sample.stack_end = StackEnd::kFailed;
  } else if (split_.address_count >= config_.max_stack) {
    sample.stack_end = StackEnd::kTruncated;
  } else if (split_.user.empty()) {
    // The frame-pointer walk produced no user frame at all (unreadable user stack).
    sample.stack_end = StackEnd::kFailed;
  } else {
    // The walk stopped on its own (null or invalid frame pointer). Frame-pointer walking cannot tell
    // "reached the outermost frame" from "hit code built without frame pointers".
    sample.stack_end = StackEnd::kComplete;
  }
  if (sample.stack_end == StackEnd::kTruncated) {
    ++profile_.lost.truncated_stacks;
    ++thread.lost.truncated_stacks;
  }
  if (sample.stack_end == StackEnd::kFailed) {
    ++profile_.lost.stack_failures;
    ++thread.lost.stack_failures;
  }
  if (!split_.kernel.empty() || !split_.user.empty())
    sample.stack = profile_.stacks.intern(split_.kernel, split_.user);
  profile_.samples.push_back(sample);
  ++samples_;
}

StackEnd PerfProfileBuilder::apply_user_stack(const SampleRecord& s) {
  if (unwinder_ == nullptr || s.regs_abi == PERF_SAMPLE_REGS_ABI_NONE || s.user_regs.empty()) {
    // dwarf mode without registers: a kernel thread, or the kernel could not read the user state.
    return config_.dwarf && (s.misc & PERF_RECORD_MISC_CPUMODE_MASK) == PERF_RECORD_MISC_USER
               ? StackEnd::kFailed
               : StackEnd::kUnknown;
  }
  const RawProcess* process = profile_.find_process(s.pid);
  if (process == nullptr) return StackEnd::kUnknown;
  const UserRegs regs = UserRegs::from_perf(config_.regs_mask, s.user_regs);
  const StackCopy copy{regs.sp(), s.user_stack, s.stack_size};
  const UnwindContext context{process, &profile_.modules, s.time};
  const uint64_t start = mono_ns();
  StackEnd end = StackEnd::kUnknown;
  if (config_.dwarf) {
    end = unwinder_->unwind(context, regs, copy, unwound_);
    std::swap(split_.user, unwound_);
    ++unwind_.unwound;
  } else if (insert_frameless_leaf_caller(*unwinder_, context, regs, copy, split_.user)) {
    ++unwind_.leaf_callers;
  }
  unwind_.ns += mono_ns() - start;
  return end;
}

void add_mapping_once(RawProcess& process, const RawMapping& mapping, uint64_t image_since_ns) {
  for (const RawMapping& m : process.mappings) {
    if (m.unmapped_ns == 0 && m.time_ns >= image_since_ns && m.start == mapping.start &&
        m.end == mapping.end && m.file_offset == mapping.file_offset && m.module == mapping.module) {
      return;
    }
  }
  process.mappings.push_back(mapping);
}

void add_module_mapping(RawProfile& profile, RawProcess& process, RawMapping mapping, const std::string& path,
                        std::string build_id, const BuildIdLookup& build_ids, uint64_t image_since_ns) {
  const std::string module = module_path_for(path);
  // Asked even when the record carries the build-id: the file is held open from here on, while
  // the process lives (see HeldFile).
  MappedModule found;
  if (build_ids && (module.front() == '/' || module == "[vdso]"))
    found = build_ids(process.pid, mapping.start, mapping.end, path);
  if (build_id.empty()) build_id = std::move(found.build_id);
  mapping.module = profile.intern_module(module, build_id);
  RawModule& m = profile.modules[mapping.module];
  if (!m.file && found.file) m.file = std::move(found.file);
  if (m.image.empty() && !found.image.empty()) m.image = std::move(found.image);
  add_mapping_once(process, mapping, image_since_ns);
}

void end_mappings_at_exec(RawProcess& process, uint64_t exec_ns, uint64_t ended_ns) {
  for (RawMapping& m : process.mappings) {
    if (m.unmapped_ns == 0 && m.time_ns <= exec_ns) m.unmapped_ns = ended_ns != 0 ? ended_ns : exec_ns;
  }
}

void PerfProfileBuilder::on_mmap2(const Mmap2Record& r) {
  if ((r.prot & PROT_EXEC) == 0) return;
  const uint64_t time = r.sample_id.present ? r.sample_id.time : 0;
  RawProcess& process = ensure_process(r.pid, time);
  add_module_mapping(profile_, process,
                     RawMapping{r.address, r.address + r.length, r.page_offset, kNoIndex, time}, r.filename,
                     r.build_id, build_ids_, last_exec_of(r.pid));
}

void PerfProfileBuilder::on_comm(const CommRecord& r) {
  const uint64_t time = r.sample_id.present ? r.sample_id.time : 0;
  RawThread& thread = ensure_thread(r.pid, r.tid, time);
  thread.name = r.comm;
  RawProcess& process = profile_.process(r.pid);
  if (r.pid == r.tid || r.exec) process.name = r.comm;
  if (r.exec) {
    // The kernel writes the exec's COMM record before the new image's MMAP2 records, so all current
    // mappings belong to the old image. They must not explain samples of the new image, but until
    // execve has set the new image's registers a sample (in the kernel, inside execve) still holds
    // the old image's user registers. So the old mappings end at the first sample that shows the
    // new image running (end_exec_window), or at the next exec.
    if (const auto open = exec_window_.find(r.pid); open != exec_window_.end())
      end_mappings_at_exec(process, open->second, time);
    exec_window_[r.pid] = time;
    last_exec_[r.pid] = time;
    // After an exec the process has a new executable and command line.
    if (describe_) describe_(process);
  }
}

void PerfProfileBuilder::on_task(const TaskRecord& r) {
  if (r.fork) {
    const bool new_process = r.pid != r.ppid && profile_.find_process(r.pid) == nullptr;
    ensure_process(r.pid, r.time);
    if (new_process) {
      // fork copies the address space and the name; exec (if any) will bring its own records.
      if (const RawProcess* parent = profile_.find_process(r.ppid)) {
        const std::vector<RawMapping> inherited = parent->mappings;
        const std::string name = parent->name;
        RawProcess& child = profile_.process(r.pid);
        for (const RawMapping& m : inherited) add_mapping_once(child, m);
        if (child.name.empty()) child.name = name;
      }
    }
    const RawThread* creator = profile_.find_thread(r.ppid, r.ptid);
    const std::string creator_name = creator != nullptr ? creator->name : std::string();
    RawThread& thread = ensure_thread(r.pid, r.tid, r.time);
    thread.start_ns = std::min(thread.start_ns == 0 ? r.time : thread.start_ns, r.time);
    if (thread.name.empty()) thread.name = creator_name;
    return;
  }
  RawThread& thread = ensure_thread(r.pid, r.tid, r.time);
  thread.end_ns = std::max(thread.end_ns, r.time);
  RawProcess& process = profile_.process(r.pid);
  // The process ends with its last thread; the leader's exit marks it, later thread exits extend it.
  if (r.pid == r.tid || process.end_ns != 0) process.end_ns = std::max(process.end_ns, r.time);
}

}  // namespace hpd
