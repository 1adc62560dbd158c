// hpd::record(): option checks and dispatch to the recording backend.
#include "hpd/collect/recorder.h"

#include <sys/stat.h>
#include <sys/statfs.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "bpf/bpf_recorder.h"
#include "hpd/base/proc_files.h"
#include "hpd/base/process.h"
#include "hpd/collect/call_graph_choice.h"
#include "hpd/symbolizer/symbolizer.h"
#include "kernel_symbols_kept.h"
#include "perf/perf_privileges.h"
#include "perf/perf_recorder.h"

namespace hpd {

const char* to_string(CpuTimeSource source) {
  switch (source) {
    case CpuTimeSource::kThreadCounter: return "thread-counter";
    case CpuTimeSource::kSamplePeriod: return "sample-period";
    case CpuTimeSource::kSchedRuntimeAtSample: return "sched-runtime-at-sample";
  }
  return "unknown";
}

namespace {

// --call-graph auto: dwarf when a target's executable or one of its libraries lacks frame pointers.
// System-wide and cgroup targets stay with fp: a stack copy per sample of every process would flood
// the ring, and there is no one executable to inspect.
CallGraphChoice resolve_call_graph(const RecordOptions& options) {
  if (options.call_graph != CallGraph::kAuto) return CallGraphChoice{options.call_graph, ""};
  if (options.target.is_system_wide()) {
    return CallGraphChoice{CallGraph::kFp,
                           std::string(options.target.all_processes ? "all processes are" : "a cgroup is") +
                               " recorded with frame-pointer stacks unless the dwarf call "
                               "graph is asked for"};
  }
  // Each target with the libraries it runs: those it maps, or those a command's program names.
  std::vector<CallGraphTarget> targets;
  if (!options.target.command.empty()) {
    targets.push_back(call_graph_target_of(resolve_command(options.target.command.front())));
  } else {
    for (const int32_t pid : options.target.pids) targets.push_back(call_graph_target_of(pid));
  }
  CallGraphChoice choice = choose_call_graph(targets);
  if (!options.target.command.empty()) return choice;
  // /proc/PID/exe says nothing to the user: name the file.
  for (size_t i = 0; i < options.target.pids.size(); ++i) {
    const std::string link = targets[i].executable;
    const std::string exe = read_exe(options.target.pids[i]);
    if (exe.empty()) continue;
    for (size_t at = choice.reason.find(link); at != std::string::npos; at = choice.reason.find(link, at)) {
      choice.reason.replace(at, link.size(), exe);
      at += exe.size();
    }
  }
  return choice;
}

bool is_zombie_process(int32_t pid) {
  if (read_process_state(pid) != 'Z') return false;
  // A leader that called pthread_exit() shows as a zombie while its other threads still run.
  for (const int32_t tid : list_threads(pid)) {
    const char state = read_thread_state(pid, tid);
    if (state != 0 && state != 'Z' && state != 'X') return false;
  }
  return true;
}

void check_target_pid(int32_t pid, const PerfPrivileges& privileges) {
  const std::string text = std::to_string(pid);
  if (pid <= 0) throw RecordError("invalid pid " + text + ": a process id is a positive number");
  const char state = read_process_state(pid);
  if (state == 0) throw RecordError("no process with pid " + text);
  if (is_zombie_process(pid)) {
    throw RecordError("process " + text + " is a zombie (it exited and waits to be reaped by its parent); " +
                      "there is nothing left to record");
  }
  if (!privileges.may_profile_other_users()) {
    const auto uid = read_process_uid(pid);
    if (uid && *uid != privileges.euid) {
      throw RecordError("cannot record pid " + text + ": it belongs to uid " + std::to_string(*uid) +
                        " and recording another user's process needs privileges; " + privileges.advice());
    }
  }
}

// The cgroup v2 directory the option names; RecordTarget::cgroup may be relative to the cgroup v2 mount.
std::string cgroup_directory(const std::string& cgroup) {
  if (cgroup.front() == '/') return cgroup;
  const std::string mount = cgroup2_mount();
  return (mount.empty() ? std::string("/sys/fs/cgroup") : mount) + "/" + cgroup;
}

void check_cgroup(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw RecordError("no cgroup at " + path + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) throw RecordError(path + " is not a cgroup directory");
  struct statfs fs;
  constexpr long kCgroup2Magic = 0x63677270;
  if (::statfs(path.c_str(), &fs) != 0 || fs.f_type != kCgroup2Magic) {
    const std::string mount = cgroup2_mount();
    throw RecordError(path + " is not in a cgroup v2 hierarchy (" +
                      (mount.empty() ? std::string("none is mounted") : "it is mounted at " + mount) +
                      "); cgroup v1 is not supported");
  }
}

}  // namespace

namespace {

uint64_t clock_ns(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

void timing_mark(const char* step) {
  static const bool enabled = [] {
    const char* env = std::getenv("HPD_TIMING");
    return env != nullptr && env[0] != '\0' && std::strcmp(env, "0") != 0;
  }();
  if (!enabled) return;
  std::fprintf(stderr, "hpd-timing %s %llu %llu\n", step,
               static_cast<unsigned long long>(clock_ns(CLOCK_MONOTONIC)),
               static_cast<unsigned long long>(clock_ns(CLOCK_PROCESS_CPUTIME_ID)));
}

bool bpf_backend_available(std::string* why) {
  std::string reason = bpf_unavailable_reason(probe_perf_privileges());
  if (reason.empty()) reason = bpf_load_check();
  if (why != nullptr) *why = reason;
  return reason.empty();
}

OptionProblem record_option_problem(const RecordOptions& options) {
  if (target_problem(options.target) != TargetProblem::kNone) return OptionProblem::kNone;
  if (options.call_graph == CallGraph::kCfi && options.backend == Backend::kPerf)
    return OptionProblem::kCfiWithPerf;
  if (options.backend == Backend::kPerf && options.target.all_processes) return OptionProblem::kAllWithPerf;
  if (options.backend == Backend::kPerf && !options.target.cgroup.empty())
    return OptionProblem::kCgroupWithPerf;
  if (options.sample_allocations && options.target.command.empty() && options.alloc_log_fd < 0 &&
      options.target.pids.empty())
    return options.target.all_processes ? OptionProblem::kAllocWithAll : OptionProblem::kAllocWithCgroup;
  return OptionProblem::kNone;
}

const char* record_problem_text(TargetProblem problem) {
  switch (problem) {
    case TargetProblem::kNone: break;
    case TargetProblem::kNoTarget:
      return "nothing to record: no process id, no command to run, neither all processes nor a cgroup";
    case TargetProblem::kPidsAndCommand: return "give either process ids or a command to run, not both";
    case TargetProblem::kAllAndCgroup: return "give either all processes or a cgroup, not both";
    case TargetProblem::kPidsAndSystemWide:
      return "process ids cannot be recorded with all processes or a cgroup";
    case TargetProblem::kEmptyCommand: return "the command to run is empty";
  }
  return "";
}

const char* record_problem_text(OptionProblem problem) {
  switch (problem) {
    case OptionProblem::kNone: break;
    case OptionProblem::kCfiWithPerf:
      return "the cfi call graph unwinds inside the eBPF programs: use it with the eBPF backend, or the "
             "dwarf "
             "call graph with the perf_event backend";
    case OptionProblem::kAllWithPerf: return "recording all processes needs the eBPF backend, not perf_event";
    case OptionProblem::kCgroupWithPerf: return "recording a cgroup needs the eBPF backend, not perf_event";
    case OptionProblem::kAllocWithAll:
    case OptionProblem::kAllocWithCgroup:
      return "allocations are sampled in a launched command or in given processes, not in all processes or a "
             "cgroup";
    case OptionProblem::kBpfUnprivileged:
      return "the eBPF backend needs CAP_BPF and CAP_PERFMON (or root); run as root, or record a process "
             "with "
             "the perf_event backend";
    case OptionProblem::kBpfNeededUnprivileged:
      return "this recording needs CAP_BPF and CAP_PERFMON (or root); run as root, or record a process with "
             "the perf_event backend";
  }
  return "";
}

const char* to_string(TargetProblem problem) {
  switch (problem) {
    case TargetProblem::kNone: break;
    case TargetProblem::kNoTarget: return "no_target";
    case TargetProblem::kPidsAndCommand: return "pids_and_command";
    case TargetProblem::kAllAndCgroup: return "all_and_cgroup";
    case TargetProblem::kPidsAndSystemWide: return "pids_and_system_wide";
    case TargetProblem::kEmptyCommand: return "empty_command";
  }
  return "";
}

const char* to_string(OptionProblem problem) {
  switch (problem) {
    case OptionProblem::kNone: break;
    case OptionProblem::kCfiWithPerf: return "cfi_with_perf";
    case OptionProblem::kAllWithPerf: return "all_with_perf";
    case OptionProblem::kCgroupWithPerf: return "cgroup_with_perf";
    case OptionProblem::kAllocWithAll: return "alloc_with_all";
    case OptionProblem::kAllocWithCgroup: return "alloc_with_cgroup";
    case OptionProblem::kBpfUnprivileged: return "bpf_unprivileged";
    case OptionProblem::kBpfNeededUnprivileged: return "bpf_needed_unprivileged";
  }
  return "";
}

TargetProblem target_problem_named(std::string_view name) {
  for (const TargetProblem p :
       {TargetProblem::kNoTarget, TargetProblem::kPidsAndCommand, TargetProblem::kAllAndCgroup,
        TargetProblem::kPidsAndSystemWide, TargetProblem::kEmptyCommand})
    if (name == to_string(p)) return p;
  return TargetProblem::kNone;
}

OptionProblem option_problem_named(std::string_view name) {
  for (const OptionProblem p :
       {OptionProblem::kCfiWithPerf, OptionProblem::kAllWithPerf, OptionProblem::kCgroupWithPerf,
        OptionProblem::kAllocWithAll, OptionProblem::kAllocWithCgroup, OptionProblem::kBpfUnprivileged,
        OptionProblem::kBpfNeededUnprivileged})
    if (name == to_string(p)) return p;
  return OptionProblem::kNone;
}

void validate_record_options(const RecordOptions& options) {
  if (const TargetProblem problem = target_problem(options.target); problem != TargetProblem::kNone)
    throw RecordTargetError(problem);
  if (!options.target.cgroup.empty()) check_cgroup(cgroup_directory(options.target.cgroup));
  if (const OptionProblem problem = record_option_problem(options); problem != OptionProblem::kNone)
    throw RecordOptionError(problem);
  if (options.frequency_hz == 0 || options.frequency_hz > kMaxFrequencyHz) {
    throw RecordError("sampling frequency must be between 1 and " + std::to_string(kMaxFrequencyHz) +
                      " Hz (got " + std::to_string(options.frequency_hz) + ")");
  }
  if (!std::isfinite(options.duration_s) || options.duration_s < 0) {
    throw RecordError("duration must be a non-negative number of seconds");
  }
  if (options.stack_copy_bytes != 0 &&
      (options.stack_copy_bytes % 8 != 0 || options.stack_copy_bytes > kMaxStackCopyBytes)) {
    throw RecordError("the stack copy size must be a multiple of 8 bytes up to " +
                      std::to_string(kMaxStackCopyBytes) + " (got " +
                      std::to_string(options.stack_copy_bytes) + ")");
  }
  if (options.cfi_row_capacity > kMaxCfiRowCapacity) {
    throw RecordError("the CFI row map can hold at most " + std::to_string(kMaxCfiRowCapacity) +
                      " rows (got " + std::to_string(options.cfi_row_capacity) + ")");
  }
  if (options.ring_pages != 0 && (options.ring_pages & (options.ring_pages - 1)) != 0) {
    throw RecordError("ring buffer pages must be a power of two (got " + std::to_string(options.ring_pages) +
                      ")");
  }

  const PerfPrivileges privileges = probe_perf_privileges();
  if ((options.backend == Backend::kBpf || needs_bpf(options)) && !privileges.may_use_bpf()) {
    throw RecordOptionError(options.backend == Backend::kBpf ? OptionProblem::kBpfUnprivileged
                                                             : OptionProblem::kBpfNeededUnprivileged);
  }
  if (!privileges.may_profile_own_processes()) {
    throw RecordError("recording needs privileges here: " + privileges.advice());
  }
  if (options.kernel == Switch::kOn && !privileges.may_see_kernel()) {
    throw RecordError("kernel call stacks need privileges: " + privileges.advice() +
                      " (to 1 or lower), or record user stacks only");
  }
  for (const int32_t pid : options.target.pids) check_target_pid(pid, privileges);
}

namespace {

// `options` with call_graph already kFp, kDwarf or kCfi; `perf_call_graph` is the mode for the
// perf_event backend should the eBPF one be unavailable (auto's choice for it, else the same).
RecordResult record_resolved(const RecordOptions& options, const PerfPrivileges& privileges,
                             CallGraph perf_call_graph) {
  switch (options.backend) {
    case Backend::kPerf: return record_with_perf(options, privileges);
    case Backend::kBpf: return record_with_bpf(options, privileges);
    case Backend::kAuto: break;
  }
  // Both backends record either call-graph mode; eBPF's dwarf-mode off-CPU stacks stay frame-pointer walks.
  std::string reason = bpf_unavailable_reason(privileges);
  if (reason.empty()) {
    try {
      return record_with_bpf(options, privileges);
    } catch (const BpfUnavailable& e) {
      reason = e.what();
    }
  }
  if (needs_bpf(options) || perf_call_graph == CallGraph::kCfi)
    throw RecordError("the eBPF backend is needed here but unavailable: " + reason);
  RecordOptions perf_options = options;
  perf_options.call_graph = perf_call_graph;
  RecordResult result = record_with_perf(perf_options, privileges);
  result.backend_fallback_reason = reason;
  return result;
}

}  // namespace

namespace {

// The options as record() resolves them for the eBPF backend.
RecordOptions resolved_for_bpf(const RecordOptions& options) {
  RecordOptions resolved = options;
  if (!resolved.target.cgroup.empty()) resolved.target.cgroup = cgroup_directory(resolved.target.cgroup);
  if (resolved.call_graph == CallGraph::kAuto) resolved.call_graph = CallGraph::kCfi;
  return resolved;
}

}  // namespace

void prepare_recording(const RecordOptions& options) {
  if (options.backend == Backend::kPerf) return;
  bpf_prepare(resolved_for_bpf(options), probe_perf_privileges());
}

bool bpf_backend_available_prepared(const RecordOptions& first, std::string* why, std::string* error) {
  const PerfPrivileges privileges = probe_perf_privileges();
  if (bpf_unavailable_reason(privileges).empty() && first.backend != Backend::kPerf) {
    if (bpf_prepare_now(resolved_for_bpf(first), privileges)) {
      if (why != nullptr) why->clear();
      return true;
    }
    if (error != nullptr) *error = prepared_recording_status().error;
  }
  return bpf_backend_available(why);
}

PreparedRecordingStatus prepared_recording_status() {
  return bpf_prepared_status();
}

void release_prepared_recording() {
  bpf_release_prepared();
}

namespace {

// The earliest on-CPU sample's time, of the samples still held and of those released (0 when none).
uint64_t first_on_cpu_sample(const RawProfile& profile) {
  uint64_t first = 0;
  auto take = [&first](uint64_t t) {
    if (t != 0 && (first == 0 || t < first)) first = t;
  };
  for (const RawSample& s : profile.samples)
    if (s.kind == SampleKind::kOnCpu) take(s.time_ns);
  for (const RawSampleSum& s : profile.released)
    if (s.kind == SampleKind::kOnCpu && s.samples != 0) take(s.first_ns);
  return first;
}

}  // namespace

RecordResult record(const RecordOptions& options) {
  timing_mark("record");
  const uint64_t requested =
      options.requested_mono_ns != 0 ? options.requested_mono_ns : clock_ns(CLOCK_MONOTONIC);
  validate_record_options(options);
  const PerfPrivileges privileges = probe_perf_privileges();
  RecordOptions resolved = options;
  if (!resolved.target.cgroup.empty()) resolved.target.cgroup = cgroup_directory(resolved.target.cgroup);
  CallGraphChoice perf_choice = resolve_call_graph(options);
  const CallGraph perf_call_graph = perf_choice.mode;
  CallGraphChoice call_graph = perf_choice;
  // auto with the eBPF backend: user stacks unwound in the kernel from the modules' CFI, on and off
  // the CPU, for every kind of target.
  if (options.call_graph == CallGraph::kAuto && options.backend != Backend::kPerf &&
      bpf_unavailable_reason(privileges).empty()) {
    call_graph =
        CallGraphChoice{CallGraph::kCfi, "the eBPF programs unwind user stacks with each module's CFI"};
  }
  resolved.call_graph = call_graph.mode;
  // The program a --pid target or a launched command runs first is not the one it may exec: a chain
  // the frame-pointer walk cannot complete after an exec is unwound from the stack copy instead.
  // (System-wide and cgroup targets keep plain fp: a stack copy per sample of every process.)
  const bool exec_may_change_program = options.call_graph == CallGraph::kAuto &&
                                       !options.target.all_processes && options.target.cgroup.empty() &&
                                       perf_call_graph == CallGraph::kFp;
  if (exec_may_change_program) {
    resolved.fp_with_cfi_fallback = true;
    perf_choice.reason +=
        "; a process that execs a program without them is unwound with CFI from a stack copy each sample "
        "carries";
    if (call_graph.mode == CallGraph::kFp) call_graph.reason = perf_choice.reason;
  }
  RecordResult result = record_resolved(resolved, privileges, perf_call_graph);
  if (options.call_graph == CallGraph::kAuto) {
    result.call_graph_reason = result.call_graph == call_graph.mode ? call_graph.reason : perf_choice.reason;
    result.profile.info.call_graph = std::string("auto:") + to_string(result.call_graph);
  }
  result.profile.info.requested_mono_ns = requested;
  result.profile.info.first_sample_mono_ns = first_on_cpu_sample(result.profile);
  // Names for the kernel addresses, kept with the profile (a capture carries them).
  if (result.kernel_symbols) {
    result.kernel_symbols = kernel_symbols_for_profile(result.profile, std::move(result.kernel_symbols),
                                                       result.kernel_code_named);
    result.profile.kernel_symbols = kernel_symbol_lines(result.profile, *result.kernel_symbols);
  }
  return result;
}

}  // namespace hpd
