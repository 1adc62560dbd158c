// Pins the Firefox writer's exact bytes for one small profile that reaches every table, column and
// marker kind, so that a restructuring of the writer cannot change its output unnoticed.
// HPD_UPDATE_GOLDEN=1 rewrites the golden file (only for an intended format change).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "hpd/export/firefox.h"
#include "hpd/export/firefox_reader.h"
#include "synthetic_profile.h"

namespace hpd {
namespace {

const char* const kGoldenPath = HPD_EXPORT_TEST_DATA "/firefox-golden-v66.json";
// The golden as hpd wrote it before off-CPU samples got their Idle leaf frame (all the frames of an
// off-CPU sample were then in Idle or Waiting for CPU) and call latency its durations.
const char* const kOldLayoutPath = HPD_EXPORT_TEST_DATA "/firefox-hpd-2026-08-v66.json";

// The synthetic profile plus what it lacks: call edges (recursive, without caller, of a second
// process), a call latency, MIP counts (with and without coverage), per-thread losses, a thread whose
// samples are out of order, a function and a native symbol without a library, a frame without an
// address but with a column, and a sample without a stack.
Profile golden_profile() {
  Profile p = testing::make_synthetic_profile();
  // Interning returns the synthetic profile's own functions (lib 0 is its executable).
  const size_t funcs = p.funcs.size();
  const uint32_t main = p.intern_func("main", "/src/app.cpp", 0);
  const uint32_t compute = p.intern_func("compute(int)", "/src/app.cpp", 0);
  const uint32_t worker = p.intern_func("worker_loop", "/src/worker.cpp", 0);
  EXPECT_EQ(p.funcs.size(), funcs);
  const uint32_t orphan = p.intern_func("jit_stub", "", kNoIndex);
  const uint32_t orphan_symbol = p.intern_native_symbol(kNoIndex, 0x40, 0, "jit_stub");
  Frame jit;
  jit.func = orphan;
  jit.native_symbol = orphan_symbol;
  jit.column = 7;
  jit.line = 3;
  const uint32_t jit_stack = p.intern_stack(kNoIndex, p.intern_frame(jit));

  Thread late;
  late.pid = 300;
  late.tid = 301;
  late.process_name = "other";
  late.start_ns = p.meta.recording.start_mono_ns + 4000000;
  late.lost = LostCounts{2, 0, 1, 4};
  const uint64_t t0 = p.meta.recording.start_mono_ns;
  for (uint64_t offset : {9000000ull, 5000000ull, 7000000ull}) {
    Sample s;
    s.time_ns = t0 + offset;
    s.stack = offset == 7000000ull ? kNoIndex : jit_stack;
    s.cpu_delta_ns = 1000000;
    s.stack_end = offset == 5000000ull ? StackEnd::kTruncated : StackEnd::kFailed;
    late.samples.push_back(s);
  }
  p.threads.push_back(late);

  p.call_edges = {CallEdge{100, main, compute, 1000}, CallEdge{100, compute, compute, 7},
                  CallEdge{100, kNoIndex, main, 1}, CallEdge{200, worker, compute, 5}};
  CallLatency l;
  l.pid = 100;
  l.func = compute;
  l.calls = 1007;
  l.sum_ns = 2014000;
  l.outer_ns = 2000000;
  l.max_ns = 9500;
  l.histogram.ns_per_tick = 0.5;
  l.histogram.buckets = {{LatencyHistogram::bucket_of_ticks(4000), 1007}};
  p.call_latency.push_back(l);
  p.meta.recording.call_counter = "runtime";

  MipCount counted;
  counted.pid = 100;
  counted.func = compute;
  counted.calls = 1007;
  counted.first_call = 2;
  counted.blocks_covered = 5;
  counted.blocks_total = 6;
  counted.time_ns = t0 + 12000000;
  MipCount covered = counted;
  covered.func = worker;
  covered.calls = 1;
  covered.blocks_total = 0;
  covered.counts_calls = false;
  p.mip_counts = {counted, covered};
  return p;
}

std::string firefox_json(const Profile& p) {
  std::ostringstream out;
  write_firefox_json(p, out);
  return out.str();
}

TEST(FirefoxGolden, WriterOutputIsByteForByteTheGolden) {
  const std::string written = firefox_json(golden_profile());
  if (const char* update = std::getenv("HPD_UPDATE_GOLDEN"); update != nullptr && *update == '1') {
    std::ofstream(kGoldenPath, std::ios::binary) << written;
  }
  std::ifstream in(kGoldenPath, std::ios::binary);
  ASSERT_TRUE(in) << "cannot read " << kGoldenPath;
  const std::string golden{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  ASSERT_FALSE(golden.empty());
  if (written == golden) return;
  size_t at = 0;
  while (at < written.size() && at < golden.size() && written[at] == golden[at]) ++at;
  const size_t from = at < 80 ? 0 : at - 80;
  FAIL() << "the output differs from " << kGoldenPath << " at byte " << at << " (of " << written.size()
         << " written, " << golden.size() << " golden)\nwritten: ..." << written.substr(from, 160)
         << "\ngolden:  ..." << golden.substr(from, 160);
}

// The reader reads both layouts into the same Profile, whose off-CPU samples are those of the
// original, with the same frames (functions and categories) from leaf to root.
TEST(FirefoxGolden, ReaderReadsTheOldAndTheNewLayoutAlike) {
  const Profile original = golden_profile();
  const Profile read_new = read_firefox_file(kGoldenPath);
  const Profile read_old = read_firefox_file(kOldLayoutPath);
  EXPECT_EQ(firefox_json(read_old), firefox_json(read_new));
  const auto frames_of = [](const Profile& p, uint32_t stack) {
    std::vector<std::pair<std::string, Category>> out;
    for (; stack != kNoIndex; stack = p.stacks[stack].prefix) {
      const Frame& f = p.frames[p.stacks[stack].frame];
      out.emplace_back(p.func_name(f.func), f.category);
    }
    return out;
  };
  size_t off_cpu = 0;
  for (const Thread& t : original.threads) {
    const auto it = std::find_if(read_new.threads.begin(), read_new.threads.end(),
                                 [&](const Thread& r) { return r.tid == t.tid; });
    ASSERT_NE(it, read_new.threads.end()) << t.tid;
    std::vector<Sample> samples = t.samples;
    std::stable_sort(samples.begin(), samples.end(),
                     [](const Sample& a, const Sample& b) { return a.time_ns < b.time_ns; });
    ASSERT_EQ(it->samples.size(), samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
      EXPECT_EQ(it->samples[i].kind, samples[i].kind) << t.tid << " " << i;
      EXPECT_EQ(it->samples[i].off_cpu_ns, samples[i].off_cpu_ns) << t.tid << " " << i;
      EXPECT_EQ(frames_of(read_new, it->samples[i].stack), frames_of(original, samples[i].stack))
          << t.tid << " " << i;
      off_cpu += is_off_cpu_interval(samples[i].kind);
    }
  }
  EXPECT_GT(off_cpu, 0u);
  EXPECT_EQ(read_new.funcs.size(), original.funcs.size());  // no "[blocked]" function
}

}  // namespace
}  // namespace hpd
