// Tests for the ring-buffer reader on synthetic buffers laid out like a perf mmap.
#include "perf/ring_buffer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

namespace hpd {
namespace {

// A fake ring: header page + data area, with a writer that wraps like the kernel's.
class FakeRing {
 public:
  explicit FakeRing(size_t size) : header_(std::make_unique<perf_event_mmap_page>()), data_(size, 0xEE) {
    std::memset(header_.get(), 0, sizeof(perf_event_mmap_page));
  }
  // Writes a record of `size` bytes whose payload bytes are all `fill`.
  void write(uint32_t type, uint16_t size, uint8_t fill) {
    std::vector<uint8_t> record(size, fill);
    perf_event_header h{type, 0, size};
    std::memcpy(record.data(), &h, sizeof h);
    write_bytes(record);
  }
  void write_bytes(const std::vector<uint8_t>& bytes) {
    for (const uint8_t b : bytes) {
      data_[head_ % data_.size()] = b;
      ++head_;
    }
    header_->data_head = head_;
  }
  void set_tail(uint64_t tail) {
    header_->data_tail = tail;
    head_ = tail;
    header_->data_head = tail;
  }
  RingView view() { return RingView{header_.get(), data_.data(), data_.size()}; }
  perf_event_mmap_page* header() { return header_.get(); }

 private:
  std::unique_ptr<perf_event_mmap_page> header_;
  std::vector<uint8_t> data_;
  uint64_t head_ = 0;
};

struct Seen {
  uint32_t type;
  uint16_t size;
  bool payload_ok;
};

std::vector<Seen> drain(FakeRing& ring, std::vector<uint8_t>& scratch, DrainStats* stats = nullptr) {
  std::vector<Seen> seen;
  const DrainStats s = drain_ring(ring.view(), scratch, [&](std::span<const uint8_t> bytes) {
    perf_event_header h;
    std::memcpy(&h, bytes.data(), sizeof h);
    bool ok = bytes.size() == h.size;
    const uint8_t fill = bytes.size() > sizeof h ? bytes[sizeof h] : 0;
    for (size_t i = sizeof h; i < bytes.size(); ++i) ok = ok && bytes[i] == fill;
    seen.push_back({h.type, h.size, ok});
  });
  if (stats != nullptr) *stats = s;
  return seen;
}

TEST(RingBuffer, ReadsRecordsAndAdvancesTail) {
  FakeRing ring(256);
  ring.write(PERF_RECORD_SAMPLE, 32, 0x11);
  ring.write(PERF_RECORD_COMM, 24, 0x22);
  std::vector<uint8_t> scratch;
  DrainStats stats;
  const auto seen = drain(ring, scratch, &stats);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].type, uint32_t{PERF_RECORD_SAMPLE});
  EXPECT_EQ(seen[0].size, 32);
  EXPECT_EQ(seen[1].type, uint32_t{PERF_RECORD_COMM});
  EXPECT_TRUE(seen[0].payload_ok && seen[1].payload_ok);
  EXPECT_EQ(stats.records, 2u);
  EXPECT_EQ(stats.bytes, 56u);
  EXPECT_FALSE(stats.corrupt);
  EXPECT_EQ(ring.header()->data_tail, 56u);
  EXPECT_TRUE(drain(ring, scratch).empty());
}

TEST(RingBuffer, CopiesRecordThatWrapsAroundTheEnd) {
  FakeRing ring(128);
  ring.set_tail(96);                         // 32 bytes before the end
  ring.write(PERF_RECORD_SAMPLE, 48, 0x5A);  // 32 bytes at the end, 16 at the start
  ring.write(PERF_RECORD_MMAP2, 40, 0x6B);
  std::vector<uint8_t> scratch;
  const auto seen = drain(ring, scratch);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].size, 48);
  EXPECT_TRUE(seen[0].payload_ok);
  EXPECT_EQ(seen[1].type, uint32_t{PERF_RECORD_MMAP2});
  EXPECT_TRUE(seen[1].payload_ok);
  EXPECT_EQ(ring.header()->data_tail, 96u + 88u);
  EXPECT_GE(scratch.size(), 48u);  // the wrapped record went through the scratch buffer
}

TEST(RingBuffer, ReadLeavesTheSpaceTakenUntilItIsReleased) {
  FakeRing ring(128);
  ring.set_tail(40);
  ring.write(PERF_RECORD_SAMPLE, 32, 0x11);
  ring.write(PERF_RECORD_COMM, 24, 0x22);
  std::vector<uint8_t> scratch;
  DrainStats stats;
  std::vector<RingRecord> seen;
  const auto collect = [&](const RingRecord& r) { seen.push_back(r); };
  uint64_t end = read_ring(ring.view(), 40, scratch, stats, collect);
  EXPECT_EQ(end, 96u);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].position, 40u);
  EXPECT_EQ(seen[1].position, 72u);
  EXPECT_TRUE(seen[0].in_ring && seen[1].in_ring);
  EXPECT_EQ(seen[0].bytes.data(), ring.view().data + 40) << "the ring's own bytes, not a copy";
  EXPECT_EQ(ring.header()->data_tail, 40u) << "nothing freed by reading";
  // The next read starts where this one ended; a record split across the end comes as a copy.
  ring.write(PERF_RECORD_SAMPLE, 48, 0x33);  // 32 bytes at the end, 16 at the start
  seen.clear();
  end = read_ring(ring.view(), end, scratch, stats, collect);
  EXPECT_EQ(end, 144u);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].position, 96u);
  EXPECT_FALSE(seen[0].in_ring);
  EXPECT_EQ(seen[0].bytes.data(), scratch.data());
  EXPECT_EQ(stats.records, 3u);
  EXPECT_EQ(ring.header()->data_tail, 40u);
  release_ring(ring.view(), 72);
  EXPECT_EQ(ring.header()->data_tail, 72u);
}

TEST(RingBuffer, HeaderSplitAcrossTheEnd) {
  FakeRing ring(64);
  ring.set_tail(60);  // the 8-byte header itself wraps (not produced by the kernel, still handled)
  ring.write(PERF_RECORD_LOST, 24, 0x33);
  std::vector<uint8_t> scratch;
  const auto seen = drain(ring, scratch);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].type, uint32_t{PERF_RECORD_LOST});
  EXPECT_TRUE(seen[0].payload_ok);
}

TEST(RingBuffer, CorruptHeaderSkipsToHead) {
  FakeRing ring(128);
  ring.write(PERF_RECORD_SAMPLE, 16, 0x01);
  ring.write_bytes({1, 0, 0, 0, 0, 0, 4, 0});  // size 4 < header size
  ring.write(PERF_RECORD_SAMPLE, 16, 0x02);
  std::vector<uint8_t> scratch;
  DrainStats stats;
  const auto seen = drain(ring, scratch, &stats);
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_TRUE(stats.corrupt);
  EXPECT_EQ(ring.header()->data_tail, ring.header()->data_head);
}

TEST(RingBuffer, RecordLargerThanAvailableIsCorrupt) {
  FakeRing ring(128);
  ring.write_bytes({9, 0, 0, 0, 0, 0, 64, 0});  // claims 64 bytes, only 8 written
  std::vector<uint8_t> scratch;
  DrainStats stats;
  EXPECT_TRUE(drain(ring, scratch, &stats).empty());
  EXPECT_TRUE(stats.corrupt);
}

TEST(RingBuffer, InvalidViewIsIgnored) {
  std::vector<uint8_t> scratch;
  int calls = 0;
  const DrainStats stats = drain_ring(RingView{}, scratch, [&](std::span<const uint8_t>) { ++calls; });
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(stats.records, 0u);
}

TEST(RingBuffer, OwningMapIsMovable) {
  static_assert(!std::is_copy_constructible_v<PerfRingBuffer>);
  static_assert(std::is_move_constructible_v<PerfRingBuffer>);
  PerfRingBuffer empty;
  EXPECT_FALSE(empty.mapped());
  EXPECT_EQ(empty.view().header, nullptr);
  EXPECT_THROW(PerfRingBuffer::map(-1, 3), std::system_error);  // not a power of two
  EXPECT_THROW(PerfRingBuffer::map(-1, 4), std::system_error);  // bad fd
}

}  // namespace
}  // namespace hpd
