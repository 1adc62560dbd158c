// A long synthetic recording (many samples over few stacks) driven through the builder and the record
// pipeline's flushes, as `hpctl record` wires them: the samples held in memory stay bounded by what
// came since the last flush, and what comes out (the capture read back, the Firefox profile's
// samples, the summary and the report) is what the same recording kept whole in memory gives.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
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
#include "recording_common.h"

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
      // Late timers: a sample standing for 1.6 intervals (one not taken) and one for 0.6 (none), on the
      // same stacks: summed, their CPU would call for fewer samples not taken than they are.
      if (shape >= 50 && shape < 53) e.cpu_delta_ns = kInterval * 16 / 10;
      if (shape >= 53 && shape < 56) e.cpu_delta_ns = kInterval * 6 / 10;
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

// What the recorder states of the recording before its first sample.
void describe(RecordingInfo& info) {
  info.start_mono_ns = kStart;
  info.interval_ns = kInterval;
  info.frequency_hz = 4999;
}

RawProfile reference_recording() {
  RawProfile profile;
  describe(profile.info);
  RawProfileBuilder builder(profile, BuilderConfig{TrackerConfig{kStart}, false});
  feed_recording(builder, [] {});
  profile.info.end_mono_ns = kStart + kSamples / 4 * kInterval + 2'000'000;
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
  size_t bound_attached = 0;      // RecordOptions::stack_memory_bound as attach() set it
  // RawProfile::stack_memory_bytes after any flush, and after the stacks were let go when due.
  size_t most_stack_bytes = 0;
  size_t most_stack_bytes_kept = 0;
};

using Feed = void (*)(RawProfileBuilder&, const std::function<void()>&);

// The recording `feed` gives through RecordingOutput's flushes (as attach() chains them) into
// `output_path`, each followed by what the recorder's ticker does after it (released_stacks_due);
// `names_wanted` as hpctl record passes it (a report is printed). `stack_memory_bound`: instead of
// attach()'s (kStackMemoryBound, when it sets one), unless 0.
// `end_ns`: when the recording ended (RecordingInfo::end_mono_ns).
PipelineRun record_through_pipeline(const std::string& output_path, bool names_wanted = true,
                                    Feed feed = feed_recording, size_t stack_memory_bound = 0,
                                    uint64_t end_ns = kStart + kSamples / 4 * kInterval + 2'000'000) {
  PipelineRun run;
  session::RecordRequest request;
  request.output = output_path;
  request.mip = Switch::kOff;
  session::RecordingOutput output(request);
  RecordOptions options;
  output.attach(options, names_wanted);
  run.bound_attached = options.stack_memory_bound;
  if (stack_memory_bound != 0) options.stack_memory_bound = stack_memory_bound;
  RawProfile& profile = run.result.profile;
  describe(profile.info);
  RawProfileBuilder builder(profile, BuilderConfig{TrackerConfig{kStart}, false});
  feed(builder, [&] {
    options.on_flush(profile);
    run.most_stack_bytes = std::max(run.most_stack_bytes, profile.stack_memory_bytes());
    if (released_stacks_due(options, profile)) builder.forget_released_stacks();
    run.most_stack_bytes_kept = std::max(run.most_stack_bytes_kept, profile.stack_memory_bytes());
    run.most_samples_held = std::max(run.most_samples_held, profile.samples.size());
    run.most_capacity_held = std::max(run.most_capacity_held, profile.samples.capacity());
    run.most_sums_held = std::max(run.most_sums_held, profile.released.size());
  });
  profile.info.end_mono_ns = end_ns;
  run.profile = output.finish(run.result);
  run.summary = session::summarize_recording(run.result, run.profile, output);
  return run;
}

// The capture at `path` (removed then), checked against the recording kept whole in memory: complete,
// the same samples in the same order, the same stacks in the same order.
CaptureContents read_back(const std::string& path, const RawProfile& reference) {
  CaptureContents read = read_capture_file(path);
  std::filesystem::remove(path);
  EXPECT_TRUE(read.info.complete);
  EXPECT_EQ(compare_samples(read.profile.samples, reference.samples), "");
  EXPECT_EQ(read.profile.stacks.size(), reference.stacks.size());
  EXPECT_EQ(read.profile.stacks.addresses(), reference.stacks.addresses());
  return read;
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
  const CaptureContents read = read_back(path, reference);
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
  // The samples not taken, counted sample by sample, from the sums as from the samples.
  EXPECT_NE(want.find("samples were not taken"), std::string::npos) << want;
  EXPECT_EQ(samples_not_taken_note(run.result.profile), samples_not_taken_note(reference));
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

// A whole machine's recording meets new stacks all the time (a build's compilers): kDistinctStacks of
// them, each met again now and then, over kMachineSamples samples of 4 threads, one of which exits
// halfway with its exit stack waiting for its CPU tail. Stacks of 3 to 7 frames in the program's
// mapping, on- and off-CPU samples with every stack end, kernel frames under the off-CPU ones of the
// first half.
constexpr size_t kMachineSamples = 200'000;
constexpr uint32_t kDistinctStacks = 20'000;
constexpr uint64_t kMachineEnd = kStart + kMachineSamples / 4 * kInterval + 2'000'000;
const std::vector<uint64_t> kExitStack = {0x400ff0, 0x400fe0, 0x400fd0};

void feed_machine(RawProfileBuilder& builder, const std::function<void()>& flush) {
  builder.processes().add_initial_process(
      kPid, parse_maps("00400000-00401000 r-xp 00000000 08:01 5 /nonexistent/flat-memory/prog\n"));
  const int32_t exiting = kPid + 3;
  const uint64_t exit_ns = kStart + kMachineSamples / 2 / 4 * kInterval;
  bool exited = false;
  std::vector<uint64_t> user;
  for (size_t i = 0; i < kMachineSamples; ++i) {
    const uint64_t time = kStart + i / 4 * kInterval;
    auto tid = static_cast<int32_t>(kPid + static_cast<int32_t>(i % 4));
    if (tid == exiting && time >= exit_ns) {
      if (!exited) {
        SampleEvent last;  // where it exited: a stack of its own, held by the builder until the tail
        last.time_ns = exit_ns;
        last.pid = kPid;
        last.tid = exiting;
        last.at_exit = true;
        last.user = kExitStack;
        last.walk_end = StackEnd::kComplete;
        builder.on_event(last);
        builder.on_event(ExitEvent{kPid, exiting, exit_ns, 0});
        exited = true;
      }
      tid = kPid;
    }
    const auto k = static_cast<uint32_t>((i * 2654435761u) % kDistinctStacks);
    user.assign({0x400010 + (k % 250) * 16, 0x400a00 + (k / 250) * 16});
    for (uint32_t d = 0; d < 1 + k % 5; ++d) user.push_back(0x400f00 + d * 16);
    SampleEvent e;
    e.time_ns = time;
    e.pid = kPid;
    e.tid = tid;
    e.cpu = static_cast<uint32_t>(i % 2);
    e.user = user;
    const size_t shape = i % 100;
    if (shape < 5) {
      e.kind = SampleKind::kOffCpu;
      e.off_cpu_ns = 1'000 + i % 3'000'000;
      // Kernel frames in the first half only: the stacks that hold them are let go long before the end.
      if (i < kMachineSamples / 2) e.kernel = kKernelStack;
    } else {
      e.cpu_delta_ns = kInterval - 5'000 + i % 10'000;
    }
    e.walk_end = shape >= 98 ? StackEnd::kFailed : shape >= 96 ? StackEnd::kTruncated : StackEnd::kComplete;
    builder.on_event(e);
    if ((i + 1) % kFlushEvery == 0) flush();
  }
  builder.on_event(CpuTailEvent{kPid, exiting, exit_ns, 55'555});
}

RawProfile reference_machine() {
  RawProfile profile;
  describe(profile.info);
  RawProfileBuilder builder(profile, BuilderConfig{TrackerConfig{kStart}, false});
  feed_machine(builder, [] {});
  profile.info.end_mono_ns = kMachineEnd;
  return profile;
}

// A capture not symbolized at the end (hpctl record --no-report, hpd) lets go of the stacks only the
// released samples' sums name once they take more than the bound: its memory stays bounded however
// many distinct stacks it meets, and the capture still holds every sample with its own stack, the
// summary still says what the whole recording's says.
TEST(FlatMemory, CaptureNotSymbolizedAtTheEndLetsGoOfItsStacksAndLosesNone) {
  const RawProfile reference = reference_machine();
  ASSERT_EQ(reference.samples.size(), kMachineSamples + 1);  // and the exiting thread's CPU tail
  ASSERT_GE(reference.stacks.size(), kDistinctStacks);
  constexpr size_t kBound = 512 << 10;
  // Without the bound, the stacks would use about three times it (the sums, by thread only, take
  // little).
  const std::string unbounded_path = temp_path("unbounded.hpr");
  PipelineRun unbounded = record_through_pipeline(unbounded_path, false, feed_machine, SIZE_MAX, kMachineEnd);
  std::filesystem::remove(unbounded_path);
  EXPECT_GT(unbounded.most_stack_bytes, 2 * kBound);
  EXPECT_EQ(unbounded.result.profile.stack_generation, 0u);

  const std::string path = temp_path("bounded.hpr");
  PipelineRun run = record_through_pipeline(path, false, feed_machine, kBound, kMachineEnd);
  EXPECT_EQ(run.bound_attached, session::kStackMemoryBound);
  // Bounded: at most the bound and what one flush's samples (2,000, each a new stack at most) add.
  const RawProfile& profile = run.result.profile;
  EXPECT_GE(profile.stack_generation, 4u);
  EXPECT_TRUE(profile.released_stacks_forgotten);
  EXPECT_LE(run.most_stack_bytes_kept, kBound);
  EXPECT_LE(run.most_stack_bytes, kBound + kFlushEvery * 200);
  EXPECT_LT(profile.stacks.size(), reference.stacks.size() / 4);

  // The capture holds every sample, each with the stack it was taken with (the table read back is
  // the reference's, in its order: a stack written again in a later generation is one stack).
  const CaptureContents read = read_back(path, reference);
  EXPECT_EQ(read.info.stack_generations, profile.stack_generation);
  ASSERT_EQ(read.profile.stacks.size(), reference.stacks.size());
  const RawSample& tail = read.profile.samples.back();
  EXPECT_EQ(tail.tid, kPid + 3);
  EXPECT_EQ(tail.cpu_delta_ns, 55'555u);
  ASSERT_LT(tail.stack, read.profile.stacks.size());
  EXPECT_TRUE(std::ranges::equal(read.profile.stacks.user_frames(tail.stack), kExitStack));
  EXPECT_EQ(report_text(symbolized(read.profile)), report_text(symbolized(reference)));
  // The kernel symbols kept with the capture name the kernel frames of every generation's stacks.
  EXPECT_EQ(profile.kernel_addresses(), reference.kernel_addresses());
  EXPECT_EQ(profile.kernel_addresses(), kKernelStack);
  KernelSymbols kallsyms;
  ASSERT_TRUE(
      kallsyms.load_text("ffffffff81000000 T _stext\nffffffff81000080 T schedule\n"
                         "ffffffff81000180 T do_syscall_64\nffffffff81001000 T _etext\n"));
  EXPECT_EQ(kernel_symbol_lines(profile, kallsyms), kernel_symbol_lines(reference, kallsyms));
  EXPECT_NE(kernel_symbol_lines(profile, kallsyms).find("do_syscall_64"), std::string::npos);

  // The summary, from the sums without their stacks, is the one of the recording that kept them.
  EXPECT_FALSE(run.profile.has_value());
  EXPECT_EQ(run.summary.samples, reference.samples.size());
  EXPECT_EQ(run.summary.samples, unbounded.summary.samples);
  EXPECT_EQ(run.summary.threads, 4u);
  EXPECT_EQ(run.summary.threads, unbounded.summary.threads);
  EXPECT_EQ(run.summary.seconds, unbounded.summary.seconds);
  EXPECT_EQ(run.summary.notes, unbounded.summary.notes);
  bool completeness_said = false;
  for (const std::string& note : run.summary.notes)
    completeness_said |= note.find("on-CPU") != std::string::npos;
  EXPECT_TRUE(completeness_said) << ::testing::PrintToString(run.summary.notes);
  // Nothing may make a profile of sums that no longer say where their samples were.
  EXPECT_THROW(symbolized(profile), std::logic_error);
}

// A capture symbolized at the end (its report printed) and a Firefox profile keep their stacks.
TEST(FlatMemory, RecordingsSymbolizedAtTheEndKeepTheirStacks) {
  const std::string capture_path = temp_path("report.hpr");
  PipelineRun with_report = record_through_pipeline(capture_path, true, feed_machine, 0, kMachineEnd);
  std::filesystem::remove(capture_path);
  EXPECT_EQ(with_report.bound_attached, 0u);
  EXPECT_EQ(with_report.result.profile.stack_generation, 0u);
  const std::string firefox_path = temp_path("firefox.json");
  PipelineRun firefox = record_through_pipeline(firefox_path, false, feed_machine, 0, kMachineEnd);
  std::filesystem::remove(firefox_path);
  EXPECT_EQ(firefox.bound_attached, 0u);
  EXPECT_EQ(firefox.result.profile.stack_generation, 0u);
}

}  // namespace
}  // namespace hpd
