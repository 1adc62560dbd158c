// Unit tests of the continuous chunk store: names, scanning, retention, crash recovery, time specs.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "chunk_testing.h"
#include "hpd/capture/capture.h"
#include "hpd/continuous/continuous.h"

namespace hpd::continuous {
namespace {

namespace fs = std::filesystem;
using testing::file_names;
using testing::kSec;
using testing::make_chunk;
using testing::TempDir;
using testing::write_chunk;

// 2025-03-14 09:26:53.589 UTC
constexpr uint64_t kStamp = 1741944413ULL * kSec + 589'000'000ULL;

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

bool contains(const std::vector<std::string>& notes, const std::string& text) {
  for (const auto& n : notes) {
    if (n.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(ChunkNames, FormatAndParseRoundTrip) {
  EXPECT_EQ(chunk_file_name(kStamp), "chunk-20250314T092653.589Z.hpr");
  EXPECT_EQ(parse_chunk_file_name("chunk-20250314T092653.589Z.hpr"), kStamp);
  EXPECT_EQ(parse_chunk_file_name("chunk-20250314T092653.589Z.hpr.tmp"), kStamp);
  // Sub-millisecond digits are dropped, so names of chunks started in the same millisecond collide
  // (the profiler steps to the next millisecond then).
  EXPECT_EQ(chunk_file_name(kStamp + 999'999), chunk_file_name(kStamp));
  // Names sort as times do.
  EXPECT_LT(chunk_file_name(kStamp), chunk_file_name(kStamp + kSec));
  EXPECT_LT(chunk_file_name(kStamp + 9 * kSec), chunk_file_name(kStamp + 10 * kSec));
}

TEST(ChunkNames, RejectsOtherNames) {
  for (const char* name :
       {"", "chunk-.hpr", "chunk-20250314T092653.589Z.hpr.bak", "chunk-20251314T092653.589Z.hpr",
        "chunk-20250314T252653.589Z.hpr", "chunk-2025031XT092653.589Z.hpr", "xchunk-20250314T092653.589Z.hpr",
        "chunk-20250314T092653.589.hpr", "chunk-20250314T092653.589Z.json", "notes.tmp",
        "chunk-20250314T092653.589Z.hpr.salvage.tmp"}) {
    EXPECT_FALSE(parse_chunk_file_name(name).has_value()) << name;
  }
}

TEST(ChunkStore, ScanListsChunksOldestFirstAndNotesGarbage) {
  TempDir dir;
  write_chunk(dir.path(), make_chunk(kStamp + 60 * kSec, 2000 * kSec, 60, {{}}));
  write_chunk(dir.path(), make_chunk(kStamp, 1940 * kSec, 60, {{}}));
  write_file(dir.file("README"), "not a chunk");
  fs::create_directory(dir.file("chunk-20250314T092653.000Z.hpr"));  // our name, not a file
  write_file(dir.file("chunk-20250314T092753.589Z.hpr.tmp"), "partial");
  write_file(dir.file(".hpd-continuous.lock"), "");

  const StoreScan scan = scan_store(dir.path());
  ASSERT_EQ(scan.chunks.size(), 2u);
  EXPECT_EQ(scan.chunks[0].start_unix_ns, kStamp);
  EXPECT_EQ(scan.chunks[1].start_unix_ns, kStamp + 60 * kSec);
  EXPECT_EQ(scan.chunks[0].end_unix_ns, kStamp + 60 * kSec);  // the modification time
  EXPECT_GT(scan.chunks[0].bytes, 16u);
  ASSERT_EQ(scan.temporaries.size(), 1u);
  EXPECT_EQ(scan.notes.size(), 2u);
  EXPECT_TRUE(contains(scan.notes, "README"));
  EXPECT_TRUE(contains(scan.notes, "chunk-20250314T092653.000Z.hpr"));
  EXPECT_FALSE(contains(scan.notes, "lock"));
}

TEST(ChunkStore, MissingDirectorySaysToTurnContinuousModeOn) {
  try {
    scan_store("/nonexistent/hpd-continuous");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist; is continuous mode on in /etc/hpd/hpd.conf?"),
              std::string::npos)
        << e.what();
  }
}

TEST(ChunkStore, UnreadableDirectorySaysWhichPermissionIsMissing) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch to another uid";
  TempDir dir;
  fs::permissions(dir.path(), fs::perms::owner_all);  // mkdtemp's 0700, said out loud
  // A child switches to nobody (root would bypass the permission bits) and reports what it got.
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipefd[0]);
    std::string message = "no error";
    if (setgid(65534) == 0 && setuid(65534) == 0) {
      try {
        scan_store(dir.path());
      } catch (const std::exception& e) {
        message = e.what();
      }
    } else {
      message = "setuid failed";
    }
    (void)!write(pipefd[1], message.data(), message.size());
    _exit(0);
  }
  close(pipefd[1]);
  std::string message;
  char buf[512];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof buf)) > 0) message.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_NE(message.find("permission denied"), std::string::npos) << message;
  EXPECT_NE(message.find("read and search permission"), std::string::npos) << message;
}

TEST(Retention, RemovesChunksOlderThanMaxAgeOnly) {
  TempDir dir;
  const uint64_t now = kStamp + 10 * 3600 * kSec;
  // Ended 9.5 h, 2 h and 10 min before now.
  write_chunk(dir.path(), make_chunk(kStamp, 1000 * kSec, 1800, {{}}));
  write_chunk(dir.path(), make_chunk(now - 3 * 3600 * kSec, 5000 * kSec, 3600, {{}}));
  write_chunk(dir.path(), make_chunk(now - 11 * 60 * kSec, 9000 * kSec, 60, {{}}));
  write_file(dir.file("old-notes.txt"), "x");
  testing::set_mtime(dir.file("old-notes.txt"), kStamp - 365 * 86400 * kSec);

  std::vector<std::string> notes;
  const auto removed = apply_retention(dir.path(), RetentionLimits{3 * 3600, 0}, now, &notes);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].filename().string(), chunk_file_name(kStamp));
  const auto left = file_names(dir.path());
  EXPECT_EQ(left.size(), 3u);  // two chunks and the file that is not ours
  EXPECT_TRUE(fs::exists(dir.file("old-notes.txt")));

  // A smaller limit takes the 2 h old one as well; no limit takes nothing.
  EXPECT_EQ(apply_retention(dir.path(), RetentionLimits{3600, 0}, now, &notes).size(), 1u);
  EXPECT_EQ(apply_retention(dir.path(), RetentionLimits{0, 0}, now, &notes).size(), 0u);
  EXPECT_EQ(scan_store(dir.path()).chunks.size(), 1u);
}

TEST(Retention, RemovesOldestChunksUntilTheRestFitMaxBytes) {
  TempDir dir;
  std::vector<fs::path> paths;
  for (int i = 0; i < 5; ++i)
    paths.push_back(
        write_chunk(dir.path(), make_chunk(kStamp + i * 60 * kSec, (1000 + i * 60) * kSec, 60, {{}})));
  std::vector<uint64_t> sizes;
  for (const auto& p : paths) sizes.push_back(fs::file_size(p));
  write_file(dir.file("big-garbage"), std::string(100000, 'x'));  // not counted, never removed

  // Room for the newest two chunks and a byte less than the third.
  const uint64_t limit = sizes[3] + sizes[4] + sizes[2] - 1;
  const auto removed = apply_retention(dir.path(), RetentionLimits{0, limit}, kStamp + 3600 * kSec, nullptr);
  ASSERT_EQ(removed.size(), 3u);
  EXPECT_EQ(removed[0], paths[0]);
  EXPECT_EQ(removed[1], paths[1]);
  EXPECT_EQ(removed[2], paths[2]);
  const StoreScan scan = scan_store(dir.path());
  ASSERT_EQ(scan.chunks.size(), 2u);
  EXPECT_EQ(scan.chunks[0].path, paths[3]);
  EXPECT_TRUE(fs::exists(dir.file("big-garbage")));
  // Already within the limit: nothing more goes.
  EXPECT_TRUE(apply_retention(dir.path(), RetentionLimits{0, limit}, kStamp, nullptr).empty());
}

TEST(Recovery, SalvagesTheCompleteBlocksOfACrashedRunsTmpFile) {
  TempDir dir;
  RawProfile full =
      make_chunk(kStamp, 1000 * kSec, 20, {{}, {.pid = 200, .name = "other", .exe = "/bin/other"}});
  full.info.end_mono_ns = 0;  // as while recording: the end arrives with the last flush
  // The first half as a crashed run streamed it: one flush, then blocks cut in the middle.
  RawProfile half = full;
  half.samples.resize(full.samples.size() / 2);
  const fs::path tmp = dir.file(chunk_file_name(kStamp) + ".tmp");
  {
    CaptureWriter writer(tmp.string());
    writer.flush(half);
  }
  const uint64_t flushed = fs::file_size(tmp);
  {
    // Append the rest as a second flush and cut it inside its last block.
    CaptureWriter writer(dir.file("scratch"));
    writer.flush(half);
    writer.flush(full);
  }
  {
    std::ifstream in(dir.file("scratch"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    fs::remove(dir.file("scratch"));
    std::ofstream out(tmp, std::ios::binary | std::ios::app);
    out << bytes.substr(flushed, (bytes.size() - flushed) / 2);
  }
  write_file(dir.file(chunk_file_name(kStamp + kSec) + ".tmp"), "garbage that is no capture at all");
  {
    CaptureWriter writer(dir.file(chunk_file_name(kStamp + 2 * kSec) + ".tmp"));
    writer.flush(make_chunk(kStamp + 2 * kSec, 1002 * kSec, 0, {{}}));  // no samples yet
  }
  write_file(dir.file(chunk_file_name(kStamp + 3 * kSec) + ".salvage.tmp"), "half a salvage");
  write_file(dir.file("notes.tmp"), "someone else's");

  std::vector<std::string> notes;
  EXPECT_EQ(recover_temporaries(dir.path(), &notes), 1u);
  EXPECT_EQ(file_names(dir.path()), (std::vector<std::string>{chunk_file_name(kStamp), "notes.tmp"}));
  EXPECT_TRUE(contains(notes, "salvaged " + chunk_file_name(kStamp)));
  EXPECT_TRUE(contains(notes, "unreadable chunk"));
  EXPECT_TRUE(contains(notes, "without samples"));
  EXPECT_TRUE(contains(notes, "interrupted salvage"));

  const CaptureContents salvaged = read_capture_file(dir.file(chunk_file_name(kStamp)));
  EXPECT_TRUE(salvaged.info.complete);
  EXPECT_GE(salvaged.profile.samples.size(), half.samples.size());
  EXPECT_LT(salvaged.profile.samples.size(), full.samples.size());
  EXPECT_EQ(salvaged.profile.processes.size(), 2u);
  // Its end is its last sample, and the file's time says so (window selection uses it).
  uint64_t last = 0;
  for (const RawSample& s : salvaged.profile.samples) last = std::max(last, s.time_ns);
  EXPECT_EQ(salvaged.profile.info.end_mono_ns, last);
  const StoreScan scan = scan_store(dir.path());
  ASSERT_EQ(scan.chunks.size(), 1u);
  EXPECT_EQ(scan.chunks[0].end_unix_ns, kStamp + (last - 1000 * kSec));
  // Running it again finds nothing more to do.
  EXPECT_EQ(recover_temporaries(dir.path(), nullptr), 0u);
}

TEST(TimeSpec, DurationsBeforeNow) {
  const uint64_t now = kStamp;
  EXPECT_EQ(parse_time_spec("30s", now), now - 30 * kSec);
  EXPECT_EQ(parse_time_spec("10m", now), now - 600 * kSec);
  EXPECT_EQ(parse_time_spec("2h", now), now - 7200 * kSec);
  EXPECT_EQ(parse_time_spec("1d", now), now - 86400 * kSec);
  EXPECT_EQ(parse_time_spec("1h30m", now), now - 5400 * kSec);
  EXPECT_EQ(parse_time_spec("now", now), now);
  EXPECT_EQ(parse_time_spec("100000d", now), 0u);  // before the epoch: everything
}

TEST(TimeSpec, AbsoluteTimes) {
  EXPECT_EQ(parse_time_spec("@1741944413", 0), 1741944413ULL * kSec);
  EXPECT_EQ(parse_time_spec("2025-03-14T09:26:53Z", 0), 1741944413ULL * kSec);
  EXPECT_EQ(parse_time_spec("2025-03-14 09:26:53", 0), 1741944413ULL * kSec);
  EXPECT_EQ(parse_time_spec("2025-03-14T09:26", 0), 1741944360ULL * kSec);
  EXPECT_EQ(format_unix_time(kStamp), "2025-03-14 09:26:53 UTC");
}

TEST(TimeSpec, RejectsGarbageWithTheAcceptedForms) {
  for (const char* bad : {"", "10", "10x", "m", "-5m", "@", "@12a", "2025-13-01T00:00",
                          "2025-03-14T09:26:53+01:00", "2025-03-14", "yesterday", "10m ago"}) {
    try {
      parse_time_spec(bad, kStamp);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("30s, 10m"), std::string::npos) << e.what();
    }
  }
}

TEST(Options, ValidateNamesTheBadField) {
  ContinuousOptions o;
  EXPECT_NO_THROW(validate(o));
  o.frequency_hz = 0;
  EXPECT_THROW(validate(o), std::invalid_argument);
  o = ContinuousOptions{};
  o.chunk_seconds = 0.1;
  EXPECT_THROW(validate(o), std::invalid_argument);
  o = ContinuousOptions{};
  o.dir.clear();
  EXPECT_THROW(ContinuousProfiler{o}, std::invalid_argument);
  o = ContinuousOptions{};
  o.flush_seconds = std::nan("");
  EXPECT_THROW(validate(o), std::invalid_argument);
  o = ContinuousOptions{};
  o.cfi_rows = kMaxCfiRowCapacity + 1;
  try {
    validate(o);
    ADD_FAILURE() << "accepted a CFI row map of " << o.cfi_rows << " rows";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("CFI row map"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hpd::continuous
