// A long synthetic recording (many samples over few stacks) driven through the builder and the record
// pipeline's flushes, as `hpctl record` wires them: the samples held in memory stay bounded by what
// came since the last flush, and what comes out (the capture read back, the Firefox profile's
// samples, the summary and the report) is what the same recording kept whole in memory gives.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "hpd/capture/capture.h"
#include "hpd/export/report.h"
#include "hpd/session/record_pipeline.h"
#include "hpd/symbolizer/convert.h"
#include "hpd/symbolizer/symbolizer.h"
#include "raw_profile_builder.h"

namespace hpd {
namespace {

constexpr int32_t kPid = 4194001;  // above any default pid_max: no real process to read
constexpr uint64_t kStart = 1'000'000'000;
constexpr uint64_t kInterval = 200'000;  // 4999 Hz
constexpr size_t kSamples = 120'000;
constexpr size_t kFlushEvery = 2'000;  // samples between flushes (250 ms of 4 threads at 4999 Hz: ~5,000)
constexpr uint64_t kRemapAt = kStart + kSamples / 2 * kInterval / 4;

// Few distinct stacks, leaf first, in one executable mapping (0x400000-0x401000) that a second file
// replaces halfway through: the same addresses then resolve to another module.
const std::vector<std::vector<uint64_t>> kUserStacks = {
    {0x400110, 0x400220, 0x400330},
    {0x400140, 0x400220, 0x400330},
    {0x400150, 0x400260, 0x400330},
    {0x400170, 0x400330},
};
const std::vector<uint64_t> kKernelStack = {0xffffffff81000100, 0xffffffff81000200};

// Feeds the same recording into a builder: 4 threads, on- and off-CPU samples with every kind of
// stack end, samples without a stack, a remap halfway, threads that exit with a CPU tail at the
// end. `flush` is called every kFlushEvery samples, as the recorder's ticker would.
void feed_recording(RawProfileBuilder& builder, const std::function<void()>& flush) {
  builder.processes().add_initial_process(
      kPid, parse_maps("00400000-00401000 r-xp 00000000 08:01 5 /nonexistent/flat-memory/prog\n"));
  uint64_t state = 0x243F6A8885A308D3ull;
  bool remapped = false;
  for (size_t i = 0; i < kSamples; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t r = state >> 33;
    const auto tid = static_cast<int32_t>(kPid + static_cast<int32_t>(i % 4));
    const uint64_t time = kStart + i / 4 * kInterval + (r % 997);
    if (!remapped && time >= kRemapAt) {
      builder.on_event(MmapEvent{kPid, kRemapAt, 0x400000, 0x1000, 0, "/nonexistent/flat-memory/other", ""});
      remapped = true;
    }
    SampleEvent e;
    e.time_ns = time;
    e.pid = kPid;
    e.tid = tid;
    e.cpu = static_cast<uint32_t>(r % 2);
    const std::vector<uint64_t>& user = kUserStacks[(r >> 3) % kUserStacks.size()];
    const uint64_t shape = (r >> 7) % 100;
    if (shape < 4) {
      e.kind = SampleKind::kOffCpu;
      e.off_cpu_ns = 1'000 + (r >> 11) % 5'000'000;
      e.kernel = kKernelStack;
      e.user = user;
      e.walk_end = StackEnd::kComplete;
    } else {
      e.cpu_delta_ns = kInterval - 5'000 + (r >> 11) % 10'000;
      if (shape >= 5) e.user = user;  // shape 4: neither user nor kernel frames
      if (shape >= 90) e.kernel = kKernelStack;
      e.walk_end = shape >= 98 ? StackEnd::kFailed : shape >= 96 ? StackEnd::kTruncated : StackEnd::kComplete;
    }
    builder.on_event(e);
    if ((i + 1) % kFlushEvery == 0) flush();
  }
  // Two threads end; their CPU after the last sample comes as a tail (a copy of that sample).
  const uint64_t end = kStart + kSamples / 4 * kInterval + 1'000'000;
  builder.on_event(ExitEvent{kPid, kPid + 2, end, 0});
  builder.on_event(CpuTailEvent{kPid, kPid + 2, end, 77'777});
  builder.on_event(ExitEvent{kPid, kPid + 3, end, 0});
  builder.on_event(CpuTailEvent{kPid, kPid + 3, end, 123'456});
}

RawProfile reference_recording() {
  RawProfile profile;
  RawProfileBuilder builder(profile, BuilderConfig{TrackerConfig{kStart}, false});
  feed_recording(builder, [] {});
  profile.info.start_mono_ns = kStart;
  profile.info.end_mono_ns = kStart + kSamples / 4 * kInterval + 2'000'000;
  profile.info.interval_ns = kInterval;
  profile.info.frequency_hz = 4999;
  return profile;
}

bool same_sample(const RawSample& a, const RawSample& b) {
  return a.time_ns == b.time_ns && a.pid == b.pid && a.tid == b.tid && a.stack == b.stack &&
         a.cpu_delta_ns == b.cpu_delta_ns && a.off_cpu_ns == b.off_cpu_ns && a.cpu == b.cpu &&
         a.kind == b.kind && a.stack_end == b.stack_end;
}

// The first differing sample, or "" when the sequences are equal.
std::string compare_samples(const std::vector<RawSample>& got, const std::vector<RawSample>& want) {
  if (got.size() != want.size())
    return std::to_string(got.size()) + " samples, want " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (!same_sample(got[i], want[i])) return "sample " + std::to_string(i) + " differs";
  }
  return "";
}

// The report as `hpctl record` prints it, every row.
std::string report_text(const Profile& profile) {
  ReportOptions options;
  options.limit = 0;
  options.width = 0;
  std::ostringstream out;
  const Report report = compute_report(profile, options);
  print_report(report, out, options);
  options.sort = ReportSort::kTotalWall;
  print_report(compute_report(profile, options), out, options);
  return out.str();
}

Profile symbolized(const RawProfile& raw) {
  Symbolizer symbolizer;
  ConvertOptions options;
  options.kernel_frames = false;  // kallsyms of this machine would make no difference to the check
  return symbolize_profile(raw, symbolizer, options);
}

struct PipelineRun {
  RecordResult result;
  std::optional<Profile> profile;  // what finish() returned
  session::RecordSummary summary;
  size_t most_samples_held = 0;   // after any flush
  size_t most_capacity_held = 0;  // of RawProfile::samples, after any flush
  size_t most_sums_held = 0;      // RawProfile::released
};

// The recording through RecordingOutput's flushes (as attach() chains them) into `output_path`;
// `names_wanted` as hpctl record passes it (a report is printed).
PipelineRun record_through_pipeline(const std::string& output_path, bool names_wanted = true) {
  PipelineRun run;
  session::RecordRequest request;
  request.output = output_path;
  request.mip = Switch::kOff;
  session::RecordingOutput output(request);
  RecordOptions options;
  output.attach(options);
  RawProfile& profile = run.result.profile;
  RawProfileBuilder builder(profile, BuilderConfig{TrackerConfig{kStart}, false});
  feed_recording(builder, [&] {
    options.on_flush(profile);
    run.most_samples_held = std::max(run.most_samples_held, profile.samples.size());
    run.most_capacity_held = std::max(run.most_capacity_held, profile.samples.capacity());
    run.most_sums_held = std::max(run.most_sums_held, profile.released.size());
  });
  profile.info.start_mono_ns = kStart;
  profile.info.end_mono_ns = kStart + kSamples / 4 * kInterval + 2'000'000;
  profile.info.interval_ns = kInterval;
  profile.info.frequency_hz = 4999;
  run.profile = output.finish(run.result, names_wanted);
  run.summary = session::summarize_recording(run.result, run.profile, output);
  return run;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("flat_memory." + std::to_string(::getpid()) + "." + name))
      .string();
}

// Distinct (thread, stack, kind, stack end, mapping epoch) keys the recording can have: 4 threads,
// 4 user stacks with 3 kernel shapes and 3 stack ends, off-CPU, no-stack, 2 epochs.
constexpr size_t kMostDistinctSums = 4 * (4 * 2 * 3 + 4 + 1) * 2;

TEST(FlatMemory, CaptureRecordingHoldsOnlyWhatCameSinceTheLastFlushAndWritesEverySample) {
  const RawProfile reference = reference_recording();
  ASSERT_EQ(reference.samples.size(), kSamples + 2);  // and the two CPU tails
  const std::string path = temp_path("hpr");
  PipelineRun run = record_through_pipeline(path);

  // Memory: every flush let go of the samples it wrote; what stays is bounded by distinct stacks.
  EXPECT_EQ(run.most_samples_held, 0u);
  EXPECT_LE(run.most_capacity_held, 2 * kFlushEvery);
  EXPECT_LE(run.most_sums_held, kMostDistinctSums);
  EXPECT_GT(run.most_sums_held, 8u);                 // the remap and the kinds were told apart
  EXPECT_EQ(run.result.profile.samples.size(), 0u);  // finish() released the last ones
  EXPECT_EQ(run.result.profile.sample_count(), reference.samples.size());
  EXPECT_EQ(run.result.profile.stacks.size(), reference.stacks.size());

  // The file holds the whole stream: same count, stacks, times, CPU, in the same order.
  const CaptureContents read = read_capture_file(path);
  std::filesystem::remove(path);
  EXPECT_TRUE(read.info.complete);
  EXPECT_EQ(compare_samples(read.profile.samples, reference.samples), "");
  ASSERT_EQ(read.profile.stacks.size(), reference.stacks.size());
  EXPECT_EQ(read.profile.stacks.addresses(), reference.stacks.addresses());
  EXPECT_EQ(read.profile.lost.stack_failures, reference.lost.stack_failures);
  EXPECT_GT(reference.lost.stack_failures, 0u);

  // The summary and the report, from the sums, are those of the whole recording.
  const Profile whole = symbolized(reference);
  EXPECT_EQ(run.summary.samples, reference.samples.size());
  EXPECT_EQ(run.summary.threads, whole.threads.size());
  EXPECT_EQ(run.summary.threads, 4u);
  ASSERT_TRUE(run.profile.has_value());
  for (const Thread& t : run.profile->threads) EXPECT_TRUE(t.samples.empty()) << t.tid;
  const std::string want = report_text(whole);
  // Both modules of the remapped range are in it, each with its own half.
  EXPECT_NE(want.find("prog+0x110"), std::string::npos) << want;
  EXPECT_NE(want.find("other+0x110"), std::string::npos) << want;
  EXPECT_EQ(report_text(*run.profile), want);  // what `hpctl record` prints
  EXPECT_EQ(report_text(symbolized(run.result.profile)), want);
}

// A capture with no report printed (hpctl record --no-report, or hpd, whose client reads the file back
// for its report) is symbolized later, when it is read: finish() symbolizes nothing, and the summary
// still counts the threads the symbolized profile has.
TEST(FlatMemory, CaptureWithoutAReportIsNotSymbolizedAndTheSummaryCountsItsThreads) {
  const RawProfile reference = reference_recording();
  const std::string path = temp_path("hpr");
  PipelineRun run = record_through_pipeline(path, false);
  const CaptureContents read = read_capture_file(path);
  std::filesystem::remove(path);
  EXPECT_TRUE(read.info.complete);
  EXPECT_EQ(compare_samples(read.profile.samples, reference.samples), "");
  EXPECT_FALSE(run.profile.has_value());
  EXPECT_EQ(run.summary.samples, reference.samples.size());
  EXPECT_EQ(run.summary.threads, symbolized(reference).threads.size());
  EXPECT_EQ(run.summary.threads, 4u);
}

TEST(FlatMemory, FirefoxRecordingSpillsItsSamplesAndGetsThemAllBack) {
  const RawProfile reference = reference_recording();
  const std::string path = temp_path("json");
  PipelineRun run = record_through_pipeline(path);
  std::filesystem::remove(path);

  EXPECT_EQ(run.most_samples_held, 0u);
  EXPECT_LE(run.most_capacity_held, 2 * kFlushEvery);
  // Read back from the temporary capture: the profile holds every sample again, as recorded.
  EXPECT_EQ(run.result.profile.sample_offset, 0u);
  EXPECT_TRUE(run.result.profile.released.empty());
  EXPECT_EQ(compare_samples(run.result.profile.samples, reference.samples), "");
  EXPECT_EQ(run.summary.samples, reference.samples.size());
  size_t profile_samples = 0;
  ASSERT_TRUE(run.profile.has_value());
  for (const Thread& t : run.profile->threads) {
    EXPECT_TRUE(t.sample_sums.empty()) << t.tid;
    profile_samples += t.samples.size();
  }
  EXPECT_EQ(profile_samples, reference.samples.size());
  EXPECT_EQ(report_text(symbolized(run.result.profile)), report_text(symbolized(reference)));
}

}  // namespace
}  // namespace hpd
