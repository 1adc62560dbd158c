// The time-ordering stage of the perf backend: the records of all per-CPU rings, delivered to the
// decoder in the order of their timestamps (perf's ordered_events, samply's and Orbit's sorting stage).
//
// Each ring is written in time order (up to the few records written from an interrupt while another
// was being written), but the rings are read one after another, so a child's fork on one CPU may be read
// after its first sample on another. Every round reads all rings to their head and queues what it read;
// at the end of round k the records older than the start of round k-1 are delivered, sorted. A record
// is published within microseconds of its timestamp (the kernel writes it with preemption off), so one
// whole round of slack means every record older than that has been read by then, whichever ring holds
// it; an idle ring holds nothing back (unlike the smallest "last timestamp read" over the rings, which an
// idle CPU keeps at the recording's start). At the end everything left is delivered.
//
// Bounded: past `max_bytes` of queued records (their bytes and what the queue keeps of them) the oldest
// half is delivered early, without waiting for its round, and counted; a record that arrives older than
// what was already delivered (after an early delivery, or from a ring writer held up for a whole round)
// is delivered with the next ones, out of order, and counted as late. The builder's rules for records
// out of order still hold for those.
//
// Records stay where they are: a ring's record is queued in place (its bytes in the ring), and the
// ring's space is freed only up to its oldest record not yet delivered (held_from). Copied are only
// the records the ring cannot keep: one split across the ring's end (read into a scratch buffer), and
// the held records of a ring more than half full of them (release_point copies those out, counted),
// so the kernel keeps room to write while the stage waits for its round.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "perf/perf_records.h"

namespace hpd {

struct OrderingCounters {
  uint64_t delivered = 0;        // records handed on
  uint64_t delivered_early = 0;  // of those, before their round was over, at the memory bound
  uint64_t late = 0;             // handed on after a record younger than them
  uint64_t untimed = 0;          // without a timestamp (events opened without sample_id_all): delivered first
  uint64_t copied_out = 0;       // queued in place, then copied out to free their ring (release_point)
};

class RecordOrdering {
 public:
  // A record and the number of bytes it took in its ring. Its spans refer to memory valid for the call.
  using Deliver = std::function<void(const PerfRecord& record, size_t bytes)>;

  explicit RecordOrdering(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Queues one record read from a ring (`bytes`, header included, are copied). At the bound, delivers
  // the oldest half of the queue first.
  void push(std::span<const uint8_t> bytes, PerfRecord record, const Deliver& deliver);
  // Queues one record in place: `bytes` (the record's `user_stack` refers into them) stay valid and
  // unchanged until the record is delivered or copied out, that is while ring `ring` is not freed past
  // `position`, the record's place in it. A ring's records come in the order of their positions.
  void push_in_place(std::span<const uint8_t> bytes, PerfRecord record, size_t ring, uint64_t position,
                     const Deliver& deliver);
  // The position of ring `ring`'s oldest record queued in place and not yet delivered, if any: the
  // ring's space may be freed up to it.
  [[nodiscard]] std::optional<uint64_t> held_from(size_t ring) const;
  // Where ring `ring` (of `ring_size` bytes, read up to `read_end`) may be freed to: held_from, or
  // `read_end` when it holds nothing. When its held records would keep more than half the ring from
  // the kernel, they are copied out first (counted), and it is `read_end`.
  uint64_t release_point(size_t ring, uint64_t read_end, uint64_t ring_size);
  // Delivers, in time order, the queued records with a timestamp before `time_ns`.
  void deliver_before(uint64_t time_ns, const Deliver& deliver);
  // The end of a round that began (before any ring was read) at `round_start_ns`: the time before
  // which every record has been read, the previous round's start (0 after the first round). The caller
  // delivers up to it (deliver_before), with what it does at a time of its own in between.
  uint64_t end_round(uint64_t round_start_ns);
  // Delivers everything queued (the rings have been read for the last time).
  void flush(const Deliver& deliver) { deliver_before(UINT64_MAX, deliver); }

  [[nodiscard]] const OrderingCounters& counters() const { return counters_; }
  [[nodiscard]] size_t queued() const { return queue_.size(); }
  [[nodiscard]] size_t queued_bytes() const { return bytes_; }

 private:
  static constexpr uint64_t kNotHeld = UINT64_MAX;
  // A queued record. It stays in its slot until delivered; only its Key moves while sorting.
  struct Entry {
    size_t ring_bytes = 0;
    // The record's bytes: a copy (the spans of `record` point there; moving the vector keeps them
    // valid), or, for a record held in place (`held` != kNotHeld), empty.
    std::vector<uint8_t> bytes;
    std::span<const uint8_t> in_ring;  // a record held in place: its bytes in the ring
    size_t ring = 0;                   // a record held in place: its ring, and its number there
    uint64_t held = kNotHeld;
    PerfRecord record;
  };
  struct Key {
    uint64_t time = 0;
    uint64_t seq = 0;  // arrival order: records of one time keep it
    size_t slot = 0;   // into slots_
  };
  // A ring's records held in place, in the order of their positions: delivered ones are dropped from
  // the front (`first` counts them), so the front is the oldest one still held.
  struct Held {
    std::deque<std::pair<uint64_t, bool>> records;  // position, delivered
    uint64_t first = 0;                             // the number of records[0]
  };
  // The stage's own memory for a record (a record held in place costs the ring's space, not this).
  static size_t cost(const Entry& e) { return sizeof(Entry) + sizeof(Key) + e.bytes.size(); }
  void queue(Entry e, const Deliver& deliver);
  // Copies a record's bytes into its own buffer (a spare one if any), its stack span with them.
  void copy_bytes(Entry& e, std::span<const uint8_t> bytes);
  void sort();
  // Delivers the first `count` records (sorted) and forgets them.
  void deliver_front(size_t count, const Deliver& deliver);

  size_t max_bytes_;
  std::vector<Entry> slots_;
  std::vector<size_t> free_slots_;
  std::vector<Key> queue_;  // the queued records, by time from the front when sorted
  // Buffers of delivered records, reused for the next ones (up to max_bytes_ / 2 of them): a fresh
  // 32 KiB buffer per dwarf sample costs its page faults, which doubled the recorder's CPU per sample.
  std::vector<std::vector<uint8_t>> spare_;
  size_t spare_bytes_ = 0;
  std::vector<Held> held_;  // by ring
  size_t sorted_ = 0;       // queue_[0, sorted_) is in order
  size_t bytes_ = 0;
  uint64_t seq_ = 0;
  uint64_t previous_round_start_ = 0;
  uint64_t latest_delivered_ = 0;  // the time of the youngest record handed on
  OrderingCounters counters_;
};

}  // namespace hpd
