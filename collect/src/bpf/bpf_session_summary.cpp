// The end of an eBPF recording: what is left in the maps, the programs' statistics, and the recording's
// summary (bpf_session.h).
#include "bpf/bpf_session.h"

#include <bpf/bpf.h>

#include <algorithm>

#include "hpd/base/proc_files.h"
#include "hpd/base/process.h"

namespace hpd::bpf_recording {

// After sampling stopped: threads still off the CPU, per-thread drop counts, global counters.
void BpfSession::collect_leftovers() {
  const uint64_t end = result_.profile.info.end_mono_ns;
  uint64_t switch_ins_inferred_at_end = 0;
  if (off_cpu_) {
    const int fd = bpf_map__fd(skel_->maps.blocked);
    auto value = std::make_unique<hpd_sample_event>();
    int32_t key = 0;
    bool first = true;
    int32_t next = 0;
    while (bpf_map_get_next_key(fd, first ? nullptr : &key, &next) == 0) {
      first = false;
      key = next;
      if (bpf_map_lookup_elem(fd, &key, value.get()) != 0) continue;
      // A thread whose switch-in went unseen (emit_unseen_switch_in in profile.bpf.c) and that has run
      // ever since: its CPU time since the switch-out (the record's off_cpu_ns until it is emitted) says
      // when it came back.
      uint64_t until = end;
      const uint64_t now = mono_now();
      if (const auto runtime = read_thread_runtime_ns(value->header.pid, value->header.tid);
          runtime && *runtime > value->off_cpu_ns && now > *runtime - value->off_cpu_ns) {
        const uint64_t back = now - (*runtime - value->off_cpu_ns);
        if (back < end) {
          until = std::max<uint64_t>(back, value->header.time_ns);
          value->flags |= HPD_SAMPLE_SWITCH_IN_INFERRED;
          ++switch_ins_inferred_at_end;
        }
      }
      decoder_->decode_still_off_cpu(*value, until,
                                     [this](const Event& event) { builder_->on_event(event); });
    }
  }
  {
    const int fd = bpf_map__fd(skel_->maps.threads);
    hpd_thread_state state{};
    int32_t key = 0, next = 0;
    bool first = true;
    while (bpf_map_get_next_key(fd, first ? nullptr : &key, &next) == 0) {
      first = false;
      key = next;
      // Every drop belongs to a target thread, even one none of whose records arrived.
      if (bpf_map_lookup_elem(fd, &key, &state) == 0 && state.ringbuf_drops > 0)
        builder_->on_event(ThreadLostEvent{state.pid, key, state.ringbuf_drops});
    }
  }
  result_.cpu_tails_missing = builder_->tails_awaited();
  const auto since_start = [](const bpf_program* program, const ProgramStats& start, uint64_t& runs,
                              uint64_t& ns) {
    const ProgramStats now = program_stats(program);
    runs = now.runs - std::min(now.runs, start.runs);
    ns = now.ns - std::min(now.ns, start.ns);
  };
  since_start(skel_->progs.hpd_on_cpu, sample_prog_at_start_, result_.bpf_sample_prog_runs,
              result_.bpf_sample_prog_ns);
  since_start(skel_->progs.hpd_sched_switch, switch_prog_at_start_, result_.bpf_switch_prog_runs,
              result_.bpf_switch_prog_ns);
  since_start(skel_->progs.hpd_sched_wakeup, wakeup_prog_at_start_, result_.bpf_wakeup_prog_runs,
              result_.bpf_wakeup_prog_ns);
  const int possible = libbpf_num_possible_cpus();
  if (possible > 0) {
    std::vector<uint64_t> per_cpu(static_cast<size_t>(possible));
    uint64_t totals[HPD_COUNTER_COUNT] = {};
    for (uint32_t i = 0; i < HPD_COUNTER_COUNT; ++i) {
      if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.counters), &i, per_cpu.data()) != 0) continue;
      for (const uint64_t v : per_cpu) totals[i] += v;
    }
    result_.profile.lost.lost_records += totals[HPD_COUNTER_RINGBUF_DROPS];
    result_.off_cpu_intervals_lost = totals[HPD_COUNTER_OFFCPU_MAP_FULL];
    result_.off_cpu_switch_ins_inferred = totals[HPD_COUNTER_SWITCH_IN_UNSEEN] + switch_ins_inferred_at_end;
    result_.threads_without_cpu_baseline = totals[HPD_COUNTER_THREAD_MAP_FULL];
    result_.samples_with_stale_cpu_time = totals[HPD_COUNTER_STALE_RUNTIME];
    result_.stack_copies_skipped_ring_full = totals[HPD_COUNTER_COPIES_SKIPPED];
    result_.steal_taken_from_runtimes_ns = totals[HPD_COUNTER_STEAL_TAKEN_NS];
    result_.samples_with_steal_unread = totals[HPD_COUNTER_STEAL_UNREAD];
  }
}

// The kernel counts these only while kernel.bpf_stats_enabled is 1; they stay 0 otherwise.
BpfSession::ProgramStats BpfSession::program_stats(const bpf_program* program) {
  const int fd = bpf_program__fd(program);
  if (fd < 0) return {};  // not loaded (the scheduler hooks without off-CPU samples)
  bpf_prog_info info{};
  uint32_t length = sizeof info;
  if (bpf_obj_get_info_by_fd(fd, &info, &length) != 0) return {};
  return {info.run_cnt, info.run_time_ns};
}

void BpfSession::summarize() {
  RawProfile& profile = result_.profile;
  result_.processes_without_maps = builder_->processes().processes_without_maps();
  result_.samples_without_cpu_baseline = decoder_->samples_without_baseline();
  result_.blocked_split_at_wakeup = decoder_->blocked_split_at_wakeup();
  result_.blocked_without_wakeup = decoder_->blocked_without_wakeup();
  result_.waits_charged_as_cpu = decoder_->waits_charged_as_cpu();
  result_.waits_charged_ns = decoder_->waits_charged_ns();
  result_.off_cpu_with_stack_copy = decoder_->off_cpu_with_stack_copy();
  result_.off_cpu_without_stack_copy = decoder_->off_cpu_without_stack_copy();
  result_.samples_given_exit_user_stack = builder_->samples_after_exit_stack();
  result_.call_graph = dwarf_ ? CallGraph::kDwarf : cfi_ ? CallGraph::kCfi : CallGraph::kFp;
  if (cfi_maps_) {
    const CfiMapStats t = cfi_maps_->stats();
    RecordResult::CfiSummary& c = result_.cfi;
    c.modules = t.modules;
    c.modules_loaded = t.modules_loaded;
    c.rows = t.rows;
    c.map_bytes = t.map_bytes;
    c.row_capacity = t.row_capacity;
    c.modules_evicted = t.modules_evicted;
    c.modules_refused = t.modules_refused;
    c.rows_wanted = t.rows_wanted;
    c.compile_ns = t.compile_ns;
    c.tables_compiled = t.tables_compiled;
    c.tables_kept = t.tables_kept;
    c.tables_stored = t.tables_stored;
    c.disk_cache = t.disk_cache;
    c.tables_from_disk = t.tables_from_disk;
    c.disk_load_ns = t.disk_load_ns;
    c.disk_refused = t.disk_refused;
    c.disk_refusal = t.disk_refusal;
    c.mappings_dropped = t.mappings_dropped;
    c.without_table = t.without_table;
    c.samples_tables_pending = decoder_->samples_tables_pending();
    c.off_cpu_rewalked = decoder_->off_cpu_rewalked();
    c.off_cpu_rewalked_from_copy = decoder_->off_cpu_rewalked_from_copy();
    c.on_cpu_rewalked = decoder_->on_cpu_rewalked();
    c.samples_with_fp_frames = decoder_->samples_with_fp_frames();
  }
  static const char* const kEndNames[HPD_USER_END_COUNT] = {"no walk",
                                                            "root",
                                                            "frame pointer 0",
                                                            "too deep",
                                                            "read fault",
                                                            "no CFI for the pc",
                                                            "unsupported CFI row",
                                                            "broken frame pointer",
                                                            "stack did not grow"};
  for (int kind = 0; kind < 2; ++kind) {
    for (int end = 1; end < HPD_USER_END_COUNT; ++end) {
      const uint64_t n = decoder_->user_ends()[static_cast<size_t>(kind)][static_cast<size_t>(end)];
      if (n != 0) result_.user_stack_ends[kind].emplace_back(kEndNames[end], n);
    }
  }
  result_.stack_copy_bytes = stack_copy_;
  const UnwindCounters& unwound = builder_->unwind_counters();
  result_.unwind_ns = unwound.ns;
  result_.unwound_samples = unwound.unwound;
  result_.leaf_callers_added = unwound.leaf_callers;
  result_.sample_bytes = unwound.sample_bytes;
  profile.lost.lost_records += decoder_->malformed_records();
  // Mappings the kernel could not report (a full ring) or that were not kept (too many pending).
  result_.mmap_records_lost = mmap_watch_.lost() + builder_->processes().mmaps_dropped();
  result_.mmap_records = builder_->processes().mmaps_recorded();
  result_.cpu_tail_samples = builder_->cpu_tails();
  result_.threads_with_cpu_excess = builder_->threads_with_cpu_excess();
  result_.cpu_excess_taken_back_ns = builder_->cpu_taken_back_ns();
  result_.cpu_excess_ns = builder_->cpu_taken_back_ns() + builder_->cpu_excess_left_ns();
  profile.lost.lost_records += result_.mmap_records_lost;
}

}  // namespace hpd::bpf_recording
