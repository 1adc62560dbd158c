// The perf backend's time-ordering stage (perf/record_ordering.h): records of several rings read one
// ring after another come out in time order, held back one round; records held in their ring and
// copied out of a ring more than half held; its memory bound; and a child whose
// fork and mmap are on one CPU's ring and first sample on another's, through the one builder.
#include "perf/record_ordering.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "builder_feeds.h"

namespace hpd {
namespace {

SampleRecord sample_at(uint64_t time, int32_t pid = 10, uint64_t ip = 0x401000) {
  SampleRecord s;
  s.pid = s.tid = pid;
  s.time = time;
  s.period = 1'000'000;
  s.ip = ip;
  s.callchain = {static_cast<uint64_t>(PERF_CONTEXT_USER), ip};
  s.id = 1;
  return s;
}

// Collects what the stage delivers: each record's time and ring size.
struct Delivered {
  std::vector<uint64_t> times;
  std::vector<size_t> sizes;
  RecordOrdering::Deliver sink() {
    return [this](const PerfRecord& r, size_t bytes) {
      times.push_back(record_time(r));
      sizes.push_back(bytes);
    };
  }
};

// A stage with room for everything, and what it delivered.
struct RecordOrderingTest : ::testing::Test {
  RecordOrdering ordering{size_t{1} << 30};
  Delivered out;
  RecordOrdering::Deliver deliver = out.sink();
};

// An executable mapping's record, written at `time`.
Mmap2Record exec_mapping(int32_t pid, uint64_t address, const std::string& file, uint64_t time) {
  Mmap2Record m;
  m.pid = m.tid = pid;
  m.address = address;
  m.length = 0x10000;
  m.prot = PROT_READ | PROT_EXEC;
  m.filename = file;
  m.sample_id = SampleId{pid, pid, time, 1, 0, true};
  return m;
}

// Pushes a sample of time `time` as a ring record of `size` bytes.
void push(RecordOrdering& ordering, uint64_t time, const RecordOrdering::Deliver& deliver, size_t size = 64) {
  const std::vector<uint8_t> bytes(size, 0);
  ordering.push(bytes, sample_at(time), deliver);
}

TEST_F(RecordOrderingTest, RingsReadOneAfterAnotherComeOutInTimeOrder) {
  // Round 1 (began at 100): ring A, then ring B.
  for (const uint64_t t : {10, 50, 90}) push(ordering, t, deliver);
  for (const uint64_t t : {20, 60}) push(ordering, t, deliver);
  ordering.deliver_before(ordering.end_round(100), deliver);
  EXPECT_TRUE(out.times.empty()) << "the first round makes nothing safe: a ring may still be writing";
  // Round 2 (began at 200): ring B's 95 was published after ring B was read in round 1.
  for (const uint64_t t : {120, 180}) push(ordering, t, deliver);
  for (const uint64_t t : {95, 150}) push(ordering, t, deliver);
  ordering.deliver_before(ordering.end_round(200), deliver);
  EXPECT_EQ(out.times, (std::vector<uint64_t>{10, 20, 50, 60, 90, 95}));
  EXPECT_EQ(ordering.queued(), 3u);  // 120, 180, 150: not older than round 1's start
  // Round 3 (began at 300), ring A empty.
  push(ordering, 210, deliver);
  ordering.deliver_before(ordering.end_round(300), deliver);
  EXPECT_EQ(out.times, (std::vector<uint64_t>{10, 20, 50, 60, 90, 95, 120, 150, 180}));
  ordering.flush(deliver);
  EXPECT_EQ(out.times, (std::vector<uint64_t>{10, 20, 50, 60, 90, 95, 120, 150, 180, 210}));
  EXPECT_EQ(ordering.queued(), 0u);
  EXPECT_EQ(ordering.queued_bytes(), 0u);
  EXPECT_EQ(ordering.counters().delivered, 10u);
  EXPECT_EQ(ordering.counters().delivered_early, 0u);
  EXPECT_EQ(ordering.counters().late, 0u);
  EXPECT_EQ(ordering.counters().untimed, 0u);
}

TEST_F(RecordOrderingTest, RecordsOfOneTimeKeepTheirOrderOfArrival) {
  push(ordering, 30, deliver, 8);
  push(ordering, 30, deliver, 16);
  push(ordering, 20, deliver, 24);
  push(ordering, 30, deliver, 32);
  ordering.flush(deliver);
  EXPECT_EQ(out.times, (std::vector<uint64_t>{20, 30, 30, 30}));
  EXPECT_EQ(out.sizes, (std::vector<size_t>{24, 8, 16, 32}));
}

TEST(RecordOrdering, TheStackCopyOutlivesTheRing) {
  RecordOrdering ordering(size_t{1} << 30);
  std::vector<uint8_t> ring(128);
  for (size_t i = 0; i < ring.size(); ++i) ring[i] = static_cast<uint8_t>(i);
  SampleRecord s = sample_at(5);
  s.stack_size = 64;
  s.user_stack = std::span<const uint8_t>(ring).subspan(40, 64);
  std::vector<uint8_t> seen;
  size_t seen_bytes = 0;
  const RecordOrdering::Deliver deliver = [&](const PerfRecord& r, size_t bytes) {
    const auto& stack = std::get<SampleRecord>(r).user_stack;
    seen.assign(stack.begin(), stack.end());
    seen_bytes = bytes;
  };
  ordering.push(ring, s, deliver);
  std::fill(ring.begin(), ring.end(), 0xee);  // the kernel reuses the space once the tail moves on
  ordering.flush(deliver);
  ASSERT_EQ(seen.size(), 64u);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 40 + i) << i;
  EXPECT_EQ(seen_bytes, 128u);
  // The next records reuse the delivered one's buffer: each keeps its own bytes.
  std::vector<uint8_t> ring2(96, 0x11);
  SampleRecord s2 = sample_at(6);
  s2.stack_size = 32;
  s2.user_stack = std::span<const uint8_t>(ring2).subspan(8, 32);
  ordering.push(ring2, s2, [](const PerfRecord&, size_t) {});
  std::fill(ring.begin(), ring.end(), 0x22);
  s.user_stack = std::span<const uint8_t>(ring).subspan(0, 64);
  ordering.push(ring, s, [](const PerfRecord&, size_t) {});
  std::vector<std::vector<uint8_t>> stacks;
  ordering.flush([&](const PerfRecord& r, size_t) {
    const auto& stack = std::get<SampleRecord>(r).user_stack;
    stacks.emplace_back(stack.begin(), stack.end());
  });
  ASSERT_EQ(stacks.size(), 2u);
  EXPECT_EQ(stacks[0], std::vector<uint8_t>(64, 0x22)) << "time 5 first";
  EXPECT_EQ(stacks[1], std::vector<uint8_t>(32, 0x11));
}

// A sample record of `size` bytes at `position` of `ring`, its stack copy the 32 bytes after its first 16.
SampleRecord sample_in(const std::vector<uint8_t>& ring, uint64_t position, uint64_t time) {
  SampleRecord s = sample_at(time);
  s.stack_size = 32;
  s.user_stack = std::span<const uint8_t>(ring).subspan(position + 16, 32);
  return s;
}

std::span<const uint8_t> record_bytes(const std::vector<uint8_t>& ring, uint64_t position, size_t size = 64) {
  return std::span<const uint8_t>(ring).subspan(position, size);
}

TEST(RecordOrdering, RecordsHeldInPlaceKeepTheirRingTakenUntilDelivered) {
  RecordOrdering ordering(size_t{1} << 30);
  std::vector<uint8_t> ring(512);
  for (size_t i = 0; i < ring.size(); ++i) ring[i] = static_cast<uint8_t>(i);
  std::vector<uint64_t> times;
  std::vector<const uint8_t*> stacks;
  const RecordOrdering::Deliver deliver = [&](const PerfRecord& r, size_t bytes) {
    EXPECT_EQ(bytes, 64u);
    times.push_back(record_time(r));
    stacks.push_back(std::get<SampleRecord>(r).user_stack.data());
  };
  // Ring 0: the record at 128 was written from an interrupt, older than the one before it.
  for (const auto& [position, time] : {std::pair<uint64_t, uint64_t>{0, 10}, {64, 30}, {128, 20}})
    ordering.push_in_place(record_bytes(ring, position), sample_in(ring, position, time), 0, position,
                           deliver);
  ordering.push_in_place(record_bytes(ring, 256), sample_in(ring, 256, 15), 1, 1000, deliver);
  EXPECT_EQ(ordering.held_from(0), std::optional<uint64_t>(0));
  EXPECT_EQ(ordering.held_from(1), std::optional<uint64_t>(1000));
  EXPECT_EQ(ordering.held_from(2), std::nullopt);

  ordering.deliver_before(16, deliver);
  EXPECT_EQ(times, (std::vector<uint64_t>{10, 15}));
  EXPECT_EQ(stacks[0], ring.data() + 16) << "read where the ring holds it, not copied";
  EXPECT_EQ(ordering.held_from(0), std::optional<uint64_t>(64));
  EXPECT_EQ(ordering.held_from(1), std::nullopt);
  ordering.deliver_before(25, deliver);
  EXPECT_EQ(times, (std::vector<uint64_t>{10, 15, 20}));
  EXPECT_EQ(ordering.held_from(0), std::optional<uint64_t>(64)) << "64 (time 30) is not delivered yet";
  EXPECT_EQ(ordering.release_point(0, 192, 1024), 64u);
  EXPECT_EQ(ordering.release_point(1, 1064, 1024), 1064u) << "ring 1 holds nothing";
  ordering.flush(deliver);
  EXPECT_EQ(times, (std::vector<uint64_t>{10, 15, 20, 30}));
  EXPECT_EQ(ordering.held_from(0), std::nullopt);
  EXPECT_EQ(ordering.release_point(0, 192, 1024), 192u);
  EXPECT_EQ(ordering.counters().copied_out, 0u);
  EXPECT_EQ(ordering.queued_bytes(), 0u);
}

TEST(RecordOrdering, ARingMoreThanHalfHeldHasItsRecordsCopiedOut) {
  RecordOrdering ordering(size_t{1} << 30);
  std::vector<uint8_t> ring(256);
  for (size_t i = 0; i < ring.size(); ++i) ring[i] = static_cast<uint8_t>(i);
  std::vector<std::vector<uint8_t>> stacks;
  const RecordOrdering::Deliver deliver = [&](const PerfRecord& r, size_t) {
    const auto& stack = std::get<SampleRecord>(r).user_stack;
    stacks.emplace_back(stack.begin(), stack.end());
  };
  ordering.push_in_place(record_bytes(ring, 0), sample_in(ring, 0, 10), 0, 0, deliver);
  ordering.push_in_place(record_bytes(ring, 64), sample_in(ring, 64, 20), 0, 64, deliver);
  const size_t in_place = ordering.queued_bytes();
  EXPECT_EQ(ordering.release_point(0, 128, ring.size()), 0u) << "half the ring held: kept in place";
  EXPECT_EQ(ordering.counters().copied_out, 0u);
  ordering.push_in_place(record_bytes(ring, 128), sample_in(ring, 128, 30), 0, 128, deliver);
  EXPECT_EQ(ordering.release_point(0, 192, ring.size()), 192u) << "more than half: copied out, all freed";
  EXPECT_EQ(ordering.counters().copied_out, 3u);
  EXPECT_EQ(ordering.held_from(0), std::nullopt);
  EXPECT_EQ(ordering.queued_bytes(), in_place * 3 / 2 + 3 * 64) << "the copies are the stage's memory now";
  // Held again after the copy: the ring's bookkeeping goes on.
  ordering.push_in_place(record_bytes(ring, 192), sample_in(ring, 192, 40), 0, 192, deliver);
  EXPECT_EQ(ordering.held_from(0), std::optional<uint64_t>(192));
  std::fill(ring.begin(), ring.begin() + 192, 0xee);  // the kernel writes into the freed space
  ordering.flush(deliver);
  ASSERT_EQ(stacks.size(), 4u);
  for (size_t r = 0; r < stacks.size(); ++r) {
    ASSERT_EQ(stacks[r].size(), 32u);
    for (size_t i = 0; i < 32; ++i)
      EXPECT_EQ(stacks[r][i], static_cast<uint8_t>(r * 64 + 16 + i)) << r << " " << i;
  }
  EXPECT_EQ(ordering.held_from(0), std::nullopt);
  EXPECT_EQ(ordering.queued_bytes(), 0u);
}

TEST(RecordOrdering, AtItsBoundTheOldestHalfGoesEarlyAndLaterOlderRecordsAreLate) {
  // The cost of one queued record of 64 bytes, as the stage counts it.
  size_t one = 0;
  {
    RecordOrdering probe(size_t{1} << 30);
    push(probe, 1, {});
    one = probe.queued_bytes();
    ASSERT_GT(one, 64u);
  }
  RecordOrdering ordering(4 * one + one / 2);  // four fit, the fifth is over the bound
  Delivered out;
  const auto deliver = out.sink();
  for (const uint64_t t : {50, 10, 40, 20}) push(ordering, t, deliver);
  EXPECT_TRUE(out.times.empty());
  EXPECT_EQ(ordering.queued_bytes(), 4 * one);
  push(ordering, 30, deliver);
  EXPECT_EQ(out.times, (std::vector<uint64_t>{10, 20}));
  EXPECT_EQ(ordering.counters().delivered_early, 2u);
  EXPECT_EQ(ordering.queued(), 3u);
  EXPECT_LE(ordering.queued_bytes(), 4 * one + one / 2);
  // Older than what went early: still delivered, with the next ones, and counted.
  push(ordering, 15, deliver);
  push(ordering, 25, deliver);  // over the bound again: 15 and 25 go
  EXPECT_EQ(ordering.counters().late, 1u) << "15 after 20; 25 is younger than everything delivered";
  EXPECT_EQ(ordering.counters().delivered_early, 4u);
  ordering.flush(deliver);
  EXPECT_EQ(out.times, (std::vector<uint64_t>{10, 20, 15, 25, 30, 40, 50}));
  EXPECT_EQ(ordering.queued_bytes(), 0u);
  EXPECT_EQ(ordering.counters().delivered, 7u);
  EXPECT_EQ(ordering.counters().late, 1u);
}

TEST_F(RecordOrderingTest, RecordsWithoutATimeAreCountedAndGoFirst) {
  push(ordering, 7, deliver);
  const std::vector<uint8_t> bytes(16, 0);
  ordering.push(bytes, CommRecord{1, 1, "x", false, {}}, deliver);  // sample_id absent
  ordering.flush(deliver);
  EXPECT_EQ(out.times, (std::vector<uint64_t>{0, 7}));
  EXPECT_EQ(ordering.counters().untimed, 1u);
}

// A process forks a child (CPU 0), the child maps a library (CPU 0) and is sampled in it on CPU 1,
// whose ring is read first. In time order the child is born by its fork with its parent's mappings and
// the library; read ring by ring, its sample would make it a process of unknown origin without maps.
TEST(RecordOrdering, AChildsFirstSampleOnAnotherCpuComesAfterItsForkAndMmap) {
  RawProfile profile;
  int described = 0;
  PerfFeed feed(
      profile, {false, 127}, {}, [&](RawProcess&) { ++described; }, 1);
  RecordOrdering ordering(size_t{1} << 30);
  const RecordOrdering::Deliver deliver = [&](const PerfRecord& r, size_t) { feed.on_record(r); };
  const std::vector<uint8_t> bytes(64, 0);
  // The parent, there when the recording began.
  feed.builder().processes().add_initial_process(20, {});
  profile.process(20).name = "server";

  ordering.push(bytes, exec_mapping(20, 0x400000, "/usr/bin/server", 5), deliver);
  ordering.deliver_before(ordering.end_round(8), deliver);

  // Round 2: CPU 1's ring, then CPU 0's.
  ordering.push(bytes, sample_at(12, 30, 0x7f0000001000), deliver);
  ordering.push(bytes, TaskRecord{true, 30, 20, 30, 20, 10, SampleId{30, 30, 10, 1, 0, true}}, deliver);
  ordering.push(bytes, exec_mapping(30, 0x7f0000000000, "/usr/lib/libwork.so", 11), deliver);
  ordering.deliver_before(ordering.end_round(20), deliver);
  ordering.deliver_before(ordering.end_round(30), deliver);
  ordering.flush(deliver);

  const RawProcess* child = profile.find_process(30);
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(child->start_ns, 10u) << "born by its fork";
  EXPECT_EQ(child->name, "server") << "its parent's, copied at the fork";
  ASSERT_EQ(child->mappings.size(), 2u);
  EXPECT_NE(child->find_mapping(0x7f0000001000, 12), nullptr);
  EXPECT_EQ(feed.builder().processes().processes_without_maps(), 0u);
  EXPECT_EQ(described, 0) << "a forked child is its parent's copy, not read from /proc";
  ASSERT_EQ(profile.samples.size(), 1u);
  EXPECT_EQ(ordering.counters().late, 0u);
}

}  // namespace
}  // namespace hpd
