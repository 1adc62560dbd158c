// Test helpers that feed one backend's records through its decoder into the one RawProfileBuilder,
// the way each recorder does: the record-level tests of both backends are written against these.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "bpf/bpf_event_decoder.h"
#include "perf/perf_event_decoder.h"
#include "raw_profile_builder.h"

namespace hpd {

// A record as the ring holds it: its bytes.
template <typename T>
std::vector<uint8_t> bytes_of(const T& record) {
  std::vector<uint8_t> bytes(sizeof record);
  std::memcpy(bytes.data(), &record, sizeof record);
  return bytes;
}

// perf_event records -> PerfEventDecoder -> RawProfileBuilder (as perf_recorder.cpp wires them).
class PerfFeed {
 public:
  PerfFeed(RawProfile& profile, PerfDecoderConfig config, BuildIdLookup build_ids = {},
           std::function<void(RawProcess&)> describe = {}, uint64_t start_ns = 0)
      : decoder_(config),
        builder_(profile, BuilderConfig{TrackerConfig{start_ns}, config.dwarf},
                 SystemLookups{{}, std::move(build_ids), std::move(describe)}) {}

  void on_record(const PerfRecord& record) {
    decoder_.decode(record, 0, [this](const Event& e) { builder_.on_event(e); });
  }
  void add_maps(int32_t pid, const std::vector<MapsEntry>& maps, uint64_t time_ns) {
    builder_.processes().add_maps(pid, maps, time_ns);
  }
  void set_own_event_ids(int32_t tid, std::vector<uint64_t> ids) {
    decoder_.set_own_event_ids(tid, std::move(ids));
  }
  void set_syscall_entries(std::function<bool(uint64_t)> is_syscall_entry) {
    decoder_.set_syscall_entries(std::move(is_syscall_entry));
  }
  void end_of_pass() {
    decoder_.end_of_pass([this](const Event& e) { builder_.on_event(e); });
  }
  void finish_off_cpu(uint64_t end_ns) {
    decoder_.finish_off_cpu(end_ns, [this](const Event& e) { builder_.on_event(e); });
  }
  void add_direct_event(int32_t pid, int32_t tid, uint32_t cpu, uint64_t id) {
    decoder_.add_direct_event(pid, tid, cpu, id);
  }
  void final_count(uint64_t id, uint64_t total) { decoder_.final_count(id, total); }
  void finish_cpu_tails(bool counts_complete) {
    decoder_.finish_cpu_tails(counts_complete, [this](const Event& e) { builder_.on_event(e); });
  }
  uint64_t tails_unknown() const { return decoder_.tails_unknown(); }
  void set_unwinder(Unwinder* unwinder) { builder_.set_unwinder(unwinder); }
  uint64_t samples() const { return builder_.samples(); }
  uint64_t cpu_tails() const { return builder_.cpu_tails(); }
  uint64_t duplicate_samples() const { return decoder_.duplicate_samples(); }
  const UnwindCounters& unwind_counters() const { return builder_.unwind_counters(); }
  RawProfileBuilder& builder() { return builder_; }

 private:
  PerfEventDecoder decoder_;
  RawProfileBuilder builder_;
};

struct BpfFeedConfig {
  uint64_t start_ns = 0;
  uint64_t maps_reread_interval_ns = 200'000'000;
  bool dwarf = false;
  uint32_t stack_copy_bytes = 0;
};

// eBPF ring records -> BpfEventDecoder -> RawProfileBuilder (as bpf_recorder.cpp wires them), with the
// mmap watch's records as events.
class BpfFeed {
 public:
  BpfFeed(RawProfile& profile, BpfFeedConfig config,
          std::function<std::vector<MapsEntry>(int32_t)> read_maps = {}, BuildIdLookup build_ids = {},
          std::function<void(RawProcess&)> describe = {})
      : decoder_(config.stack_copy_bytes),
        builder_(profile,
                 BuilderConfig{TrackerConfig{config.start_ns, config.maps_reread_interval_ns}, config.dwarf},
                 SystemLookups{std::move(read_maps), std::move(build_ids), std::move(describe)}) {}

  void on_record(std::span<const uint8_t> bytes) {
    decoder_.decode(bytes, [this](const Event& e) { builder_.on_event(e); });
  }
  void add_initial_process(int32_t pid, const std::vector<MapsEntry>& maps) {
    builder_.processes().add_initial_process(pid, maps);
  }
  void on_mmap(int32_t pid, uint64_t start, uint64_t length, uint64_t offset, const std::string& path,
               const std::string& build_id, uint64_t time_ns) {
    builder_.on_event(MmapEvent{pid, time_ns, start, length, offset, path, build_id});
  }
  void on_exec_start(int32_t pid, uint64_t time_ns) { builder_.on_event(ExecStartEvent{pid, time_ns}); }
  void on_still_off_cpu(const hpd_sample_event& event, uint64_t end_ns) {
    decoder_.decode_still_off_cpu(event, end_ns, [this](const Event& e) { builder_.on_event(e); });
  }
  void add_thread_drops(int32_t pid, int32_t tid, uint64_t drops) {
    builder_.on_event(ThreadLostEvent{pid, tid, drops});
  }
  void set_mmap_source(std::function<void()> drain, std::function<uint64_t()> lost = {}) {
    builder_.processes().set_mmap_source(std::move(drain), std::move(lost));
  }
  void set_unwinder(Unwinder* unwinder) { builder_.set_unwinder(unwinder); }
  void expect_switch_stacks() { decoder_.expect_switch_stacks(); }
  uint64_t off_cpu_with_stack_copy() const { return decoder_.off_cpu_with_stack_copy(); }
  uint64_t off_cpu_without_stack_copy() const { return decoder_.off_cpu_without_stack_copy(); }
  void set_scheduler_frames(std::function<bool(uint64_t)> f) { builder_.set_scheduler_frames(std::move(f)); }

  const BpfEventDecoder::UserEnds& user_ends() const { return decoder_.user_ends(); }
  uint64_t samples() const { return builder_.samples(); }
  uint64_t malformed_records() const { return decoder_.malformed_records(); }
  uint64_t samples_without_baseline() const { return decoder_.samples_without_baseline(); }
  uint64_t blocked_split_at_wakeup() const { return decoder_.blocked_split_at_wakeup(); }
  uint64_t waits_charged_as_cpu() const { return decoder_.waits_charged_as_cpu(); }
  uint64_t waits_charged_ns() const { return decoder_.waits_charged_ns(); }
  uint64_t blocked_without_wakeup() const { return decoder_.blocked_without_wakeup(); }
  uint64_t processes_without_maps() const { return builder_.processes().processes_without_maps(); }
  uint64_t mmaps_recorded() const { return builder_.processes().mmaps_recorded(); }
  uint64_t cpu_tails() const { return builder_.cpu_tails(); }
  const UnwindCounters& unwind_counters() const { return builder_.unwind_counters(); }

 private:
  BpfEventDecoder decoder_;
  RawProfileBuilder builder_;
};

}  // namespace hpd
