// Decodes the records of hpd's BPF programs (bpf/profile_event.h) from the eBPF ring buffer into the
// builder's events (events.h), checking each record's sizes; keeps the programs' own statistics (how
// their user walks ended). The eBPF half of "both backends feed one builder".
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "events.h"
#include "perf/perf_event_decoder.h"
#include "profile_event.h"

namespace hpd {

class BpfEventDecoder {
 public:
  // `stack_copy_bytes`: the user stack the programs were asked to copy per on-CPU sample (0 = unknown).
  explicit BpfEventDecoder(uint32_t stack_copy_bytes = 0) : stack_copy_bytes_(stack_copy_bytes) {}

  // One ring-buffer record. Records that are too short or of an unknown type are counted, not used.
  void decode(std::span<const uint8_t> bytes, const EventSink& sink);
  // A thread still off the CPU when the recording ended (a value of the programs' `blocked` map): its
  // interval runs until `end_ns`.
  void decode_still_off_cpu(const hpd_sample_event& event, uint64_t end_ns, const EventSink& sink);

  // cfi mode: the user stack of thread `tid`'s off-CPU record of the switch-out at `time_ns`, walked
  // again once its process's tables were published (off_cpu_rewalk.h). It replaces the frame-pointer
  // walk the record carries when that record is decoded.
  void replace_off_cpu_user_stack(int32_t tid, uint64_t time_ns, std::vector<uint64_t> ips, uint32_t end,
                                  uint32_t fp_frames);

  [[nodiscard]] uint64_t malformed_records() const { return malformed_; }
  // How the programs' user walks ended (enum hpd_user_end), on-CPU [0] and off-CPU [1].
  using UserEnds = std::array<std::array<uint64_t, HPD_USER_END_COUNT>, 2>;
  [[nodiscard]] const UserEnds& user_ends() const { return user_ends_; }
  // cfi walks that stepped by frame pointer because their process's or a module's table was not loaded.
  [[nodiscard]] uint64_t samples_tables_pending() const { return tables_pending_; }
  // Off-CPU records whose user stack was replaced by a walk made once the tables were published (not
  // counted in samples_tables_pending()).
  [[nodiscard]] uint64_t off_cpu_rewalked() const { return rewalked_; }
  // cfi walks with at least one frame stepped by frame pointer (modules without a table).
  [[nodiscard]] uint64_t samples_with_fp_frames() const { return with_fp_frames_; }
  // On-CPU samples whose thread had no earlier runtime value (cpu_delta_ns is a guess).
  [[nodiscard]] uint64_t samples_without_baseline() const { return samples_without_baseline_; }
  // Blocked intervals split at their wakeup into a blocked and a waiting-for-CPU sample.
  [[nodiscard]] uint64_t blocked_split_at_wakeup() const { return split_at_wakeup_; }
  // Blocked intervals that ended (the thread ran again) with no wakeup seen: all of it counted as
  // blocked, including any wait for a CPU after the wakeup (woken before the hook was attached).
  [[nodiscard]] uint64_t blocked_without_wakeup() const { return without_wakeup_; }

 private:
  // `still_off_cpu`: the interval did not end with a switch-in (the recording ended first).
  void decode_sample(const hpd_sample_event& e, size_t frames_present, std::span<const uint8_t> stack,
                     size_t record_bytes, const EventSink& sink, bool still_off_cpu = false);

  uint32_t stack_copy_bytes_;
  std::array<uint64_t, HPD_MAX_FRAMES> ips_{};
  UserEnds user_ends_{};
  uint64_t malformed_ = 0;
  uint64_t tables_pending_ = 0;
  uint64_t rewalked_ = 0;
  struct Rewalk {
    uint64_t time_ns;
    std::vector<uint64_t> ips;
    uint32_t end;
    uint32_t fp_frames;
  };
  std::unordered_map<int32_t, Rewalk> rewalks_;  // by tid: at most one switch-out waits per thread
  uint64_t with_fp_frames_ = 0;
  uint64_t samples_without_baseline_ = 0;
  uint64_t split_at_wakeup_ = 0;
  uint64_t without_wakeup_ = 0;
  Event event_;  // the sample being decoded
};

// The comm of a record, without the padding.
std::string comm_of(const hpd_event_header& header);

}  // namespace hpd
