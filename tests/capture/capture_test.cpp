// Capture file tests: lossless round trip of every block type, streaming with changes between
// flushes, and damaged input: every truncation, flipped bytes, future versions, unknown blocks, garbage.
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "capture_codec.h"
#include "hpd/capture/capture.h"
#include "raw_profile_testing.h"

namespace hpd {
namespace {

namespace fs = std::filesystem;
using testing::diff_raw_profiles;
using testing::make_raw_profile;

class CaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hpd-capture-test-" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::vector<uint8_t> read_bytes(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  // A capture of make_raw_profile(n) streamed in several flushes, so that it has many blocks.
  std::vector<uint8_t> streamed_capture(size_t n, RawProfile* final_profile = nullptr) {
    RawProfile full = make_raw_profile(n);
    RawProfile live = full;
    live.samples.resize(n / 3);
    CaptureWriter writer(path("streamed.hpr"));
    writer.flush(live);
    live.samples.assign(full.samples.begin(), full.samples.begin() + 2 * n / 3);
    writer.flush(live);
    live.samples = full.samples;
    writer.finish(live);
    if (final_profile != nullptr) *final_profile = live;
    return read_bytes(path("streamed.hpr"));
  }

  // A capture's header followed by `blocks` (type, payload), each required and with a valid checksum,
  // is refused with an error that says `message`.
  void expect_refused(const std::vector<std::pair<uint16_t, std::string>>& blocks,
                      const std::string& message) {
    const std::vector<uint8_t> bytes = streamed_capture(30);
    std::vector<uint8_t> file(bytes.begin(), bytes.begin() + capture::kFileHeaderSize);
    for (const auto& [type, payload] : blocks) {
      const auto block = make_block(type, capture::kFlagRequired, payload);
      file.insert(file.end(), block.begin(), block.end());
    }
    try {
      read_capture(file);
      ADD_FAILURE() << "accepted: " << message;
    } catch (const CaptureError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }

  // Offsets of the blocks of a well-formed capture.
  static std::vector<size_t> block_offsets(const std::vector<uint8_t>& bytes) {
    std::vector<size_t> offsets;
    for (size_t pos = capture::kFileHeaderSize; pos < bytes.size();) {
      offsets.push_back(pos);
      pos += capture::kBlockHeaderSize + capture::get_le32(bytes.data() + pos + 4);
    }
    return offsets;
  }

  // The file without its blocks of `type`, as a writer that never wrote them would have it; `count`:
  // how many there were, each checked to be written without the required flag (optional).
  static std::vector<uint8_t> without_optional_blocks(const std::vector<uint8_t>& bytes, uint16_t type,
                                                      size_t& count) {
    std::vector<uint8_t> without(bytes.begin(), bytes.begin() + capture::kFileHeaderSize);
    const std::vector<size_t> offsets = block_offsets(bytes);
    count = 0;
    for (size_t i = 0; i < offsets.size(); ++i) {
      const size_t end = i + 1 < offsets.size() ? offsets[i + 1] : bytes.size();
      if (capture::get_le16(bytes.data() + offsets[i]) == type) {
        ++count;
        EXPECT_EQ(capture::get_le16(bytes.data() + offsets[i] + 2) & capture::kFlagRequired, 0) << type;
        continue;
      }
      without.insert(without.end(), bytes.begin() + static_cast<std::ptrdiff_t>(offsets[i]),
                     bytes.begin() + static_cast<std::ptrdiff_t>(end));
    }
    return without;
  }
  static size_t count_blocks(const std::vector<uint8_t>& bytes, uint16_t type) {
    size_t count = 0;
    for (const size_t offset : block_offsets(bytes))
      count += capture::get_le16(bytes.data() + offset) == type;
    return count;
  }

  // A framed block with a valid checksum.
  static std::vector<uint8_t> make_block(uint16_t type, uint16_t flags, const std::string& payload) {
    std::vector<uint8_t> b(capture::kBlockHeaderSize + payload.size());
    if (!payload.empty()) std::memcpy(b.data() + capture::kBlockHeaderSize, payload.data(), payload.size());
    capture::put_le16(b.data(), type);
    capture::put_le16(b.data() + 2, flags);
    capture::put_le32(b.data() + 4, static_cast<uint32_t>(payload.size()));
    capture::put_le32(b.data() + 8, static_cast<uint32_t>(payload.size()));
    capture::put_le32(b.data() + 12, capture::block_crc(b.data(), {b.data() + 16, payload.size()}));
    return b;
  }

  fs::path dir_;
};

TEST_F(CaptureTest, RoundTripKeepsEveryField) {
  const RawProfile original = make_raw_profile(5000);
  CaptureWriterOptions options;
  options.writer = "hpd test";
  write_capture_file(original, path("run.hpr"), options);
  ASSERT_TRUE(is_capture_file(path("run.hpr")));
  const CaptureContents read = read_capture_file(path("run.hpr"));
  EXPECT_EQ(diff_raw_profiles(original, read.profile), "");
  EXPECT_TRUE(read.info.complete);
  EXPECT_TRUE(read.info.notes.empty()) << read.info.notes.front();
  EXPECT_EQ(read.info.version, kCaptureFormatVersion);
  EXPECT_EQ(read.info.writer, "hpd test");
  EXPECT_EQ(read.info.skipped_blocks, 0u);
  // The readers' indexes work on the result: interning finds what was read.
  RawProfile copy = read.profile;
  EXPECT_EQ(copy.intern_module("/usr/bin/app", "0123456789abcdef0123456789abcdef01234567"), 1u);
  EXPECT_NE(copy.find_thread(1000, 1002), nullptr);
}

TEST_F(CaptureTest, EmptyProfileRoundTrips) {
  write_capture_file(RawProfile{}, path("empty.hpr"));
  const CaptureContents read = read_capture_file(path("empty.hpr"));
  EXPECT_TRUE(read.info.complete);
  EXPECT_EQ(diff_raw_profiles(RawProfile{}, read.profile), "");
}

TEST_F(CaptureTest, StreamingWritesChangesBetweenFlushes) {
  RawProfile live = make_raw_profile(600);
  CaptureWriter writer(path("live.hpr"));
  writer.flush(live);
  const uint64_t after_first = writer.bytes_written();
  writer.flush(live);  // nothing changed: nothing written
  EXPECT_EQ(writer.bytes_written(), after_first);

  // What the backends change in place while recording.
  live.threads[1].end_ns += 1;
  live.threads[0].lost.stack_failures += 3;
  live.processes[0].mappings[1].unmapped_ns = live.info.end_mono_ns;
  live.processes[0].end_ns = live.info.end_mono_ns;
  live.processes[0].name = "app-renamed";
  const uint32_t late = live.intern_module("/usr/lib/late.so", "beef");
  live.processes[0].mappings.push_back(RawMapping{0x7f1000000000, 0x7f1000010000, 0, late, 77, 0});
  live.process(2000).name = "child";
  live.thread(2000, 2001).name = "child-thread";
  const uint64_t extra[] = {0x7f1000000100, 0x7f1000000200};
  const uint32_t stack = live.stacks.intern({}, extra);
  live.samples.push_back(RawSample{live.info.end_mono_ns, 2000, 2001, stack, 1000, 0, 1});
  live.call_edges[0].count += 10;
  live.lost.lost_records += 1;
  live.info.end_mono_ns += 5;
  writer.flush(live);
  EXPECT_GT(writer.bytes_written(), after_first);
  live.samples.push_back(RawSample{live.info.end_mono_ns, 1000, 1000, kNoIndex, 5, 0, 0});
  writer.finish(live);

  const CaptureContents read = read_capture_file(path("live.hpr"));
  EXPECT_EQ(diff_raw_profiles(live, read.profile), "");
  EXPECT_TRUE(read.info.complete);
  EXPECT_THROW(writer.flush(live), CaptureError);
}

TEST_F(CaptureTest, LargeProfilesAreSplitIntoBoundedBlocks) {
  const RawProfile original = make_raw_profile(3 * capture::kSamplesPerBlock);
  write_capture_file(original, path("large.hpr"));
  const auto bytes = read_bytes(path("large.hpr"));
  size_t sample_blocks = 0;
  for (const size_t off : block_offsets(bytes)) {
    sample_blocks +=
        capture::get_le16(bytes.data() + off) == static_cast<uint16_t>(capture::BlockType::kSamples);
  }
  EXPECT_GE(sample_blocks, 3u);
  const CaptureContents read = read_capture(bytes);
  EXPECT_EQ(diff_raw_profiles(original, read.profile), "");
  // Columns of varints, then zstd: a few bytes per sample.
  EXPECT_LT(static_cast<double>(bytes.size()) / original.samples.size(), 8.0);
}

TEST_F(CaptureTest, EveryTruncationRecoversThePrefixOrFailsClearly) {
  RawProfile final_profile;
  const std::vector<uint8_t> bytes = streamed_capture(300, &final_profile);
  const std::vector<size_t> offsets = block_offsets(bytes);
  ASSERT_GE(offsets.size(), 10u);
  size_t previous_samples = 0;
  for (size_t len = 0; len < bytes.size(); ++len) {
    const std::span<const uint8_t> prefix(bytes.data(), len);
    if (len < capture::kFileHeaderSize) {
      try {
        read_capture(prefix, "cut.hpr");
        ADD_FAILURE() << "a " << len << "-byte prefix was accepted";
      } catch (const CaptureError& e) {
        EXPECT_NE(std::string(e.what()).find("cut.hpr"), std::string::npos);
      }
      continue;
    }
    const CaptureContents read = read_capture(prefix, "cut.hpr");
    ASSERT_FALSE(read.info.complete) << len;
    ASSERT_FALSE(read.info.notes.empty());
    EXPECT_NE(read.info.notes.back().find("did not finish"), std::string::npos) << read.info.notes.back();
    // Monotonic: a longer prefix never recovers fewer samples, and what it recovers is the original's start.
    EXPECT_GE(read.profile.samples.size(), previous_samples);
    previous_samples = read.profile.samples.size();
    ASSERT_LE(read.profile.samples.size(), final_profile.samples.size());
    for (size_t i = 0; i < read.profile.samples.size(); ++i) {
      ASSERT_EQ(read.profile.samples[i].time_ns, final_profile.samples[i].time_ns) << len;
      ASSERT_EQ(read.profile.samples[i].stack, final_profile.samples[i].stack) << len;
    }
    const bool at_boundary = std::find(offsets.begin(), offsets.end(), len) != offsets.end();
    if (at_boundary) {
      EXPECT_NE(read.info.notes.back().find("no end block"), std::string::npos) << read.info.notes.back();
    } else if (len > capture::kFileHeaderSize) {
      EXPECT_NE(read.info.notes.back().find("ends inside"), std::string::npos) << read.info.notes.back();
    }
  }
  EXPECT_EQ(previous_samples, final_profile.samples.size() - 0) << "the last prefix lacks only the end block";
  EXPECT_TRUE(read_capture(bytes).info.complete);
}

// A file cut after a flush's threads block and before its losses block (written after the samples)
// held the threads' new failed stacks and the totals of the flush before: the report said "Stacks: 0
// failed" above "tid N: 1 failed stack". Every prefix's totals are at least the threads' shares.
TEST_F(CaptureTest, ATruncatedFilesLossTotalsAreAtLeastItsThreadsShares) {
  RawProfile live = make_raw_profile(30);
  for (RawThread& t : live.threads) t.lost = {};
  live.lost = {};
  CaptureWriter writer(path("losses.hpr"));
  writer.flush(live);
  // What the recorder counts for a failed stack and a lost record: the thread's share and the total.
  live.threads[0].lost.stack_failures += 3;
  live.threads[0].lost.truncated_stacks += 2;
  live.threads[0].lost.lost_records += 5;
  live.threads[0].lost.throttle_events += 1;
  live.lost = live.threads[0].lost;
  live.lost.lost_records += 4;  // not a thread's
  live.samples.push_back(live.samples.back());
  writer.flush(live);
  writer.finish(live);
  const std::vector<uint8_t> bytes = read_bytes(path("losses.hpr"));
  size_t between = 0;  // prefixes with the threads' new shares and not the totals' block
  for (size_t len = capture::kFileHeaderSize; len <= bytes.size(); ++len) {
    const CaptureContents read = read_capture(std::span<const uint8_t>(bytes.data(), len), "cut.hpr");
    LostCounts shares;
    for (const RawThread& t : read.profile.threads) shares += t.lost;
    const LostCounts& total = read.profile.lost;
    ASSERT_GE(total.stack_failures, shares.stack_failures) << len;
    ASSERT_GE(total.truncated_stacks, shares.truncated_stacks) << len;
    ASSERT_GE(total.lost_records, shares.lost_records) << len;
    ASSERT_GE(total.throttle_events, shares.throttle_events) << len;
    between += shares.stack_failures == 3 && total.lost_records == 5;
    if (len == bytes.size()) {
      EXPECT_EQ(total.lost_records, 9u);
      EXPECT_EQ(total.stack_failures, 3u);
    }
  }
  EXPECT_GT(between, 0u) << "no prefix ends between the threads block and the losses block";
}

TEST_F(CaptureTest, FlippedPayloadByteIsAChecksumError) {
  const std::vector<uint8_t> bytes = streamed_capture(300);
  for (const size_t off : block_offsets(bytes)) {
    if (capture::get_le16(bytes.data() + off) != static_cast<uint16_t>(capture::BlockType::kSamples))
      continue;
    std::vector<uint8_t> bad = bytes;
    bad[off + capture::kBlockHeaderSize + 5] ^= 0x40;
    try {
      read_capture(bad, "bad.hpr");
      FAIL() << "corruption not detected";
    } catch (const CaptureError& e) {
      EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("offset " + std::to_string(off)), std::string::npos) << e.what();
    }
    return;
  }
  FAIL() << "no samples block";
}

TEST_F(CaptureTest, EverySingleByteFlipIsDetectedOrLooksTruncated) {
  const std::vector<uint8_t> bytes = streamed_capture(120);
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (const uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}}) {
      std::vector<uint8_t> bad = bytes;
      bad[i] ^= mask;
      try {
        const CaptureContents read = read_capture(bad);
        // Only a block size made larger can pass for a file cut short; never a silently changed profile.
        EXPECT_FALSE(read.info.complete) << "flip at " << i << " went unnoticed";
      } catch (const CaptureError&) {
      }
    }
  }
}

TEST_F(CaptureTest, FutureVersionIsRefusedWithBothVersions) {
  std::vector<uint8_t> bytes = streamed_capture(50);
  capture::put_le32(bytes.data() + 8, kCaptureMaxReadVersion + 1);
  try {
    read_capture(bytes, "new.hpr");
    FAIL();
  } catch (const CaptureError& e) {
    const std::string expected = "written by a newer hpd (capture format " +
                                 std::to_string(kCaptureMaxReadVersion + 1) +
                                 "); this hpctl reads up to format " + std::to_string(kCaptureMaxReadVersion);
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST_F(CaptureTest, UnknownBlocksAreSkippedUnlessRequired) {
  RawProfile final_profile;
  const std::vector<uint8_t> bytes = streamed_capture(100, &final_profile);
  const size_t end_block = block_offsets(bytes).back();
  auto with_block = [&](uint16_t flags) {
    std::vector<uint8_t> out(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(end_block));
    const auto block = make_block(100, flags, "a block type of some later version");
    out.insert(out.end(), block.begin(), block.end());
    out.insert(out.end(), bytes.begin() + static_cast<std::ptrdiff_t>(end_block), bytes.end());
    return out;
  };
  const CaptureContents read = read_capture(with_block(0));
  EXPECT_TRUE(read.info.complete);
  EXPECT_EQ(read.info.skipped_blocks, 1u);
  ASSERT_EQ(read.info.notes.size(), 1u);
  EXPECT_NE(read.info.notes[0].find("skipped 1 blocks"), std::string::npos);
  EXPECT_EQ(diff_raw_profiles(final_profile, read.profile), "");
  try {
    read_capture(with_block(capture::kFlagRequired));
    FAIL();
  } catch (const CaptureError& e) {
    EXPECT_NE(std::string(e.what()).find("required but unknown"), std::string::npos) << e.what();
  }
}

TEST_F(CaptureTest, InconsistentBlocksWithValidChecksumsAreRefused) {
  auto expect_error = [&](uint16_t type, const std::string& payload, const std::string& message) {
    expect_refused({{type, payload}}, message);
  };
  capture::Encoder e;
  // One sample whose stack does not exist.
  e.var(0), e.var(1), e.svar(5), e.svar(1), e.svar(0), e.index(3), e.var(0), e.var(0), e.var(0), e.u8(0);
  expect_error(6, e.bytes(), "refers to stack 3 of 0");
  e.clear();
  e.var(4), e.var(1);  // samples that claim to start at 4
  expect_error(6, e.bytes(), "samples start at 4");
  e.clear();
  e.var(1u << 30);  // a count far beyond the payload
  expect_error(4, e.bytes(), "exceeds the block");
  e.clear();
  e.var(1), e.svar(1), e.str("p"), e.str("e"), e.var(0), e.var(0), e.var(0), e.var(1);
  e.var(0), e.var(0x1000), e.var(0x1000), e.var(0), e.index(9), e.var(0), e.var(0);  // module 9 of 0
  expect_error(3, e.bytes(), "refers to module 9");
  e.clear();
  e.var(0), e.var(2), e.str("/a"), e.str(""), e.u8(0), e.str("/a"), e.str(""), e.u8(0);
  expect_error(2, e.bytes(), "appears twice");
  expect_error(6, std::string("\xff\xff\xff", 3), "truncated payload");
  e.clear();
  e.var(1), e.var(7),
      e.str(
          "\x7f"
          "ELF");  // the image of a module not yet read
  expect_error(10, e.bytes(), "image of module 7, not yet read");
}

// A recording that lets go of its stacks (RawProfile::forget_released_stacks) numbers them from 0
// again: the writer marks each new generation and writes the stacks kept and met since under their new
// indices; the reader keeps each stack once, whichever generations wrote it, and every sample names the
// frames it was taken with.
TEST_F(CaptureTest, StackGenerationsReadBackAsOneTable) {
  const auto user = [](uint64_t i) { return std::vector<uint64_t>{0x400000 + i, 0x500000}; };
  RawProfile live;
  std::vector<std::vector<uint64_t>> taken;  // each sample's user frames, in order
  const auto take = [&](uint64_t i) {
    RawSample s;
    s.pid = 1;
    s.tid = 1;
    s.time_ns = 1000 + taken.size();
    s.stack = live.stacks.intern({}, user(i));
    live.samples.push_back(s);
    taken.push_back(user(i));
  };
  CaptureWriter writer(path("generations.hpr"));
  for (uint64_t i = 0; i < 10; ++i) take(i);
  writer.flush(live);
  live.release_samples();
  live.forget_released_stacks({});
  take(5);  // met again: a new index in generation 1
  take(20);
  writer.flush(live);
  live.release_samples();
  live.forget_released_stacks({});
  take(20);
  take(5);
  take(30);
  writer.finish(live);

  const CaptureContents read = read_capture_file(path("generations.hpr"));
  EXPECT_TRUE(read.info.complete);
  ASSERT_EQ(read.profile.samples.size(), taken.size());
  EXPECT_EQ(read.profile.stacks.size(), 12u);  // 0-9, 20, 30
  for (size_t i = 0; i < taken.size(); ++i) {
    const auto frames = read.profile.stacks.user_frames(read.profile.samples[i].stack);
    EXPECT_EQ(std::vector<uint64_t>(frames.begin(), frames.end()), taken[i]) << i;
  }
  EXPECT_EQ(read.profile.samples[10].stack, read.profile.samples[5].stack);
  EXPECT_EQ(read.profile.samples[13].stack, read.profile.samples[5].stack);
  EXPECT_EQ(read.profile.samples[12].stack, read.profile.samples[11].stack);
}

// Stacks let go before the samples naming them were written would leave those samples without their
// frames: the writer refuses. The reader refuses a generation that does not count on, and a sample
// naming a stack its generation has not written.
TEST_F(CaptureTest, StackGenerationsOutOfOrderAreRefused) {
  RawProfile live;
  RawSample s;
  s.stack = live.stacks.intern({}, std::vector<uint64_t>{0x400000});
  live.samples.push_back(s);
  CaptureWriter writer(path("unwritten.hpr"));
  live.release_samples();  // not written
  live.forget_released_stacks({});
  try {
    writer.flush(live);
    ADD_FAILURE() << "a sample's stack let go before it was written";
  } catch (const CaptureError& e) {
    EXPECT_NE(std::string(e.what()).find("let go before samples 0 to 1"), std::string::npos) << e.what();
  }

  capture::Encoder generation;
  generation.var(0);
  expect_refused({{14, generation.bytes()}}, "stack generation 0 after generation 0");
  capture::Encoder stack;  // stack 0 of generation 0: one user frame
  stack.var(0), stack.var(1), stack.var(0), stack.var(1), stack.svar(0x400000), stack.u8(0);
  capture::Encoder one, sample;
  one.var(1);
  // One sample naming stack 0: generation 1 has written none.
  sample.var(0), sample.var(1), sample.svar(5), sample.svar(1), sample.svar(0), sample.index(0),
      sample.var(0), sample.var(0), sample.var(0), sample.u8(0);
  expect_refused({{5, stack.bytes()}, {14, one.bytes()}, {6, sample.bytes()}}, "refers to stack 0 of 0");
  // Generation 1's stacks start at 0 again.
  expect_refused({{5, stack.bytes()}, {14, one.bytes()}, {14, one.bytes()}},
                 "generation 1 after generation 1");
}

// A sample that waited for a CPU keeps its kind through a capture. Its kind byte says off-CPU, which
// is what a reader without the appended kind column makes of it; a file without the column (written
// before it) reads as off-CPU; a column that contradicts the byte is refused.
TEST_F(CaptureTest, WaitsForTheCpuKeepTheirKindAndOlderFilesReadAsOffCpu) {
  RawProfile original = make_raw_profile(300);
  size_t waits = 0;
  for (RawSample& s : original.samples) {
    if (s.kind == SampleKind::kOffCpu && (waits++ % 2 == 0)) s.kind = SampleKind::kWaitCpu;
  }
  ASSERT_GE(waits, 4u);
  write_capture_file(original, path("waits.hpr"));
  const CaptureContents read = read_capture_file(path("waits.hpr"));
  EXPECT_EQ(diff_raw_profiles(original, read.profile), "");
  const auto kinds = [](const RawProfile& p, SampleKind kind) {
    return std::count_if(p.samples.begin(), p.samples.end(),
                         [&](const RawSample& s) { return s.kind == kind; });
  };
  EXPECT_EQ(kinds(read.profile, SampleKind::kWaitCpu), kinds(original, SampleKind::kWaitCpu));
  EXPECT_GT(kinds(read.profile, SampleKind::kWaitCpu), 0);

  const std::vector<uint8_t> bytes = read_bytes(path("waits.hpr"));
  const std::vector<uint8_t> header(bytes.begin(), bytes.begin() + capture::kFileHeaderSize);
  // One off-CPU sample (kind byte 1, no stack), with the given trailing bytes.
  const auto one_sample = [&](const std::string& trailing) {
    capture::Encoder e;
    e.var(0), e.var(1), e.svar(5), e.svar(1), e.svar(0), e.index(kNoIndex), e.var(0), e.var(7), e.var(0),
        e.u8(1);
    std::vector<uint8_t> file = header;
    const auto block = make_block(6, capture::kFlagRequired, e.bytes() + trailing);
    file.insert(file.end(), block.begin(), block.end());
    return file;
  };
  const CaptureContents old_file = read_capture(one_sample(""));
  ASSERT_EQ(old_file.profile.samples.size(), 1u);
  EXPECT_EQ(old_file.profile.samples[0].kind, SampleKind::kOffCpu);
  EXPECT_EQ(old_file.profile.samples[0].off_cpu_ns, 7u);
  const CaptureContents new_file = read_capture(one_sample(std::string(1, '\x02')));
  ASSERT_EQ(new_file.profile.samples.size(), 1u);
  EXPECT_EQ(new_file.profile.samples[0].kind, SampleKind::kWaitCpu);
  for (const char bad : {'\x00', '\x03'}) {
    try {
      read_capture(one_sample(std::string(1, bad)));
      ADD_FAILURE() << "accepted kind " << int(bad);
    } catch (const CaptureError& e) {
      EXPECT_NE(std::string(e.what()).find("sample kind"), std::string::npos) << e.what();
    }
  }
}

// Each stack's user leaf (interrupted, or after a system call) travels in a column appended to the
// stacks block; a file without it (written before it) reads with the rule of its time: the user leaf
// under kernel frames after a system call, without them interrupted. A value out of range is refused.
TEST_F(CaptureTest, UserLeavesRoundTripAndOlderFilesPresumeThem) {
  RawProfile original = make_raw_profile(100);
  const std::vector<uint64_t> kernel = {0xffffffff81000100};
  const std::vector<uint64_t> user = {0x555500001234, 0x7f0000030000};
  const uint32_t preempted = original.stacks.intern(kernel, user, UserLeaf::kInterrupted);
  const uint32_t in_syscall = original.stacks.intern(kernel, user, UserLeaf::kAfterSyscall);
  ASSERT_NE(preempted, in_syscall);
  original.samples[0].stack = preempted;
  original.samples[1].stack = in_syscall;
  write_capture_file(original, path("leaves.hpr"));
  const CaptureContents read = read_capture_file(path("leaves.hpr"));
  EXPECT_EQ(diff_raw_profiles(original, read.profile), "");
  EXPECT_EQ(read.profile.stacks[preempted].user_leaf, UserLeaf::kInterrupted);
  EXPECT_EQ(read.profile.stacks[in_syscall].user_leaf, UserLeaf::kAfterSyscall);

  const std::vector<uint8_t> bytes = read_bytes(path("leaves.hpr"));
  const std::vector<uint8_t> header(bytes.begin(), bytes.begin() + capture::kFileHeaderSize);
  // Two stacks: one under a kernel frame, one without, with the given trailing bytes.
  const auto two_stacks = [&](const std::string& trailing) {
    capture::Encoder e;
    e.var(0), e.var(2), e.var(1), e.var(0), e.var(1), e.var(1);
    e.svar(static_cast<int64_t>(0xffffffff81000100)), e.svar(-0x7fff00000000), e.svar(0x10);
    std::vector<uint8_t> file = header;
    const auto block = make_block(5, capture::kFlagRequired, e.bytes() + trailing);
    file.insert(file.end(), block.begin(), block.end());
    return file;
  };
  const CaptureContents old_file = read_capture(two_stacks(""));
  ASSERT_EQ(old_file.profile.stacks.size(), 2u);
  EXPECT_EQ(old_file.profile.stacks[0].user_leaf, UserLeaf::kAfterSyscall);
  EXPECT_EQ(old_file.profile.stacks[1].user_leaf, UserLeaf::kInterrupted);
  const CaptureContents new_file = read_capture(two_stacks(std::string("\x00\x01", 2)));
  ASSERT_EQ(new_file.profile.stacks.size(), 2u);
  EXPECT_EQ(new_file.profile.stacks[0].user_leaf, UserLeaf::kInterrupted);
  EXPECT_EQ(new_file.profile.stacks[1].user_leaf, UserLeaf::kAfterSyscall);
  try {
    read_capture(two_stacks(std::string("\x00\x02", 2)));
    ADD_FAILURE() << "accepted user leaf 2";
  } catch (const CaptureError& e) {
    EXPECT_NE(std::string(e.what()).find("user leaf"), std::string::npos) << e.what();
  }
}

// Each process's cgroup travels in a column appended to the processes block (one string per process
// of the block, after all of their fields); a file without it (written before it) reads as no cgroup.
// A cgroup that changes between flushes (an exec into another unit) is written again.
TEST_F(CaptureTest, CgroupsRoundTripAndOlderFilesReadAsNone) {
  RawProfile original = make_raw_profile(50);
  ASSERT_EQ(original.find_process(1000)->cgroup, "/system.slice/app.service");
  CaptureWriter writer(path("cgroups.hpr"));
  writer.flush(original);
  original.process(1001).cgroup = "/system.slice/docker-0123abcd.scope";
  writer.finish(original);
  const CaptureContents read = read_capture_file(path("cgroups.hpr"));
  EXPECT_EQ(diff_raw_profiles(original, read.profile), "");
  EXPECT_EQ(read.profile.find_process(1000)->cgroup, "/system.slice/app.service");
  EXPECT_EQ(read.profile.find_process(1001)->cgroup, "/system.slice/docker-0123abcd.scope");

  const std::vector<uint8_t> bytes = read_bytes(path("cgroups.hpr"));
  const std::vector<uint8_t> header(bytes.begin(), bytes.begin() + capture::kFileHeaderSize);
  // Two processes without mappings, with the given trailing bytes.
  const auto two_processes = [&](const std::string& trailing) {
    capture::Encoder e;
    e.var(2);
    for (const int pid : {7, 8}) {
      e.svar(pid), e.str("p" + std::to_string(pid)), e.str("/bin/p"), e.var(0), e.var(1), e.var(0), e.var(0);
    }
    std::vector<uint8_t> file = header;
    const auto block = make_block(3, capture::kFlagRequired, e.bytes() + trailing);
    file.insert(file.end(), block.begin(), block.end());
    return file;
  };
  const CaptureContents old_file = read_capture(two_processes(""));
  ASSERT_EQ(old_file.profile.processes.size(), 2u);
  EXPECT_EQ(old_file.profile.find_process(7)->name, "p7");
  EXPECT_EQ(old_file.profile.find_process(7)->cgroup, "");
  EXPECT_EQ(old_file.profile.find_process(8)->cgroup, "");
  capture::Encoder column;
  column.str("/user.slice/user-0.slice/session-1.scope"), column.str("");
  const CaptureContents new_file = read_capture(two_processes(column.bytes()));
  ASSERT_EQ(new_file.profile.processes.size(), 2u);
  EXPECT_EQ(new_file.profile.find_process(7)->cgroup, "/user.slice/user-0.slice/session-1.scope");
  EXPECT_EQ(new_file.profile.find_process(8)->cgroup, "");
}

// The vDSO's image travels in its own optional block: a reader that does not know it (hpd before
// it) skips it and reads everything else; this one reads the image back.
TEST_F(CaptureTest, ModuleImagesAreAnOptionalBlock) {
  RawProfile final_profile;
  const std::vector<uint8_t> bytes = streamed_capture(100, &final_profile);
  size_t images = 0;
  std::vector<uint8_t> without;  // the file as if the writer had no such block
  without.assign(bytes.begin(), bytes.begin() + capture::kFileHeaderSize);
  const std::vector<size_t> offsets = block_offsets(bytes);
  for (size_t i = 0; i < offsets.size(); ++i) {
    const size_t end = i + 1 < offsets.size() ? offsets[i + 1] : bytes.size();
    if (capture::get_le16(bytes.data() + offsets[i]) == 10) {
      ++images;
      EXPECT_EQ(capture::get_le16(bytes.data() + offsets[i] + 2) & capture::kFlagRequired, 0);
      continue;
    }
    without.insert(without.end(), bytes.begin() + static_cast<std::ptrdiff_t>(offsets[i]),
                   bytes.begin() + static_cast<std::ptrdiff_t>(end));
  }
  EXPECT_EQ(images, 1u);  // written once, with the module, however many flushes follow
  const CaptureContents read = read_capture(bytes);
  EXPECT_EQ(diff_raw_profiles(final_profile, read.profile), "");
  const CaptureContents old_style = read_capture(without);
  EXPECT_TRUE(old_style.info.complete);
  RawProfile expected = final_profile;
  for (RawModule& m : expected.modules) m.image.clear();
  EXPECT_EQ(diff_raw_profiles(expected, old_style.profile), "");
}

// The kallsyms lines a recording kept for its kernel addresses: an optional block (an older reader
// skips it and names kernel frames from the kallsyms of its own boot), written once unless they change.
TEST_F(CaptureTest, KernelSymbolLinesAreAnOptionalBlock) {
  RawProfile profile = make_raw_profile(200);
  ASSERT_FALSE(profile.kernel_symbols.empty());
  write_capture_file(profile, path("k.hpr"));
  const std::vector<uint8_t> bytes = read_bytes(path("k.hpr"));
  size_t blocks = 0;
  const std::vector<uint8_t> without = without_optional_blocks(bytes, 13, blocks);
  EXPECT_EQ(blocks, 1u);
  EXPECT_EQ(read_capture(bytes).profile.kernel_symbols, profile.kernel_symbols);
  const CaptureContents old_style = read_capture(without);
  EXPECT_TRUE(old_style.info.complete);
  EXPECT_EQ(old_style.profile.kernel_symbols, "");

  // Streamed: a second flush with the same lines writes no second block; changed lines do.
  CaptureWriter writer(path("s.hpr"));
  writer.flush(profile);
  writer.flush(profile);
  profile.kernel_symbols += "ffffffffc0a00000 t mod_func\t[mymod]\n";
  writer.finish(profile);
  const std::vector<uint8_t> streamed = read_bytes(path("s.hpr"));
  EXPECT_EQ(count_blocks(streamed, 13), 2u);
  EXPECT_EQ(read_capture(streamed).profile.kernel_symbols, profile.kernel_symbols);
}

// The JIT symbols read when the recording ended (perf maps, jitdumps): an optional block (an older
// reader skips it and leaves generated code as [anon]+0xOFFSET), written once unless they change.
TEST_F(CaptureTest, JitSymbolsAreAnOptionalBlock) {
  RawProfile profile = make_raw_profile(200);
  ASSERT_EQ(profile.jit_symbols.size(), 2u);
  write_capture_file(profile, path("j.hpr"));
  const std::vector<uint8_t> bytes = read_bytes(path("j.hpr"));
  size_t blocks = 0;
  const std::vector<uint8_t> without = without_optional_blocks(bytes, 16, blocks);
  EXPECT_EQ(blocks, 1u);
  const CaptureContents old_style = read_capture(without);
  EXPECT_TRUE(old_style.info.complete);
  EXPECT_TRUE(old_style.profile.jit_symbols.empty());
  RawProfile expected = profile;
  expected.jit_symbols.clear();
  EXPECT_EQ(diff_raw_profiles(expected, old_style.profile), "");

  // Streamed: a second flush with the same symbols writes no second block; one more symbol does.
  CaptureWriter writer(path("s.hpr"));
  writer.flush(profile);
  writer.flush(profile);
  profile.jit_symbols.push_back(RawJitSymbol{1000, 0x7f0040002000, 16, "Builtin: ArgumentsAdaptor"});
  writer.finish(profile);
  const std::vector<uint8_t> streamed = read_bytes(path("s.hpr"));
  EXPECT_EQ(count_blocks(streamed, 16), 2u);
  EXPECT_EQ(diff_raw_profiles(profile, read_capture(streamed).profile), "");
}

TEST_F(CaptureTest, GarbageAndDamagedHeadersAreClearErrors) {
  std::mt19937_64 rng(42);
  std::vector<uint8_t> garbage(4096);
  for (auto& b : garbage) b = static_cast<uint8_t>(rng());
  EXPECT_THROW(read_capture(garbage), CaptureError);
  EXPECT_FALSE(has_capture_magic(garbage));
  try {
    read_capture({}, "empty.hpr");
    FAIL();
  } catch (const CaptureError& e) {
    EXPECT_NE(std::string(e.what()).find("not an hpd capture file"), std::string::npos) << e.what();
  }
  // The magic followed by garbage: an error or a recovered (empty) prefix, never a crash.
  for (int round = 0; round < 200; ++round) {
    std::vector<uint8_t> bytes(capture::kMagic, capture::kMagic + 8);
    bytes.insert(bytes.end(), {1, 0, 0, 0, 0, 0, 0, 0});
    const size_t n = rng() % 512;
    for (size_t i = 0; i < n; ++i) bytes.push_back(static_cast<uint8_t>(rng()));
    try {
      EXPECT_FALSE(read_capture(bytes).info.complete);
    } catch (const CaptureError&) {
    }
  }
  std::vector<uint8_t> zeros(capture::kMagic, capture::kMagic + 8);
  zeros.insert(zeros.end(), {1, 0, 0, 0, 0, 0, 0, 0});
  zeros.resize(zeros.size() + 4096, 0);  // a crash after the file system extended the file
  const CaptureContents read = read_capture(zeros);
  EXPECT_FALSE(read.info.complete);
  EXPECT_NE(read.info.notes.back().find("zero bytes"), std::string::npos);
  zeros[8] = 0;
  EXPECT_THROW(read_capture(zeros), CaptureError);  // version 0

  EXPECT_THROW(read_capture_file(path("does-not-exist.hpr")), CaptureError);
  EXPECT_FALSE(is_capture_file(path("does-not-exist.hpr")));
  EXPECT_THROW(CaptureWriter(path("no/such/dir/x.hpr")), CaptureError);
}

// The encoder writes through a pointer into a buffer it grows itself: a long random run of every kind
// of write, read back between clears and after `bytes()` (which trims the buffer) is read back
// value for value; and the LEB128 bytes of a few varints, byte for byte.
TEST(CaptureEncoder, EveryWriteReadsBackAcrossGrowthTrimsAndClears) {
  std::mt19937_64 random(31);
  capture::Encoder e;
  for (int round = 0; round < 40; ++round) {
    e.clear();
    std::vector<std::pair<int, uint64_t>> written;  // (kind, value)
    std::string strings, expected_var;
    const int n = static_cast<int>(random() % 5000);
    for (int i = 0; i < n; ++i) {
      const int kind = static_cast<int>(random() % 4);
      // Values of every varint length, 1 to 10 bytes.
      const uint64_t v = random() >> (random() % 64);
      if (kind == 0) e.u8(static_cast<uint8_t>(v));
      if (kind == 1) e.var(v);
      if (kind == 2) e.svar(static_cast<int64_t>(v));
      if (kind == 3) e.str(std::string(v % 300, static_cast<char>('a' + i % 26)));
      written.emplace_back(kind, v);
      if (i % 997 == 0) (void)e.bytes();  // trimmed mid-way; later writes grow it again
    }
    const std::string& payload = e.bytes();
    ASSERT_EQ(e.size(), payload.size());
    capture::Decoder d(std::span(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()), "test");
    for (size_t i = 0; i < written.size(); ++i) {
      const auto [kind, v] = written[i];
      if (kind == 0) {
        ASSERT_EQ(d.u8(), static_cast<uint8_t>(v)) << i;
      } else if (kind == 1) {
        ASSERT_EQ(d.var(), v) << i;
      } else if (kind == 2) {
        ASSERT_EQ(d.svar(), static_cast<int64_t>(v)) << i;
      } else {
        ASSERT_EQ(d.str(), std::string(v % 300, static_cast<char>('a' + i % 26))) << i;
      }
    }
    EXPECT_TRUE(d.at_end());
  }
  // LEB128, byte for byte, and an append after varints.
  e.clear();
  e.var(0);
  e.var(127);
  e.var(128);
  e.var(UINT64_MAX);
  e.append("xyz");
  const std::string want =
      std::string("\x00\x7f\x80\x01", 4) + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01" + "xyz";
  EXPECT_EQ(e.bytes(), want);
}

}  // namespace
}  // namespace hpd
