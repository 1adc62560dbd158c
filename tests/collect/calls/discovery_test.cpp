// Discovery of mcount / __fentry__ instrumentation on the fixture ELF files: sites found, probe point chosen.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

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
