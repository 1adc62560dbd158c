// Discovery of mcount / __fentry__ instrumentation on the fixture ELF files: sites found, probe point chosen;
// the runtime's table as hpd adopts and reads it from a client.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <string>

#include "hpd/calls/call_counter.h"
#include "hpd/calls/discovery.h"
#include "hpd/calls/preload_abi.h"
#include "hpd/calls/preload_table.h"
#include "hpd/model/raw_profile.h"

namespace {

using hpd::calls::ModuleInstrumentation;
using hpd::calls::scan_module;
using hpd::calls::SiteKind;
using hpd::calls::SiteMode;

std::string fixture(const std::string& name) {
  return std::string(HPD_CALLS_FIXTURES) + "/" + name;
}

// Functions the fixture defines and instruments: main, caller_a, caller_b, callee.
constexpr size_t kFixtureFunctions = 4;

TEST(CallsDiscovery, GccPgCallsMcountThroughTheGot) {
  const ModuleInstrumentation m = scan_module(fixture("gcc_pg"));
  ASSERT_EQ(m.error, "");
  EXPECT_TRUE(m.imports_hook);
  EXPECT_TRUE(m.nop_sites.empty());
  EXPECT_EQ(m.mcount_calls, kFixtureFunctions);
  EXPECT_EQ(m.fentry_calls, 0u);
  EXPECT_TRUE(m.counted_in_libc());
  EXPECT_FALSE(m.build_id.empty());
}

TEST(CallsDiscovery, GccFentryCallsFentryFirst) {
  const ModuleInstrumentation m = scan_module(fixture("gcc_fentry"));
  ASSERT_EQ(m.error, "");
  EXPECT_EQ(m.fentry_calls, kFixtureFunctions);
  EXPECT_EQ(m.mcount_calls, 0u);
  EXPECT_TRUE(m.counted_in_libc());
}

TEST(CallsDiscovery, GccNopMcountGivesNop5EntrySites) {
  const ModuleInstrumentation m = scan_module(fixture("gcc_nop"));
  ASSERT_EQ(m.error, "");
  ASSERT_EQ(m.nop_sites.size(), kFixtureFunctions);
  for (const auto& s : m.nop_sites) {
    EXPECT_EQ(s.kind, SiteKind::kNop5);
    EXPECT_EQ(s.mode, SiteMode::kAtEntry);
    // Non-PIE: the first PT_LOAD maps file offset 0 at 0x400000.
    EXPECT_EQ(s.vaddr - s.file_offset, 0x400000u);
  }
  EXPECT_FALSE(m.counted_in_libc());
  // The bytes at each site's file offset are the nop5 itself.
  std::ifstream in(fixture("gcc_nop"), std::ios::binary);
  for (const auto& s : m.nop_sites) {
    char b[5];
    in.seekg(static_cast<std::streamoff>(s.file_offset));
    in.read(b, 5);
    EXPECT_EQ(std::string(b, 5), std::string("\x0f\x1f\x44\x00\x00", 5));
  }
}

TEST(CallsDiscovery, ClangPgAndFentryCallThroughThePlt) {
  const ModuleInstrumentation pg = scan_module(fixture("clang_pg"));
  ASSERT_EQ(pg.error, "");
  EXPECT_EQ(pg.mcount_calls, kFixtureFunctions);
  EXPECT_TRUE(pg.counted_in_libc());
  const ModuleInstrumentation fentry = scan_module(fixture("clang_fentry"));
  ASSERT_EQ(fentry.error, "");
  EXPECT_EQ(fentry.fentry_calls, kFixtureFunctions);
}

TEST(CallsDiscovery, RustInstrumentMcount) {
  if (!HPD_CALLS_HAVE_RUST) GTEST_SKIP() << "rustc not installed";
  const ModuleInstrumentation m = scan_module(fixture("rust_mcount"));
  ASSERT_EQ(m.error, "");
  EXPECT_TRUE(m.imports_hook);
  // Every Rust function of the crate and the instrumented parts of std that were inlined into it.
  EXPECT_GE(m.mcount_calls, 3u);
  EXPECT_TRUE(m.counted_in_libc());
}

TEST(CallsDiscovery, ClangPatchableEntriesInASharedLibrary) {
  // PIC: the table's entries are R_X86_64_RELATIVE relocations.
  const ModuleInstrumentation m = scan_module(fixture("libcalls_dso.so"));
  ASSERT_EQ(m.error, "");
  ASSERT_EQ(m.nop_sites.size(), 2u);  // lib_callee, lib_run
  for (const auto& s : m.nop_sites) {
    EXPECT_EQ(s.kind, SiteKind::kNop5);
    EXPECT_EQ(s.mode, SiteMode::kAtEntry);
  }
}

TEST(CallsDiscovery, UninstrumentedBinary) {
  const ModuleInstrumentation m = scan_module(fixture("plain"));
  ASSERT_EQ(m.error, "");
  EXPECT_FALSE(m.instrumented());
  EXPECT_FALSE(m.counted_in_libc());
}

TEST(CallsDiscovery, GlibcHookInternalCalls) {
  // Debian's glibc: one `call __mcount_internal` in _mcount and one in __fentry__.
  const ModuleInstrumentation m = scan_module("/lib/x86_64-linux-gnu/libc.so.6");
  ASSERT_EQ(m.error, "");
  ASSERT_EQ(m.hook_internal_sites.size(), 2u);
  std::ifstream in("/lib/x86_64-linux-gnu/libc.so.6", std::ios::binary);
  for (const auto& s : m.hook_internal_sites) {
    EXPECT_EQ(s.kind, SiteKind::kCall);
    EXPECT_EQ(s.mode, SiteMode::kMcountInternal);
    char op = 0;
    in.seekg(static_cast<std::streamoff>(s.file_offset));
    in.read(&op, 1);
    EXPECT_EQ(static_cast<unsigned char>(op), 0xe8);
  }
  EXPECT_FALSE(m.instrumented());
}

TEST(CallsDiscovery, BadInputGivesAnErrorNotACrash) {
  EXPECT_NE(scan_module("/nonexistent/file").error, "");
  EXPECT_NE(scan_module("/proc/self/status").error, "");
  // A truncated ELF: the first 100 bytes of a real one.
  const std::string cut = ::testing::TempDir() + "/truncated.elf";
  {
    std::ifstream in(fixture("gcc_pg"), std::ios::binary);
    char head[100];
    in.read(head, sizeof head);
    std::ofstream(cut, std::ios::binary).write(head, sizeof head);
  }
  const ModuleInstrumentation m = scan_module(cut);
  EXPECT_FALSE(m.instrumented());
  // Garbage.
  const std::string junk = ::testing::TempDir() + "/junk.bin";
  std::ofstream(junk, std::ios::binary) << std::string(4096, '\x7f');
  EXPECT_NE(scan_module(junk).error, "");
}

}  // namespace

// The model's histogram (hpd_model, which reads the runtime's buckets) and the runtime's own bucket
// function (preload_abi.h) agree on every bucket boundary, and a quantile lands in its bucket.
TEST(CallsRuntimeHistogram, ModelAndRuntimeAgreeOnTheBuckets) {
  for (uint32_t b = 0; b + 1 < HPD_CALLS_HIST_BUCKETS; ++b) {
    const uint64_t low = hpd_calls_hist_low(b);
    ASSERT_EQ(hpd::LatencyHistogram::bucket_low_ticks(b), low) << b;
    ASSERT_EQ(hpd_calls_hist_bucket(low), b) << b;
    ASSERT_EQ(hpd::LatencyHistogram::bucket_of_ticks(low), b) << b;
    ASSERT_EQ(hpd_calls_hist_bucket(hpd_calls_hist_low(b + 1) - 1), b) << b;
    // At most 1/16 wide relative to its start (above the exact buckets).
    if (b >= HPD_CALLS_HIST_SUB) {
      ASSERT_LE((hpd_calls_hist_low(b + 1) - low) * 16, low) << b;
    }
  }
  EXPECT_EQ(hpd_calls_hist_bucket(UINT64_MAX), HPD_CALLS_HIST_BUCKETS - 1);
  hpd::LatencyHistogram h;
  h.ns_per_tick = 1;
  h.buckets = {{hpd_calls_hist_bucket(1000), 90}, {hpd_calls_hist_bucket(5000), 10}};
  const uint64_t p95 = h.quantile_ns(0.95, 5100);
  EXPECT_GE(p95, hpd_calls_hist_low(hpd_calls_hist_bucket(5000)));
  EXPECT_LT(p95, hpd_calls_hist_low(hpd_calls_hist_bucket(5000) + 1));
  EXPECT_LE(h.quantile_ns(0.5, 5100), 1024u);
}

// Which targets hpd's runtime can count: dynamic programs that leave mcount/__fentry__ to libc (or to
// the runtime); not a static program, not one that defines its own hook.
TEST(CallsRuntimeChoice, StaticAndOwnHookProgramsAreRefusedWithTheReason) {
  const std::string dir = HPD_CALLS_FIXTURES;
  EXPECT_EQ(hpd::calls::preload_unusable_reason(dir + "/gcc_fentry"), "");
  EXPECT_EQ(hpd::calls::preload_unusable_reason(dir + "/gcc_nop"), "");
  EXPECT_NE(hpd::calls::preload_unusable_reason(dir + "/static_nop").find("statically linked"),
            std::string::npos);
  EXPECT_NE(hpd::calls::preload_unusable_reason(dir + "/own_mcount").find("defines mcount/__fentry__ itself"),
            std::string::npos);
  EXPECT_NE(hpd::calls::preload_unusable_reason(dir + "/no_such_program"), "");
}

namespace table_checks {

using hpd::UniqueFd;
using hpd::calls::CallCountError;
using hpd::calls::PreloadTable;

// Why adopting `fd` as a handed-over table fails ("" when it succeeds).
std::string adoption_error(int fd) {
  try {
    PreloadTable adopted{UniqueFd(fd)};
    return "";
  } catch (const CallCountError& e) {
    return e.what();
  }
}

// A file under /dev/shm (tmpfs) of `size` bytes, unlinked at once; its descriptor.
int shm_file(uint64_t size) {
  char path[] = "/dev/shm/hpd-table-test-XXXXXX";
  const int fd = ::mkostemp(path, O_CLOEXEC);
  ::unlink(path);
  if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(size)) != 0) return -1;
  return fd;
}

// hpd adopts a client's table only from its descriptor, and only a regular file on tmpfs (a read of
// it cannot block) with this layout's size and header; anything else is refused with the reason.
TEST(CallsTableAdoption, OnlyATmpfsFileWithThisLayoutIsTaken) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  ::close(pipe_fds[1]);
  EXPECT_NE(adoption_error(pipe_fds[0]).find("not a regular file"), std::string::npos);
  EXPECT_NE(adoption_error(::open("/dev/zero", O_RDONLY | O_CLOEXEC)).find("not a regular file"),
            std::string::npos);
  // A regular file elsewhere (the build tree's file system): a FUSE file would be one too.
  char on_disk[] = "hpd-table-test-XXXXXX";
  const int disk_fd = ::mkostemp(on_disk, O_CLOEXEC);
  ASSERT_GE(disk_fd, 0);
  ::unlink(on_disk);
  ASSERT_EQ(::ftruncate(disk_fd, static_cast<off_t>(hpd_calls_file_size())), 0);
  struct statfs fs {};
  ASSERT_EQ(::fstatfs(disk_fd, &fs), 0);
  if (fs.f_type != TMPFS_MAGIC) {
    EXPECT_NE(adoption_error(disk_fd).find("not on tmpfs"), std::string::npos);
  } else {
    ::close(disk_fd);
  }
  EXPECT_NE(adoption_error(shm_file(4096)).find("has 4096 bytes"), std::string::npos);
  EXPECT_NE(adoption_error(shm_file(hpd_calls_file_size())).find("does not hold this hpd's layout"),
            std::string::npos);

  // A table as hpctl makes it is taken, and reads back as nothing counted yet.
  PreloadTable made;
  EXPECT_EQ(adoption_error(::fcntl(made.fd(), F_DUPFD_CLOEXEC, 0)), "");
  PreloadTable adopted{UniqueFd(::fcntl(made.fd(), F_DUPFD_CLOEXEC, 0))};
  hpd::RawProfile profile;
  hpd::CallCountStats stats;
  const std::set<int32_t> followed = {::getpid()};
  EXPECT_TRUE(adopted.read(profile, stats, &followed, PreloadTable::kClientLimits));
  EXPECT_TRUE(profile.call_edges.empty());
  EXPECT_TRUE(stats.messages.empty());
}

// Slots the table gives to processes outside the recording, and edges past the limits, are dropped
// and said; the rest is kept.
TEST(CallsTableAdoption, ForeignSlotsAndEdgesPastTheLimitAreDropped) {
  PreloadTable made;
  const int fd = made.fd();
  hpd_calls_header h{};
  ASSERT_EQ(::pread(fd, &h, sizeof h, 0), static_cast<ssize_t>(sizeof h));
  h.threads_used = 2;
  ASSERT_EQ(::pwrite(fd, &h, sizeof h, 0), static_cast<ssize_t>(sizeof h));
  for (uint32_t t = 0; t < 2; ++t) {
    hpd_calls_thread slot{};
    slot.pid = t == 0 ? 4242 : 1;
    slot.state = 1;
    ASSERT_EQ(
        ::pwrite(fd, &slot, sizeof slot, static_cast<off_t>(hpd_calls_threads_offset() + t * sizeof slot)),
        static_cast<ssize_t>(sizeof slot));
    for (uint32_t i = 0; i < 3; ++i) {
      const hpd_calls_edge e{0x1000u + i, 0x2000u + i, 7, HPD_CALLS_NO_FUNC, 0};
      ASSERT_EQ(::pwrite(fd, &e, sizeof e, static_cast<off_t>(hpd_calls_edges_offset(t) + i * sizeof e)),
                static_cast<ssize_t>(sizeof e));
    }
  }
  hpd::RawProfile profile;
  hpd::CallCountStats stats;
  const std::set<int32_t> followed = {4242};
  ASSERT_TRUE(made.read(profile, stats, &followed, hpd::calls::PreloadTableLimits{2, 2, 2}));
  ASSERT_EQ(profile.call_edges.size(), 2u);  // pid 4242's first two edges
  for (const hpd::RawCallEdge& e : profile.call_edges) {
    EXPECT_EQ(e.pid, 4242);
    EXPECT_EQ(e.count, 7u);
  }
  std::string all;
  for (const std::string& m : stats.messages) all += m + "\n";
  EXPECT_NE(
      all.find(
          "1 thread slot(s) of the runtime's table name processes this recording does not follow (pid 1)"),
      std::string::npos)
      << all;
  EXPECT_NE(all.find("holds more than hpd keeps of it (2 caller->callee edges"), std::string::npos) << all;

  // Truncated by its program: reads short, says so, never faults.
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  hpd::RawProfile cut;
  hpd::CallCountStats cut_stats;
  EXPECT_TRUE(made.read(cut, cut_stats, &followed));
  EXPECT_TRUE(cut.call_edges.empty());
  std::string cut_messages;
  for (const std::string& m : cut_stats.messages) cut_messages += m + "\n";
  EXPECT_NE(cut_messages.find("the runtime's table was truncated"), std::string::npos) << cut_messages;
}

}  // namespace table_checks
