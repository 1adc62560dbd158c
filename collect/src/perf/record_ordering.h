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
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "perf/perf_records.h"

namespace hpd {

struct OrderingCounters {
  uint64_t delivered = 0;        // records handed on
  uint64_t delivered_early = 0;  // of those, before their round was over, at the memory bound
  uint64_t late = 0;             // handed on after a record younger than them
  uint64_t untimed = 0;          // without a timestamp (events opened without sample_id_all): delivered first
};

class RecordOrdering {
 public:
  // A record and the number of bytes it took in its ring. Its spans refer to memory valid for the call.
  using Deliver = std::function<void(const PerfRecord& record, size_t bytes)>;

  explicit RecordOrdering(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Queues one record read from a ring (`bytes`, header included, are copied). At the bound, delivers
  // the oldest half of the queue first.
  void push(std::span<const uint8_t> bytes, PerfRecord record, const Deliver& deliver);
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
  struct Entry {
    uint64_t time = 0;
    uint64_t seq = 0;  // arrival order: records of one time keep it
    size_t ring_bytes = 0;
    std::vector<uint8_t> bytes;  // the spans of `record` point here; moving the vector keeps them valid
    PerfRecord record;
  };
  static size_t cost(const Entry& e) { return sizeof(Entry) + e.bytes.size(); }
  void sort();
  // Delivers the first `count` entries (sorted) and forgets them.
  void deliver_front(size_t count, const Deliver& deliver);

  size_t max_bytes_;
  std::vector<Entry> queue_;
  // Buffers of delivered records, reused for the next ones (up to max_bytes_ / 2 of them): a fresh
  // 32 KiB buffer per dwarf sample costs its page faults, which doubled the recorder's CPU per sample.
  std::vector<std::vector<uint8_t>> spare_;
  size_t spare_bytes_ = 0;
  size_t sorted_ = 0;  // queue_[0, sorted_) is in order
  size_t bytes_ = 0;
  uint64_t seq_ = 0;
  uint64_t previous_round_start_ = 0;
  uint64_t latest_delivered_ = 0;  // the time of the youngest record handed on
  OrderingCounters counters_;
};

}  // namespace hpd
