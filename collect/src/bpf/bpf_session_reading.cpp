// Reading an eBPF recording: the ring and the mmap watch drained into the builder, the kernel's symbols
// (bpf_session.h).
#include "bpf/bpf_session.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "bpf/own_programs.h"
#include "bpf/sched_frames.h"
#include "hpd/base/process.h"
#include "hpd/symbolizer/symbolizer.h"
#include "kernel_symbols_kept.h"

namespace hpd::bpf_recording {

// Runs hpd_warm_ring, then consumes the discarded records it leaves, so that the ring is empty when
// the first event is attached. A failed run costs only speed, never data.
void BpfSession::warm_ring() {
  if (!warm_ring_) return;
  bpf_test_run_opts run{};
  run.sz = sizeof run;
  if (bpf_prog_test_run_opts(bpf_program__fd(skel_->progs.hpd_warm_ring), &run) == 0)
    result_.bpf_ring_pages_warmed = run.retval;
  if (ring_buffer__consume(ring_.get()) < 0)
    throw RecordError("cannot read the eBPF ring buffer: " + errno_text(errno));
}

int BpfSession::on_ring_record(void* ctx, void* data, size_t size) {
  auto* self = static_cast<BpfSession*>(ctx);
  try {
    // Read as it comes, not when decoded (which may wait behind the process's held records): hpd_exec
    // took the process's mappings out of the kernel's map before it wrote this.
    if (hpd_event_header header; self->cfi_maps_ && size >= sizeof header) {
      std::memcpy(&header, data, sizeof header);
      if (header.type == HPD_EVENT_EXEC) self->cfi_maps_->exec_in_kernel(header.pid, header.time_ns);
    }
    self->decoder_->decode({static_cast<const uint8_t*>(data), size}, self->to_builder_);
    return 0;
  } catch (...) {
    // Nothing may unwind through libbpf's C frames; stop the drain and rethrow outside.
    self->callback_error_ = std::current_exception();
    return -1;
  }
}

// Executable mappings as the kernel makes them (mmap_watch.h): the targets and their future children,
// the cgroup, or the whole system, as the programs filter.
void BpfSession::open_mmap_watch() {
  MmapWatch::Scope scope;
  if (filter_ == HPD_FILTER_PIDS) {
    scope.pids = options_.target.pids;
    if (command_) scope.pids.push_back(command_->pid());
    scope.children = options_.follow_children;
    scope.wake_per_record = cfi_;
  } else if (filter_ == HPD_FILTER_CGROUP) {
    scope.cgroup_fd = cgroup_fd_.get();
  }
  constexpr size_t kMmapRingPages = 16;
  try {
    mmap_watch_.open(scope, cpus_, kMmapRingPages);
  } catch (const RecordError& e) {
    // The recording does not need the watch: without it, a process's mappings are read from
    // /proc/PID/maps when its first record is handled, as before the watch existed. Only the
    // processes that are gone by then lose their modules; the user is told.
    result_.mmap_watch_fallback_reason = e.what();
    return;
  }
  builder_->processes().set_mmap_source([this] { drain_mmaps(); }, [this] { return mmap_watch_.lost(); });
}

void BpfSession::drain_mmaps() {
  mmap_watch_.drain(
      [this](const Mmap2Record& r) {
        // With tables, the live process is asked once of the mapping's file, for the tables and the
        // profile: a system-wide recording meets every mapping of every short-lived process, most of
        // them gone by now, each a few opens. (Without, the profile asks for a process it knows.)
        MappedModule found;
        const bool ask = cfi_maps_ && names_mapped_file(r.filename);
        if (ask) found = build_ids_.for_mapping(r.pid, r.address, r.address + r.length, r.filename);
        if (auto event = mmap_event_of(r)) {
          if (ask) event->found = &found;
          builder_->on_event(*event);
        }
        if (cfi_maps_)
          cfi_maps_->add_mapping(r.pid, r.address, r.length, r.page_offset, r.filename,
                                 ask ? &found : nullptr, r.sample_id.present ? r.sample_id.time : 0);
      },
      [this](const CommRecord& c) {
        builder_->on_event(ExecStartEvent{c.pid, time_of(c.sample_id)});
        if (cfi_maps_) cfi_maps_->exec(c.pid, c.sample_id.present ? c.sample_id.time : 0);
      });
}

void BpfSession::drain(bool rewalk) {
  // Mappings first: a sample in the ring was taken after the mmap that explains it. Every mapping made
  // before this moment is read by drain_mmaps (unless the watch lost it).
  const uint64_t mappings_read_at = mono_now();
  drain_mmaps();
  if (drain_pause_us_ != 0) ::usleep(drain_pause_us_);
  if (!kallsyms_ready(!rewalk)) {
    // The records wait in the ring for the kernel's symbols; the targets' tables are published and
    // their blocked threads' stacks walked again meanwhile.
    if (cfi_maps_) cfi_maps_->poll();
    if (rewalk && rewalk_ && !skel_->bss->calls_runtime_active)
      rewalk_->poll(*cfi_maps_, *decoder_, mappings_read_at, mono_now());
    return;
  }
  const int n = ring_buffer__consume(ring_.get());
  if (callback_error_) std::rethrow_exception(std::exchange(callback_error_, nullptr));
  if (n < 0 && n != -EINTR) throw RecordError("cannot read the eBPF ring buffer: " + errno_text(n));
  if (cfi_maps_) cfi_maps_->poll();
  // Not with the call-counting runtime, whose return hooks on the stack only the programs replace.
  if (rewalk && rewalk_ && !skel_->bss->calls_runtime_active)
    rewalk_->poll(*cfi_maps_, *decoder_, mappings_read_at, mono_now());
  if (cfi_maps_ && decoder_->holding()) release_held(mappings_read_at, false);
}

void BpfSession::await_cpu_tails() {
  // Bounded for a thread preempted between its exit and its last switch-out on a loaded machine; a
  // record the ring dropped is reported only when the task is freed (hpd_free), maybe seconds later.
  constexpr uint64_t kCpuTailWaitMs = 500;
  const uint64_t deadline = mono_now() + kCpuTailWaitMs * 1'000'000;
  drain(false);
  while (builder_->tails_awaited() != 0 && mono_now() < deadline) {
    pollfd ring{ring_buffer__epoll_fd(ring_.get()), POLLIN, 0};
    ::poll(&ring, 1, 5);
    drain(false);
  }
}

BpfSession::KernelTable BpfSession::kernel_table(std::shared_ptr<const KernelSymbols> symbols) {
  auto sched = std::make_shared<SchedulerFrames>(SchedulerFrames::from_symbols(*symbols));
  return KernelTable{std::move(symbols), std::move(sched)};
}

void BpfSession::use_kallsyms(KernelTable table) {
  timing_mark("kallsyms-read");
  const KernelSymbols& symbols = *table.symbols;
  result_.kernel_symbols = std::move(table.symbols);
  const std::shared_ptr<SchedulerFrames> sched = std::move(table.sched);
  // This session's own programs (the sched_switch one is in front of every off-CPU stack): the table
  // may be one hpd kept from before they were loaded, so their code is taken from the programs. The
  // table names a program's samples (timer samples that land in it) as a new read would when it was
  // read with the program loaded where it is (hpd's programs outlive a recording: bpf_preloader.h), or
  // completed with it (a launched command's, read while they load: own_programs.h), and then those
  // samples need no new read at the end (kernel_symbols_for_profile).
  if (sched->size() > 0) {
    std::vector<int> unnamed;  // the programs with a function the table does not name
    bpf_program* prog = nullptr;
    bpf_object__for_each_program(prog, skel_->obj) {
      bool all_named = true;
      for (const JitedFunction& f : jited_functions(bpf_program__fd(prog))) {
        sched->add(f.start, f.end);
        if (names_function(symbols, f)) {
          result_.kernel_code_named.emplace_back(f.start, f.end);
        } else {
          all_named = false;
        }
      }
      if (!all_named) unnamed.push_back(bpf_program__fd(prog));
    }
    if (!unnamed.empty()) name_own_programs(unnamed);
  }
  if (sched->size() > 0) builder_->set_scheduler_frames([sched](uint64_t a) { return sched->contains(a); });
}

// A table kept from before this session's programs were loaded (hpd's first recording of another kind)
// does not name them: a timer sample in one would have the table read again at the recording's end
// (40-50 ms of CPU). Their names are known (their BTF: as /proc/kallsyms lists them), so a copy of the
// table is completed with them, used, and kept in its place (5 MiB, copied and completed in 5-6 ms of
// CPU: docs/performance.md).
void BpfSession::name_own_programs(const std::vector<int>& fds) {
  std::vector<JitedFunction> functions;
  for (const int fd : fds) {
    std::vector<JitedFunction> of = jited_functions(fd, true);
    for (JitedFunction& f : of) {
      if (f.name.empty()) return;  // its BTF unreadable: a read at the end names it, if it must
      if (!names_function(*result_.kernel_symbols, f)) functions.push_back(std::move(f));
    }
  }
  auto completed = std::make_shared<KernelSymbols>(*result_.kernel_symbols);
  for (const auto& [start, end] : add_missing_functions(*completed, functions))
    result_.kernel_code_named.emplace_back(start, end);
  kernel_symbols_completed(result_.kernel_symbols, completed);
  result_.kernel_symbols = std::move(completed);
  timing_mark("kallsyms-completed");
}

bool BpfSession::kallsyms_ready(bool wait) {
  if (!kallsyms_.valid()) return true;
  if (!wait && kallsyms_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
  use_kallsyms(kallsyms_.get());
  return true;
}

}  // namespace hpd::bpf_recording
