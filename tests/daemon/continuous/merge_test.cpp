// Unit tests of load_chunks: merging synthetic chunks, pid reuse, mappings over time, filters, damage.
#include <gtest/gtest.h>

#include <fstream>

#include "chunk_testing.h"
#include "hpd/continuous/continuous.h"

namespace hpd::continuous {
namespace {

namespace fs = std::filesystem;
using testing::kSec;
using testing::make_chunk;
using testing::SyntheticProcess;
using testing::TempDir;
using testing::write_chunk;

constexpr uint64_t kStart = 1741944413ULL * kSec;  // Unix time of the first chunk
constexpr uint64_t kMono = 5000 * kSec;            // its monotonic time
constexpr int32_t kPidSpace = 1 << 22;

// Chunk `i` of a run of 60 s chunks.
RawProfile chunk(int i, const std::vector<SyntheticProcess>& processes) {
  return make_chunk(kStart + i * 60 * kSec, kMono + i * 60 * kSec, 60, processes);
}

ExportFilter everything() {
  ExportFilter f;
  f.until_unix_ns = kStart + 3600 * kSec;
  return f;
}

size_t samples_of(const RawProfile& p, int32_t pid) {
  size_t n = 0;
  for (const RawSample& s : p.samples) n += s.pid == pid;
  return n;
}

bool contains(const std::vector<std::string>& notes, const std::string& text) {
  for (const auto& n : notes) {
    if (n.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(LoadChunks, OneProcessAcrossChunksIsMergedOnce) {
  TempDir dir;
  write_chunk(dir.path(), chunk(0, {{}}));
  write_chunk(dir.path(), chunk(1, {{}}));
  std::vector<std::string> notes;
  const LoadedChunks loaded = load_chunk_window(dir.path(), everything(), &notes);
  const RawProfile& p = loaded.profile;
  EXPECT_EQ(loaded.chunks_read, 2u);
  EXPECT_FALSE(loaded.boot_id.empty());  // both written in this boot
  ASSERT_EQ(p.processes.size(), 1u);
  EXPECT_EQ(p.processes[0].pid, 100);
  EXPECT_EQ(p.processes[0].mappings.size(), 1u);  // the same mapping seen in both chunks, kept once
  EXPECT_EQ(p.threads.size(), 1u);
  EXPECT_EQ(p.modules.size(), 1u);
  EXPECT_EQ(p.stacks.size(), 1u);  // re-interned: the same addresses in both chunks
  ASSERT_EQ(p.samples.size(), 120u);
  EXPECT_EQ(p.samples.back().time_ns, kMono + 119 * kSec + kSec / 2);  // one boot: times as recorded
  EXPECT_EQ(p.info.start_unix_ns, kStart);
  EXPECT_EQ(p.info.start_mono_ns, kMono);
  EXPECT_EQ(p.info.end_mono_ns, kMono + 120 * kSec);
  EXPECT_NE(p.info.target.find("2 chunks"), std::string::npos) << p.info.target;
  EXPECT_FALSE(contains(notes, "reused"));
  // Every sample's address resolves through the merged mappings.
  for (const RawSample& s : p.samples) {
    EXPECT_NE(p.find_process(s.pid)->find_mapping(p.stacks.user_frames(s.stack)[0], s.time_ns), nullptr);
  }
}

TEST(LoadChunks, APidReusedAfterItsProcessExitedIsKeptApart) {
  TempDir dir;
  write_chunk(dir.path(), chunk(0, {{.end_offset_ns = 30 * kSec}}));
  // The same pid, another program; it existed before chunk 1 began (it started in the gap).
  write_chunk(dir.path(), chunk(1, {{.name = "other", .exe = "/bin/other", .map_start = 0x500000}}));
  // ... and it goes on in chunk 2: still the same (second) process.
  write_chunk(dir.path(), chunk(2, {{.name = "other", .exe = "/bin/other", .map_start = 0x500000}}));
  std::vector<std::string> notes;
  const RawProfile p = load_chunks(dir.path(), everything(), &notes);
  ASSERT_EQ(p.processes.size(), 2u);
  const RawProcess* first = p.find_process(100);
  const RawProcess* second = p.find_process(100 + kPidSpace);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(first->exe, "/usr/bin/worker");
  EXPECT_EQ(second->exe, "/bin/other");
  EXPECT_NE(first->end_ns, 0u);
  EXPECT_EQ(samples_of(p, 100), 30u);
  EXPECT_EQ(samples_of(p, 100 + kPidSpace), 120u);
  EXPECT_EQ(second->mappings.size(), 1u);
  EXPECT_TRUE(contains(notes, "pid 100 was reused by other")) << (notes.empty() ? "" : notes[0]);
  EXPECT_TRUE(contains(notes, "shown as pid " + std::to_string(100 + kPidSpace)));
}

TEST(LoadChunks, ANewExecutableIsAnExecAndAForkInALaterChunkIsAnotherProcess) {
  TempDir dir;
  // Alive at the end of chunk 0; chunk 1's pid 100 runs another file: it exec'd between the chunks.
  // Chunk 2's pid 100 was forked during chunk 2, so the previous one exited unseen: a reused pid.
  write_chunk(dir.path(), chunk(0, {{}}));
  write_chunk(dir.path(), chunk(1, {{.name = "worker2", .exe = "/usr/bin/worker2", .map_start = 0x500000}}));
  write_chunk(dir.path(), chunk(2, {{.exe = "/usr/bin/worker2", .start_offset_ns = 10 * kSec}}));
  const RawProfile p = load_chunks(dir.path(), everything(), nullptr);
  ASSERT_EQ(p.processes.size(), 2u);
  EXPECT_EQ(samples_of(p, 100), 120u);
  EXPECT_EQ(samples_of(p, 100 + kPidSpace), 50u);
  const RawProcess* execed = p.find_process(100);
  ASSERT_NE(execed, nullptr);
  EXPECT_EQ(execed->exe, "/usr/bin/worker2");
  ASSERT_EQ(execed->mappings.size(), 2u);
  // The old program's mapping serves chunk 0's samples and ends where chunk 1 begins.
  EXPECT_EQ(execed->mappings[0].unmapped_ns, kMono + 60 * kSec);
  EXPECT_NE(execed->find_mapping(0x400010, kMono + 30 * kSec), nullptr);
  EXPECT_EQ(execed->find_mapping(0x400010, kMono + 90 * kSec), nullptr);
  EXPECT_NE(execed->find_mapping(0x500010, kMono + 90 * kSec), nullptr);
}

TEST(LoadChunks, AMappingReplacedInALaterChunkServesOnlyTheLaterSamples) {
  TempDir dir;
  write_chunk(dir.path(), chunk(0, {{.module_build_id = "aaaa"}}));
  write_chunk(dir.path(), chunk(1, {{.module_build_id = "bbbb"}}));  // rebuilt and mapped at the same place
  const RawProfile p = load_chunks(dir.path(), everything(), nullptr);
  ASSERT_EQ(p.processes.size(), 1u);
  ASSERT_EQ(p.modules.size(), 2u);
  const RawProcess& proc = p.processes[0];
  EXPECT_EQ(proc.mappings.size(), 2u);
  const RawMapping* early = proc.find_mapping(0x400010, kMono + 30 * kSec);
  const RawMapping* late = proc.find_mapping(0x400010, kMono + 90 * kSec);
  ASSERT_NE(early, nullptr);
  ASSERT_NE(late, nullptr);
  EXPECT_EQ(p.modules[early->module].build_id, "aaaa");
  EXPECT_EQ(p.modules[late->module].build_id, "bbbb");
}

TEST(LoadChunks, TheWindowSelectsChunksAndSamples) {
  TempDir dir;
  for (int i = 0; i < 4; ++i) write_chunk(dir.path(), chunk(i, {{}}));
  ExportFilter f;
  f.since_unix_ns = kStart + 30 * kSec;
  f.until_unix_ns = kStart + 90 * kSec;
  const LoadedChunks loaded = load_chunk_window(dir.path(), f, nullptr);
  EXPECT_EQ(loaded.chunks_read, 2u);  // chunks 2 and 3 start after the window
  const RawProfile& p = loaded.profile;
  EXPECT_EQ(p.samples.size(), 60u);  // 30.5 .. 89.5 s
  for (const RawSample& s : p.samples) {
    EXPECT_GE(s.time_ns, kMono + 30 * kSec);
    EXPECT_LE(s.time_ns, kMono + 90 * kSec);
  }
  EXPECT_EQ(p.info.start_unix_ns, kStart + 30 * kSec);
  EXPECT_EQ(p.info.start_mono_ns, kMono + 30 * kSec);
  EXPECT_EQ(p.info.end_mono_ns, kMono + 90 * kSec);
  // Tracks do not start before the profile does.
  for (const RawThread& t : p.threads) EXPECT_GE(t.start_ns, p.info.start_mono_ns);

  // A window between all chunks reads none; an inverted one is an error.
  f.since_unix_ns = kStart + 1000 * kSec;
  f.until_unix_ns = kStart + 2000 * kSec;
  const LoadedChunks none = load_chunk_window(dir.path(), f, nullptr);
  EXPECT_EQ(none.chunks_read, 0u);
  EXPECT_TRUE(none.profile.samples.empty());
  f.since_unix_ns = kStart + 3000 * kSec;
  EXPECT_THROW(load_chunk_window(dir.path(), f, nullptr), std::runtime_error);
}

// The hypervisor's steal of a window: each chunk's, by the share of the chunk inside the window;
// unknown when one chunk did not know its own.
TEST(LoadChunks, TheWindowsStealIsItsChunksShareOfTheirs) {
  TempDir dir;
  for (int i = 0; i < 2; ++i) {
    RawProfile c = chunk(i, {{}});
    c.info.host_steal_known = true;
    c.info.host_steal_ns = (i + 1) * 600 * 1000000ULL;  // 600 ms, then 1200 ms
    write_chunk(dir.path(), c);
  }
  ExportFilter f;
  f.since_unix_ns = kStart + 30 * kSec;  // half of the first chunk, a quarter of the second
  f.until_unix_ns = kStart + 75 * kSec;
  const RawProfile p = load_chunk_window(dir.path(), f, nullptr).profile;
  EXPECT_TRUE(p.info.host_steal_known);
  EXPECT_EQ(p.info.host_steal_ns, 300 * 1000000ULL + 300 * 1000000ULL);

  RawProfile unknown = chunk(2, {{}});
  unknown.info.host_steal_known = false;
  write_chunk(dir.path(), unknown);
  EXPECT_FALSE(load_chunks(dir.path(), everything(), nullptr).info.host_steal_known);
}

TEST(LoadChunks, PidAndCommFiltersKeepOnlyMatchingProcesses) {
  TempDir dir;
  const std::vector<SyntheticProcess> procs{
      {},
      {.pid = 200, .name = "other", .exe = "/opt/tool/bin/data-importer", .map_start = 0x500000},
      {.pid = 300, .name = "averyveryverylo", .exe = "/usr/bin/x", .map_start = 0x600000}};
  write_chunk(dir.path(), chunk(0, procs));
  write_chunk(dir.path(), chunk(1, procs));

  ExportFilter f = everything();
  f.pids = {200};
  RawProfile p = load_chunks(dir.path(), f, nullptr);
  ASSERT_EQ(p.processes.size(), 1u);
  EXPECT_EQ(samples_of(p, 200), 120u);
  EXPECT_EQ(p.samples.size(), 120u);

  f = everything();
  f.comms = {"worker", "data-importer"};  // a comm, and an executable's file name
  p = load_chunks(dir.path(), f, nullptr);
  EXPECT_EQ(p.processes.size(), 2u);
  EXPECT_EQ(samples_of(p, 100) + samples_of(p, 200), p.samples.size());

  f = everything();
  f.comms = {"averyveryverylongname"};  // comm keeps 15 characters
  p = load_chunks(dir.path(), f, nullptr);
  EXPECT_EQ(samples_of(p, 300), p.samples.size());
  EXPECT_EQ(p.samples.size(), 120u);

  f = everything();
  f.pids = {100};
  f.comms = {"other"};  // both must hold
  EXPECT_TRUE(load_chunks(dir.path(), f, nullptr).samples.empty());
}

TEST(LoadChunks, CorruptChunksAreSkippedWithANote) {
  TempDir dir;
  write_chunk(dir.path(), chunk(0, {{}}));
  const fs::path bad = dir.file(chunk_file_name(kStart + 60 * kSec));
  {
    std::ofstream out(bad, std::ios::binary);
    out << "\x89HPR\r\n\x1a\n but then nothing sensible at all, just text where blocks should be";
  }
  testing::set_mtime(bad, kStart + 120 * kSec);
  const fs::path truncated = write_chunk(dir.path(), chunk(2, {{}}));
  fs::resize_file(truncated, fs::file_size(truncated) / 2);
  testing::set_mtime(truncated, kStart + 180 * kSec);
  {
    std::ofstream out(dir.file("garbage.bin"), std::ios::binary);
    out << "xyz";
  }
  std::vector<std::string> notes;
  const LoadedChunks loaded = load_chunk_window(dir.path(), everything(), &notes);
  EXPECT_EQ(loaded.chunks_skipped, 1u);
  EXPECT_EQ(loaded.chunks_read, 2u);  // the cut one is read up to its last complete block
  EXPECT_GE(loaded.profile.samples.size(), 60u);
  EXPECT_TRUE(contains(notes, "skipping " + bad.string()));
  EXPECT_TRUE(contains(notes, "ignoring " + dir.file("garbage.bin")));
}

}  // namespace
}  // namespace hpd::continuous
