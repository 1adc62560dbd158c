// The time-ordering stage of the perf backend (record_ordering.h).
#include "perf/record_ordering.h"

#include <algorithm>

namespace hpd {

void RecordOrdering::push(std::span<const uint8_t> bytes, PerfRecord record, const Deliver& deliver) {
  Entry e;
  e.time = record_time(record);
  e.seq = seq_++;
  e.ring_bytes = bytes.size();
  if (!spare_.empty()) {
    e.bytes = std::move(spare_.back());
    spare_.pop_back();
    spare_bytes_ -= e.bytes.capacity();
  }
  e.bytes.assign(bytes.begin(), bytes.end());
  if (auto* s = std::get_if<SampleRecord>(&record); s != nullptr && !s->user_stack.empty()) {
    // The stack copy refers into the ring: point it into the copy.
    const auto offset = static_cast<size_t>(s->user_stack.data() - bytes.data());
    s->user_stack = std::span<const uint8_t>(e.bytes.data() + offset, s->user_stack.size());
  }
  e.record = std::move(record);
  if (e.time == 0) ++counters_.untimed;
  bytes_ += cost(e);
  queue_.push_back(std::move(e));
  if (bytes_ > max_bytes_) {
    // The oldest half goes now; the rest waits for its round.
    sort();
    const size_t count = std::max<size_t>(1, queue_.size() / 2);
    counters_.delivered_early += count;
    deliver_front(count, deliver);
  }
}

void RecordOrdering::sort() {
  const auto before = [](const Entry& a, const Entry& b) {
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
    deliver(queue_[i].record, queue_[i].ring_bytes);
    bytes_ -= cost(queue_[i]);
    std::vector<uint8_t>& buffer = queue_[i].bytes;
    if (spare_bytes_ + buffer.capacity() <= max_bytes_ / 2) {
      spare_bytes_ += buffer.capacity();
      spare_.push_back(std::move(buffer));
    }
  }
  queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(count));
  sorted_ -= count;
}

void RecordOrdering::deliver_before(uint64_t time_ns, const Deliver& deliver) {
  sort();
  const auto end = std::partition_point(queue_.begin(), queue_.end(),
                                        [time_ns](const Entry& e) { return e.time < time_ns; });
  deliver_front(static_cast<size_t>(end - queue_.begin()), deliver);
}

uint64_t RecordOrdering::end_round(uint64_t round_start_ns) {
  const uint64_t safe = previous_round_start_;
  previous_round_start_ = round_start_ns;
  return safe;
}

}  // namespace hpd
