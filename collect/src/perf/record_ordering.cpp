// The time-ordering stage of the perf backend (record_ordering.h).
#include "perf/record_ordering.h"

#include <algorithm>

namespace hpd {

void RecordOrdering::push(std::span<const uint8_t> bytes, PerfRecord record, const Deliver& deliver) {
  Entry e;
  e.record = std::move(record);
  e.ring_bytes = bytes.size();
  copy_bytes(e, bytes);
  queue(std::move(e), deliver);
}

void RecordOrdering::push_in_place(std::span<const uint8_t> bytes, PerfRecord record, size_t ring,
                                   uint64_t position, const Deliver& deliver) {
  if (held_.size() <= ring) held_.resize(ring + 1);
  Held& held = held_[ring];
  Entry e;
  e.record = std::move(record);
  e.ring_bytes = bytes.size();
  e.in_ring = bytes;
  e.ring = ring;
  e.held = held.first + held.records.size();
  held.records.emplace_back(position, false);
  queue(std::move(e), deliver);
}

void RecordOrdering::copy_bytes(Entry& e, std::span<const uint8_t> bytes) {
  if (!spare_.empty()) {
    e.bytes = std::move(spare_.back());
    spare_.pop_back();
    spare_bytes_ -= e.bytes.capacity();
  }
  e.bytes.assign(bytes.begin(), bytes.end());
  if (auto* s = std::get_if<SampleRecord>(&e.record); s != nullptr && !s->user_stack.empty()) {
    // The stack copy refers into `bytes`: point it into the copy.
    const auto offset = static_cast<size_t>(s->user_stack.data() - bytes.data());
    s->user_stack = std::span<const uint8_t>(e.bytes.data() + offset, s->user_stack.size());
  }
}

void RecordOrdering::queue(Entry e, const Deliver& deliver) {
  const Key key{record_time(e.record), seq_++, free_slots_.empty() ? slots_.size() : free_slots_.back()};
  if (key.time == 0) ++counters_.untimed;
  bytes_ += cost(e);
  if (key.slot == slots_.size()) {
    slots_.push_back(std::move(e));
  } else {
    free_slots_.pop_back();
    slots_[key.slot] = std::move(e);
  }
  queue_.push_back(key);
  if (bytes_ > max_bytes_) {
    // The oldest half goes now; the rest waits for its round.
    sort();
    const size_t count = std::max<size_t>(1, queue_.size() / 2);
    counters_.delivered_early += count;
    deliver_front(count, deliver);
  }
}

std::optional<uint64_t> RecordOrdering::held_from(size_t ring) const {
  if (ring >= held_.size() || held_[ring].records.empty()) return std::nullopt;
  return held_[ring].records.front().first;
}

uint64_t RecordOrdering::release_point(size_t ring, uint64_t read_end, uint64_t ring_size) {
  const std::optional<uint64_t> from = held_from(ring);
  if (!from) return read_end;
  if (read_end - *from <= ring_size / 2) return *from;
  for (const Key& key : queue_) {
    Entry& e = slots_[key.slot];
    if (e.held == kNotHeld || e.ring != ring) continue;
    copy_bytes(e, e.in_ring);
    bytes_ += e.bytes.size();
    e.in_ring = {};
    e.held = kNotHeld;
    ++counters_.copied_out;
  }
  Held& held = held_[ring];
  held.first += held.records.size();
  held.records.clear();
  return read_end;
}

void RecordOrdering::sort() {
  const auto before = [](const Key& a, const Key& b) {
    return a.time != b.time ? a.time < b.time : a.seq < b.seq;
  };
  const auto middle = queue_.begin() + static_cast<std::ptrdiff_t>(sorted_);
  std::sort(middle, queue_.end(), before);
  std::inplace_merge(queue_.begin(), middle, queue_.end(), before);
  sorted_ = queue_.size();
}

void RecordOrdering::deliver_front(size_t count, const Deliver& deliver) {
  for (size_t i = 0; i < count; ++i) {
    const uint64_t time = queue_[i].time;
    if (time != 0 && time < latest_delivered_) ++counters_.late;
    latest_delivered_ = std::max(latest_delivered_, time);
    ++counters_.delivered;
    Entry& e = slots_[queue_[i].slot];
    deliver(e.record, e.ring_bytes);
    bytes_ -= cost(e);
    free_slots_.push_back(queue_[i].slot);
    if (e.held != kNotHeld) {
      // Its ring may be freed past it once the records before it there are delivered too.
      Held& held = held_[e.ring];
      held.records[e.held - held.first].second = true;
      while (!held.records.empty() && held.records.front().second) {
        held.records.pop_front();
        ++held.first;
      }
      e.held = kNotHeld;
      e.in_ring = {};
      continue;
    }
    if (spare_bytes_ + e.bytes.capacity() <= max_bytes_ / 2) {
      spare_bytes_ += e.bytes.capacity();
      spare_.push_back(std::move(e.bytes));
    }
    e.bytes = {};
  }
  queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(count));
  sorted_ -= count;
}

void RecordOrdering::deliver_before(uint64_t time_ns, const Deliver& deliver) {
  sort();
  const auto end = std::partition_point(queue_.begin(), queue_.end(),
                                        [time_ns](const Key& k) { return k.time < time_ns; });
  deliver_front(static_cast<size_t>(end - queue_.begin()), deliver);
}

uint64_t RecordOrdering::end_round(uint64_t round_start_ns) {
  const uint64_t safe = previous_round_start_;
  previous_round_start_ = round_start_ns;
  return safe;
}

}  // namespace hpd
