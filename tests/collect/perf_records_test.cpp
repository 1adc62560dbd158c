// Tests for perf record decoding and callchain splitting on synthetic bytes.
#include "perf/perf_records.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <optional>
#include <string>
#include <variant>

#include "perf_record_bytes.h"

namespace hpd {
namespace {

constexpr uint64_t kSampleType = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ID |
                                 PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD | PERF_SAMPLE_READ |
                                 PERF_SAMPLE_CALLCHAIN;
const RecordLayout kLayout{kSampleType, 0, true};

TEST(PerfRecords, DecodesSample) {
  const uint64_t kUser = static_cast<uint64_t>(PERF_CONTEXT_USER);
  const auto bytes = PerfRecordBytes(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER)
                         .u64(0x401000)  // ip
                         .u32(100)
                         .u32(101)        // pid, tid
                         .u64(5'000'000)  // time
                         .u64(77)         // id
                         .u32(3)
                         .u32(0)            // cpu, res
                         .u64(1'001'000)    // period
                         .u64(123'456'789)  // read value
                         .u64(3)
                         .u64(kUser)
                         .u64(0x401000)
                         .u64(0x401234)  // callchain
                         .done();
  const auto record = decode_record(bytes, kLayout);
  ASSERT_TRUE(record);
  const auto* s = std::get_if<SampleRecord>(&*record);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->ip, 0x401000u);
  EXPECT_EQ(s->pid, 100);
  EXPECT_EQ(s->tid, 101);
  EXPECT_EQ(s->time, 5'000'000u);
  EXPECT_EQ(s->id, 77u);
  EXPECT_EQ(s->cpu, 3u);
  EXPECT_EQ(s->period, 1'001'000u);
  ASSERT_TRUE(s->read_value);
  EXPECT_EQ(*s->read_value, 123'456'789u);
  ASSERT_EQ(s->callchain.size(), 3u);
  EXPECT_EQ(s->callchain[2], 0x401234u);
}

TEST(PerfRecords, TruncatedSampleIsRejected) {
  auto bytes = PerfRecordBytes(PERF_RECORD_SAMPLE, 0)
                   .u64(1)
                   .u32(1)
                   .u32(1)
                   .u64(1)
                   .u64(1)
                   .u32(0)
                   .u32(0)
                   .u64(1)
                   .u64(1)
                   .u64(50)  // claims 50 callchain entries but has none
                   .done();
  EXPECT_FALSE(decode_record(bytes, kLayout));
  // A header claiming more bytes than given.
  std::vector<uint8_t> short_bytes = bytes;
  short_bytes.resize(16);
  EXPECT_FALSE(decode_record(short_bytes, kLayout));
  EXPECT_FALSE(decode_record(std::vector<uint8_t>{1, 2, 3}, kLayout));
}

TEST(PerfRecords, DecodesMmap2WithBuildId) {
  uint8_t id_block[24] = {};
  id_block[0] = 20;
  for (int i = 0; i < 20; ++i) id_block[4 + i] = static_cast<uint8_t>(0xa0 + i);
  const auto bytes =
      PerfRecordBytes(PERF_RECORD_MMAP2, PERF_RECORD_MISC_USER | PERF_RECORD_MISC_MMAP_BUILD_ID)
          .u32(200)
          .u32(201)
          .u64(0x7f0000001000)
          .u64(0x5000)
          .u64(0x1000)
          .raw(id_block, sizeof id_block)
          .u32(PROT_READ | PROT_EXEC)
          .u32(MAP_PRIVATE)
          .str("/usr/lib/x86_64-linux-gnu/libm.so.6")
          .trailer(200, 201, 9'000, 5, 1)
          .done();
  RecordLayout asked = kLayout;
  asked.build_ids = true;
  const auto record = decode_record(bytes, asked);
  ASSERT_TRUE(record);
  const auto* m = std::get_if<Mmap2Record>(&*record);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->pid, 200);
  EXPECT_EQ(m->address, 0x7f0000001000u);
  EXPECT_EQ(m->length, 0x5000u);
  EXPECT_EQ(m->page_offset, 0x1000u);
  EXPECT_EQ(m->build_id, "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3");
  EXPECT_EQ(m->prot, uint32_t{PROT_READ | PROT_EXEC});
  EXPECT_EQ(m->filename, "/usr/lib/x86_64-linux-gnu/libm.so.6");
  EXPECT_TRUE(m->sample_id.present);
  EXPECT_EQ(m->sample_id.time, 9'000u);
  EXPECT_EQ(m->sample_id.cpu, 1u);
}

// An MMAP2 record of one page at 0x1000 for pid/tid 1, its 24-byte block (build-id, or device and
// inode) and its flags as given, decoded with kLayout (no build-ids asked for); null when it is not one.
std::optional<Mmap2Record> decoded_mmap2(uint16_t misc, const uint8_t (&block)[24], uint32_t flags,
                                         const std::string& filename) {
  const auto bytes = PerfRecordBytes(PERF_RECORD_MMAP2, misc)
                         .u32(1)
                         .u32(1)
                         .u64(0x1000)
                         .u64(0x1000)
                         .u64(0)
                         .raw(block, sizeof block)
                         .u32(PROT_EXEC)
                         .u32(flags)
                         .str(filename)
                         .trailer(1, 1, 1, 0, 0)
                         .done();
  const auto record = decode_record(bytes, kLayout);
  if (!record || !std::holds_alternative<Mmap2Record>(*record)) return std::nullopt;
  return std::get<Mmap2Record>(*record);
}

// Events that did not ask for build-ids get the flag too when another session's event did (the
// kernel sets it on the record it shares between them); the block then holds device and inode.
TEST(PerfRecords, Mmap2BuildIdFlagIsIgnoredWhenNotAsked) {
  const uint8_t inode_block[24] = {8, 0, 0, 0, 1, 0, 0, 0, 0x2a};
  const auto m = decoded_mmap2(PERF_RECORD_MISC_USER | PERF_RECORD_MISC_MMAP_BUILD_ID, inode_block,
                               MAP_PRIVATE, "/bin/x");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->build_id, "");
  EXPECT_EQ(m->filename, "/bin/x");
}

TEST(PerfRecords, Mmap2WithoutBuildIdFlagHasNone) {
  const uint8_t inode_block[24] = {8, 0, 0, 0, 1};
  const auto m = decoded_mmap2(PERF_RECORD_MISC_USER, inode_block, 0, "//anon");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->build_id, "");
  EXPECT_EQ(m->filename, "//anon");
}

// attr.context_switch: a switch-in, a switch-out that blocked, one that left the task runnable.
TEST(PerfRecords, DecodesContextSwitches) {
  const auto in =
      decode_record(PerfRecordBytes(PERF_RECORD_SWITCH, 0).trailer(300, 301, 10, 1, 0).done(), kLayout);
  const auto out = decode_record(
      PerfRecordBytes(PERF_RECORD_SWITCH, PERF_RECORD_MISC_SWITCH_OUT).trailer(300, 301, 20, 1, 1).done(),
      kLayout);
  const auto preempted = decode_record(
      PerfRecordBytes(PERF_RECORD_SWITCH, PERF_RECORD_MISC_SWITCH_OUT | PERF_RECORD_MISC_SWITCH_OUT_PREEMPT)
          .trailer(300, 301, 30, 1, 1)
          .done(),
      kLayout);
  ASSERT_TRUE(in && out && preempted);
  const auto* i = std::get_if<SwitchRecord>(&*in);
  const auto* o = std::get_if<SwitchRecord>(&*out);
  const auto* p = std::get_if<SwitchRecord>(&*preempted);
  ASSERT_TRUE(i != nullptr && o != nullptr && p != nullptr);
  EXPECT_FALSE(i->out);
  EXPECT_FALSE(i->preempt);
  EXPECT_EQ(i->sample_id.tid, 301);
  EXPECT_EQ(i->sample_id.time, 10u);
  EXPECT_TRUE(o->out);
  EXPECT_FALSE(o->preempt);
  EXPECT_EQ(o->sample_id.cpu, 1u);
  EXPECT_TRUE(p->out);
  EXPECT_TRUE(p->preempt);
}

TEST(PerfRecords, DecodesCommForkExitLostThrottle) {
  const auto comm = decode_record(PerfRecordBytes(PERF_RECORD_COMM, PERF_RECORD_MISC_COMM_EXEC)
                                      .u32(300)
                                      .u32(300)
                                      .str("spinner")
                                      .trailer(300, 300, 10, 1, 0)
                                      .done(),
                                  kLayout);
  ASSERT_TRUE(comm);
  const auto* c = std::get_if<CommRecord>(&*comm);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->comm, "spinner");
  EXPECT_TRUE(c->exec);
  EXPECT_EQ(c->sample_id.time, 10u);

  const auto fork = decode_record(PerfRecordBytes(PERF_RECORD_FORK, 0)
                                      .u32(300)
                                      .u32(300)
                                      .u32(305)
                                      .u32(300)
                                      .u64(20)
                                      .trailer(300, 305, 20, 1, 0)
                                      .done(),
                                  kLayout);
  ASSERT_TRUE(fork);
  const auto* f = std::get_if<TaskRecord>(&*fork);
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->fork);
  EXPECT_EQ(f->pid, 300);
  EXPECT_EQ(f->tid, 305);
  EXPECT_EQ(f->ptid, 300);
  EXPECT_EQ(f->time, 20u);

  const auto exit = decode_record(PerfRecordBytes(PERF_RECORD_EXIT, 0)
                                      .u32(300)
                                      .u32(300)
                                      .u32(305)
                                      .u32(305)
                                      .u64(30)
                                      .trailer(300, 305, 30, 1, 0)
                                      .done(),
                                  kLayout);
  ASSERT_TRUE(exit);
  const auto* x = std::get_if<TaskRecord>(&*exit);
  ASSERT_NE(x, nullptr);
  EXPECT_FALSE(x->fork);
  EXPECT_EQ(x->time, 30u);

  const auto lost = decode_record(
      PerfRecordBytes(PERF_RECORD_LOST, 0).u64(9).u64(17).trailer(0, 0, 40, 9, 2).done(), kLayout);
  ASSERT_TRUE(lost);
  ASSERT_NE(std::get_if<LostRecord>(&*lost), nullptr);
  EXPECT_EQ(std::get<LostRecord>(*lost).lost, 17u);

  const auto throttle = decode_record(
      PerfRecordBytes(PERF_RECORD_THROTTLE, 0).u64(50).u64(9).u64(9).trailer(0, 0, 50, 9, 2).done(), kLayout);
  ASSERT_TRUE(throttle);
  ASSERT_NE(std::get_if<ThrottleRecord>(&*throttle), nullptr);
  EXPECT_FALSE(std::get<ThrottleRecord>(*throttle).unthrottle);

  const auto other =
      decode_record(PerfRecordBytes(PERF_RECORD_KSYMBOL, 0).u64(0).trailer(0, 0, 0, 0, 0).done(), kLayout);
  ASSERT_TRUE(other);
  ASSERT_NE(std::get_if<OtherRecord>(&*other), nullptr);
  EXPECT_EQ(std::get<OtherRecord>(*other).type, uint32_t{PERF_RECORD_KSYMBOL});
}

// PERF_RECORD_READ (attr.inherit_stat): an inherited event's final count at its task's exit; the
// trailer's id is the event it was inherited from. One cut short of its value is rejected.
TEST(PerfRecords, DecodesReadRecords) {
  const auto read = decode_record(PerfRecordBytes(PERF_RECORD_READ, 0)
                                      .u32(300)
                                      .u32(305)
                                      .u64(1'234'567)
                                      .trailer(300, 305, 60, 9, 1)
                                      .done(),
                                  kLayout);
  ASSERT_TRUE(read);
  const auto* r = std::get_if<ReadRecord>(&*read);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->pid, 300);
  EXPECT_EQ(r->tid, 305);
  EXPECT_EQ(r->value, 1'234'567u);
  EXPECT_EQ(r->sample_id.id, 9u);
  EXPECT_EQ(r->sample_id.time, 60u);
  EXPECT_FALSE(decode_record(
      PerfRecordBytes(PERF_RECORD_READ, 0).u32(300).u32(305).trailer(300, 305, 60, 9, 1).done(), kLayout));
}

TEST(PerfRecords, CommWithoutTrailerRoomIsRejected) {
  // Shorter than header + sample_id trailer.
  EXPECT_FALSE(decode_record(PerfRecordBytes(PERF_RECORD_COMM, 0).u32(1).done(), kLayout));
}

TEST(PerfRecords, SampleWithoutReadInLayout) {
  const RecordLayout layout{kSampleType & ~static_cast<uint64_t>(PERF_SAMPLE_READ), 0, true};
  const auto bytes = PerfRecordBytes(PERF_RECORD_SAMPLE, 0)
                         .u64(0x10)
                         .u32(1)
                         .u32(2)
                         .u64(3)
                         .u64(4)
                         .u32(5)
                         .u32(0)
                         .u64(6)
                         .u64(1)
                         .u64(0x10)
                         .done();
  const auto record = decode_record(bytes, layout);
  ASSERT_TRUE(record);
  const auto& s = std::get<SampleRecord>(*record);
  EXPECT_FALSE(s.read_value);
  EXPECT_EQ(s.period, 6u);
  ASSERT_EQ(s.callchain.size(), 1u);
}

TEST(Callchain, SplitsAtMarkersLeafFirst) {
  const uint64_t k = static_cast<uint64_t>(PERF_CONTEXT_KERNEL);
  const uint64_t u = static_cast<uint64_t>(PERF_CONTEXT_USER);
  const std::vector<uint64_t> chain = {k,       0xffffffff81000010, 0xffffffff81000020, u, 0x401000, 0x402000,
                                       0x403000};
  SplitCallchain split;
  split_callchain(chain, split);
  EXPECT_EQ(split.kernel, (std::vector<uint64_t>{0xffffffff81000010, 0xffffffff81000020}));
  EXPECT_EQ(split.user, (std::vector<uint64_t>{0x401000, 0x402000, 0x403000}));
  EXPECT_EQ(split.address_count, 5u);
}

TEST(Callchain, UserOnlyAndGuestFrames) {
  const uint64_t u = static_cast<uint64_t>(PERF_CONTEXT_USER);
  const uint64_t guest = static_cast<uint64_t>(PERF_CONTEXT_GUEST_KERNEL);
  SplitCallchain split;
  split_callchain(std::vector<uint64_t>{u, 0x1000, 0x2000}, split);
  EXPECT_TRUE(split.kernel.empty());
  EXPECT_EQ(split.user.size(), 2u);

  split_callchain(std::vector<uint64_t>{guest, 0xffff800000001000, u, 0x3000}, split);
  EXPECT_TRUE(split.kernel.empty());
  EXPECT_EQ(split.user, std::vector<uint64_t>{0x3000});
  EXPECT_EQ(split.address_count, 2u);  // the guest frame counts towards the depth limit

  split_callchain(std::vector<uint64_t>{}, split);
  EXPECT_TRUE(split.kernel.empty() && split.user.empty());

  // Without markers the address itself tells the side.
  split_callchain(std::vector<uint64_t>{0xffffffff81000000, 0x401000}, split);
  EXPECT_EQ(split.kernel.size(), 1u);
  EXPECT_EQ(split.user.size(), 1u);
}

}  // namespace
}  // namespace hpd
