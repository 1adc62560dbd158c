// cfi mode's unwind tables in an eBPF recording: the initial ones, forks and exits, the walks held for
// them (bpf_session.h).
#include "bpf/bpf_session.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "hpd/base/proc_files.h"
#include "hpd/base/proc_maps.h"
#include "hpd/base/process.h"
#include "proc/program_modules.h"

namespace hpd::bpf_recording {

// cfi mode: the tables of what the targets have mapped now (and, for a command, of what it will map
// first), in place before sampling starts.
void BpfSession::load_initial_tables() {
  if (!cfi_) return;
  const bool system_wide = filter_ != HPD_FILTER_PIDS;
  cfi_maps_ = std::make_unique<CfiMaps>(cfi_map_fds(skel_.get(), config_), system_wide,
                                        options_.cfi_row_index, std::move(cfi_arrays_));
  std::vector<int32_t> pids = options_.target.pids;
  if (filter_ == HPD_FILTER_ALL) pids = list_processes();
  if (filter_ == HPD_FILTER_CGROUP) pids = cgroup_processes(options_.target.cgroup);
  timing_mark("cfi-maps-open");
  const int32_t self = ::getpid();
  for (const int32_t pid : pids) {
    if (pid != self) cfi_maps_->add_process_maps(pid, read_proc_maps(pid));
  }
  timing_mark("tables-asked");
  // HPD_OFF_CPU_REWALK=0 (a diagnostic, and the tests' way to the other path): waiting threads' stacks are
  // not read for a second walk, so off-CPU samples that met a table not published yet are walked again
  // from the copy of their stack taken as they blocked, or keep their walk.
  const char* reads = std::getenv("HPD_OFF_CPU_REWALK");
  if (off_cpu_ && (reads == nullptr || std::string_view(reads) != "0"))
    rewalk_ = std::make_unique<OffCpuRewalk>(bpf_map__fd(skel_->maps.pending_walks), system_wide);
  if (const char* pause = std::getenv("HPD_DRAIN_PAUSE_US"))
    drain_pause_us_ =
        static_cast<uint32_t>(std::min<unsigned long>(std::strtoul(pause, nullptr, 10), 100'000));
  if (command_) cfi_maps_->prewarm(likely_modules(resolve_command(options_.target.command.front())));
  // A command its launcher holds stopped at its exec (hpctl through hpd) has mapped only its executable
  // and interpreter yet: its libraries' tables too are put in place before it runs, as for a command
  // launched here, so that the threads it blocks in its first microseconds are walked with them.
  if (options_.pid_held_at_exec) {
    for (const int32_t pid : options_.target.pids) {
      if (const std::string exe = read_exe(pid); !exe.empty()) cfi_maps_->prewarm(likely_modules(exe));
    }
  }
  // System-wide, tables are compiled while the recording runs, for the processes sampled; samples
  // taken while their tables are compiled are walked by frame pointer and counted (tables pending).
  // Those in the cache on disk are loaded before sampling starts.
  if (system_wide)
    cfi_maps_->wait_for_cached_tables(kInitialTablesWaitMs);
  else
    cfi_maps_->wait_for_tables(kInitialTablesWaitMs);
}

// Forks and exits seen by the programs keep the per-process mapping tables current.
void BpfSession::note_for_cfi(const Event& event) {
  if (const auto* f = std::get_if<ForkEvent>(&event)) {
    if (f->parent_pid != f->pid) cfi_maps_->fork(f->parent_pid, f->pid);
  } else if (const auto* x = std::get_if<ExitEvent>(&event)) {
    if (x->pid == x->tid) {
      cfi_maps_->exit(x->pid);
      held_tried_.erase(x->pid);
    }
  } else if (const auto* s = std::get_if<SampleEvent>(&event)) {
    cfi_maps_->sampled(s->pid);
  }
}

BpfEventDecoder::HeldWalk BpfSession::walk_held(const hpd_sample_event& e, std::span<const uint8_t> stack,
                                                BpfEventDecoder::UserWalk& out) {
  const int32_t pid = e.header.pid;
  // Its image is gone: what is published now is the one its exec brought.
  if (const uint64_t exec = cfi_maps_->exec_ns(pid); exec != 0 && e.header.time_ns < exec)
    return BpfEventDecoder::HeldWalk::kAsIs;
  const CfiMaps::Published published = cfi_maps_->published(pid);
  if (published.at == 0) return BpfEventDecoder::HeldWalk::kWait;
  // Walked as soon as the modules its own stack passes through are published, not once its whole process's
  // are: one slow module (or one that never gets a table) no longer keeps every sample of the process from
  // its second walk. The same sample is walked again only after its process is published again.
  const CfiMaps::WalkTried tried{e.header.time_ns, e.header.tid, published.at};
  if (const auto it = held_tried_.find(pid); it != held_tried_.end() && it->second == tried)
    return BpfEventDecoder::HeldWalk::kWait;
  CfiMaps::StackWalk walk = cfi_maps_->walk_stack(
      pid, e.regs[static_cast<size_t>(DwarfReg::kRip)], e.regs[static_cast<size_t>(DwarfReg::kRsp)],
      e.regs[static_cast<size_t>(DwarfReg::kRbp)], stack, e.regs[static_cast<size_t>(DwarfReg::kRdi)]);
  if (walk.pending && published.tables_pending) {
    held_tried_[pid] = tried;  // a table it needs is still to come
    return BpfEventDecoder::HeldWalk::kWait;
  }
  held_tried_.erase(pid);
  if (walk.pending) return BpfEventDecoder::HeldWalk::kAsIs;  // a table that will not come (map full)
  out = BpfEventDecoder::UserWalk{std::move(walk.ips), walk.end, walk.fp_frames};
  return BpfEventDecoder::HeldWalk::kWalked;
}

void BpfSession::release_held(uint64_t mappings_read_at, bool final) {
  decoder_->release_held([this](const hpd_sample_event& e, std::span<const uint8_t> stack,
                                BpfEventDecoder::UserWalk& out) { return walk_held(e, stack, out); },
                         mappings_read_at, to_builder_, final);
}

}  // namespace hpd::bpf_recording
