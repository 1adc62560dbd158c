// pprof and collapsed-stack writers on the synthetic Profile: pprof decodes with protoc against
// profile.proto and holds the expected totals and inline lines; collapsed weights add up.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "hpd/export/collapsed.h"
#include "hpd/export/pprof.h"
#include "pprof_text.h"
#include "synthetic_profile.h"

namespace hpd {
namespace {

using testing::TextNode;

struct Totals {
  uint64_t on = 0, cpu = 0, wall = 0, off = 0;
};

Totals totals_of(const Profile& p) {
  Totals t;
  for (const Thread& th : p.threads) {
    for (const Sample& s : th.samples) {
      t.cpu += s.cpu_delta_ns;  // an off-CPU sample's: what the scheduler charged for a wait
      if (s.kind == SampleKind::kOnCpu) {
        ++t.on;
        t.wall += p.meta.recording.interval_ns;
      } else {
        ++t.off;
        t.wall += s.off_cpu_ns;
      }
    }
  }
  return t;
}

// The synthetic profile plus a sample of its worker that waited 3 ms for a CPU after its wakeup, on the
// stack of its blocked sample, with the frames in the Waiting for CPU category (as the converter makes
// them), and the 40 us of CPU time the scheduler charged the thread for that wait.
Profile with_a_wait() {
  Profile p = testing::make_synthetic_profile();
  Thread& worker = p.threads[1];
  Sample wait = worker.samples[2];  // the blocked one
  std::vector<uint32_t> frames;
  for (const uint32_t f : p.stack_frames_root_first(wait.stack)) frames.push_back(f);
  uint32_t stack = kNoIndex;
  for (const uint32_t f : frames) {
    Frame waiting = p.frames[f];
    waiting.category = Category::kWaitCpu;
    stack = p.intern_stack(stack, p.intern_frame(waiting));
  }
  wait.stack = stack;
  wait.kind = SampleKind::kWaitCpu;
  wait.off_cpu_ns = 3'000'000;
  wait.cpu_delta_ns = 40'000;
  wait.time_ns += 6'000'000;
  worker.samples.push_back(wait);
  return p;
}

class PprofTest : public ::testing::Test {
 protected:
  void decode(const Profile& p, const PprofOptions& options = {}) {
    std::string error;
    ASSERT_TRUE(testing::decode_pprof(encode_pprof(p, options), &root_, &error)) << error;
    for (const TextNode* s : root_.all("string_table")) strings_.push_back(s->value);
    ASSERT_FALSE(strings_.empty());
    EXPECT_EQ(strings_[0], "");
  }
  std::string str(const TextNode& n, const std::string& field) const {
    return strings_.at(static_cast<size_t>(n.num(field)));
  }
  // Sums of each sample value column.
  std::vector<int64_t> value_sums() const {
    std::vector<int64_t> sums(root_.all("sample_type").size(), 0);
    for (const TextNode* s : root_.all("sample")) {
      const auto values = s->all("value");
      EXPECT_EQ(values.size(), sums.size());
      for (size_t i = 0; i < values.size() && i < sums.size(); ++i) sums[i] += std::stoll(values[i]->value);
    }
    return sums;
  }
  // The columns add_timed_calls fills: calls at `calls_column`, latency (its outermost 5 s) last.
  void expect_timed_calls_columns(size_t calls_column) const {
    const auto types = root_.all("sample_type");
    ASSERT_EQ(types.size(), calls_column + 2);
    EXPECT_EQ(str(*types[calls_column], "type"), "calls");
    EXPECT_EQ(str(*types[calls_column], "unit"), "count");
    EXPECT_EQ(str(*types[calls_column + 1], "type"), "latency");
    EXPECT_EQ(str(*types[calls_column + 1], "unit"), "nanoseconds");
    const auto sums = value_sums();
    EXPECT_EQ(sums[calls_column], 1234);
    EXPECT_EQ(sums[calls_column + 1], 5'000'000'000);
  }
  TextNode root_;
  std::vector<std::string> strings_;
};

TEST_F(PprofTest, DecodesWithTheExpectedTypesAndTotals) {
  const Profile p = testing::make_synthetic_profile();
  decode(p);
  const auto types = root_.all("sample_type");
  ASSERT_EQ(types.size(), 3u);  // the synthetic profile has an off-CPU sample: wall is there
  EXPECT_EQ(str(*types[0], "type"), "samples");
  EXPECT_EQ(str(*types[0], "unit"), "count");
  EXPECT_EQ(str(*types[1], "type"), "cpu");
  EXPECT_EQ(str(*types[1], "unit"), "nanoseconds");
  EXPECT_EQ(str(*types[2], "type"), "wall");
  EXPECT_EQ(strings_.at(static_cast<size_t>(root_.num("default_sample_type"))), "cpu");
  EXPECT_EQ(root_.num("period"), 1000000);
  EXPECT_EQ(root_.num("duration_nanos"), 20000000);

  const Totals t = totals_of(p);
  const auto sums = value_sums();
  EXPECT_EQ(sums[0], static_cast<int64_t>(t.on));
  EXPECT_EQ(sums[1], static_cast<int64_t>(t.cpu));
  EXPECT_EQ(sums[2], static_cast<int64_t>(t.wall));
  // Identical (stack, thread) samples were merged: 4 x inline_helper is one pprof sample.
  EXPECT_LT(root_.all("sample").size(), t.on + t.off);
}

TEST_F(PprofTest, TheProgramIsTheFirstMappingAndEveryMappingHasItsOwnRange) {
  decode(testing::make_synthetic_profile());
  const auto mappings = root_.all("mapping");
  ASSERT_GE(mappings.size(), 2u);
  // pprof takes the first mapping for the program: the executable, not a library or the kernel.
  EXPECT_EQ(str(*mappings[0], "filename"), "/usr/bin/myapp");
  std::map<int64_t, std::pair<int64_t, int64_t>> ranges;
  for (const TextNode* m : mappings) {
    const int64_t start = m->num("memory_start"), limit = m->num("memory_limit");
    EXPECT_LT(start, limit) << str(*m, "filename");
    for (const auto& [id, other] : ranges) EXPECT_TRUE(limit <= other.first || start >= other.second) << id;
    ranges[m->num("id")] = {start, limit};
  }
  size_t with_address = 0;
  for (const TextNode* loc : root_.all("location")) {
    if (loc->num("address", -1) < 0 || loc->num("mapping_id") == 0) continue;
    const auto& [start, limit] = ranges.at(loc->num("mapping_id"));
    EXPECT_GE(loc->num("address"), start);
    EXPECT_LT(loc->num("address"), limit);
    ++with_address;
  }
  EXPECT_GT(with_address, 0u);
}

TEST_F(PprofTest, LocationsCarryInlineLinesInnermostFirstAndMappingsBuildIds) {
  decode(testing::make_synthetic_profile());
  std::map<int64_t, std::string> function_names;
  for (const TextNode* f : root_.all("function")) function_names[f->num("id")] = str(*f, "name");
  std::map<int64_t, const TextNode*> mappings;
  for (const TextNode* m : root_.all("mapping")) mappings[m->num("id")] = m;
  bool found_inline = false;
  for (const TextNode* loc : root_.all("location")) {
    const auto lines = loc->all("line");
    ASSERT_FALSE(lines.empty());
    for (const TextNode* l : lines) ASSERT_TRUE(function_names.count(l->num("function_id")));
    if (lines.size() == 2) {
      EXPECT_EQ(function_names[lines[0]->num("function_id")], "std::vector<int>::push_back(int const&)");
      EXPECT_EQ(function_names[lines[1]->num("function_id")], "compute(int)");
      found_inline = true;
      const int64_t mapping = loc->num("mapping_id");
      ASSERT_TRUE(mappings.count(mapping));
      EXPECT_EQ(str(*mappings[mapping], "filename"), "/usr/bin/myapp");
      EXPECT_EQ(str(*mappings[mapping], "build_id"), testing::kSyntheticBuildId);
      EXPECT_EQ(mappings[mapping]->first("has_inline_frames")->value, "true");
    }
  }
  EXPECT_TRUE(found_inline);
  // Every sample's locations exist, leaf first: the first location of a memcpy sample is memcpy.
  std::map<int64_t, const TextNode*> locations;
  for (const TextNode* loc : root_.all("location")) locations[loc->num("id")] = loc;
  bool memcpy_leaf = false;
  for (const TextNode* s : root_.all("sample")) {
    const auto ids = s->all("location_id");
    for (const TextNode* id : ids) ASSERT_TRUE(locations.count(std::stoll(id->value)));
    if (!ids.empty()) {
      const TextNode* leaf = locations[std::stoll(ids[0]->value)];
      memcpy_leaf |=
          function_names[leaf->all("line")[0]->num("function_id")] == "__memcpy_avx_unaligned_erms";
    }
  }
  EXPECT_TRUE(memcpy_leaf);
}

TEST_F(PprofTest, CallEdgesAddACallsColumn) {
  Profile p = testing::make_synthetic_profile();
  p.call_edges.push_back(CallEdge{1, 1, 2, 1234});
  p.call_edges.push_back(CallEdge{1, kNoIndex, 3, 6});
  decode(p);
  const auto types = root_.all("sample_type");
  ASSERT_EQ(types.size(), 4u);
  EXPECT_EQ(str(*types[3], "type"), "calls");
  const auto sums = value_sums();
  EXPECT_EQ(sums[3], 1240);
  EXPECT_EQ(sums[0], static_cast<int64_t>(totals_of(p).on));  // edges add no samples
}

// 1234 calls of func 2 from func 1, all timed at 5 ms, 1000 of them outermost (5 s in all), the
// longest 9 ms.
void add_timed_calls(Profile& p) {
  p.call_edges.push_back(CallEdge{1, 1, 2, 1234});
  CallLatency l;
  l.pid = 1;
  l.func = 2;
  l.calls = 1234;
  l.sum_ns = 1234 * 5'000'000ull;
  l.outer_ns = 1000 * 5'000'000ull;
  l.max_ns = 9'000'000;
  l.histogram.ns_per_tick = 1.0;
  l.histogram.buckets = {{LatencyHistogram::bucket_of_ticks(5'000'000), 1234}};
  p.call_latency.push_back(l);
}

// The runtime's latency: a `latency` column holding each function's total (outermost) time, and the
// per-call figures as labels; the calls column stays the edges' exact counts.
TEST_F(PprofTest, CallLatencyAddsALatencyColumnAndPerCallLabels) {
  Profile p = testing::make_synthetic_profile();
  add_timed_calls(p);
  decode(p);
  expect_timed_calls_columns(3);
  std::map<std::string, std::pair<int64_t, std::string>> labels;
  for (const TextNode* s : root_.all("sample")) {
    if (std::stoll(s->all("value")[4]->value) == 0) continue;
    for (const TextNode* lab : s->all("label"))
      labels[str(*lab, "key")] = {lab->num("num"), lab->first("num_unit") ? str(*lab, "num_unit") : ""};
  }
  EXPECT_EQ(labels["timed_calls"].first, 1234);
  EXPECT_EQ(labels["avg"], (std::pair<int64_t, std::string>{5'000'000, "nanoseconds"}));
  // p95 falls in 5 ms's bucket (16 per power of two: within 1/16 of it), at most the maximum.
  EXPECT_GE(labels["p95"].first, 5'000'000 - 5'000'000 / 16);
  EXPECT_LE(labels["p95"].first, 5'000'000 + 5'000'000 / 16);
  EXPECT_EQ(labels["max"].first, 9'000'000);
}

// Without off-CPU samples there is no wall column: calls and latency move up one, and each value
// still lands under its own type.
TEST_F(PprofTest, WithoutOffCpuSamplesCallsAndLatencyMoveUpAColumn) {
  Profile p = testing::make_synthetic_profile();
  for (Thread& t : p.threads)
    std::erase_if(t.samples, [](const Sample& s) { return is_off_cpu_interval(s.kind); });
  add_timed_calls(p);
  decode(p);
  expect_timed_calls_columns(2);
  const auto sums = value_sums();
  EXPECT_EQ(sums[0], static_cast<int64_t>(totals_of(p).on));
  EXPECT_EQ(sums[1], static_cast<int64_t>(totals_of(p).cpu));
}

TEST_F(PprofTest, WithoutOffCpuSamplesThereIsNoWallColumn) {
  Profile p = testing::make_synthetic_profile();
  for (Thread& t : p.threads) {
    std::erase_if(t.samples, [](const Sample& s) { return s.kind == SampleKind::kOffCpu; });
  }
  decode(p, PprofOptions{false});
  EXPECT_EQ(root_.all("sample_type").size(), 2u);
  for (const TextNode* s : root_.all("sample")) EXPECT_TRUE(s->all("label").empty());
}

// Off-CPU samples say why the thread was off the CPU in an off_cpu label; wall counts both kinds.
TEST_F(PprofTest, OffCpuSamplesAreLabelledBlockedOrWaitingForCpu) {
  const Profile p = with_a_wait();
  decode(p, PprofOptions{false});
  std::map<std::string, int64_t> wall_by_label;  // "" = no off_cpu label
  const size_t wall = 2;
  for (const TextNode* s : root_.all("sample")) {
    std::string why;
    for (const TextNode* l : s->all("label")) {
      if (str(*l, "key") == "off_cpu") why = str(*l, "str");
    }
    wall_by_label[why] += std::stoll(s->all("value").at(wall)->value);
  }
  EXPECT_EQ(wall_by_label["blocked"], 5'000'000);
  EXPECT_EQ(wall_by_label["waiting for CPU"], 3'000'000);
  EXPECT_EQ(value_sums()[wall], static_cast<int64_t>(totals_of(p).wall));
}

// The CPU time the scheduler charged a thread for its wait after a wakeup is CPU of the waiting
// sample's stack: in the cpu column, not in the samples column.
TEST_F(PprofTest, AWaitsChargedCpuIsInTheCpuColumn) {
  const Profile p = with_a_wait();
  decode(p, PprofOptions{false});
  const size_t samples = 0, cpu = 1;
  int64_t waiting_cpu = 0, waiting_samples = 0;
  for (const TextNode* s : root_.all("sample")) {
    for (const TextNode* l : s->all("label")) {
      if (str(*l, "key") != "off_cpu" || str(*l, "str") != "waiting for CPU") continue;
      waiting_cpu += std::stoll(s->all("value").at(cpu)->value);
      waiting_samples += std::stoll(s->all("value").at(samples)->value);
    }
  }
  EXPECT_EQ(waiting_cpu, 40'000);
  EXPECT_EQ(waiting_samples, 0);
  const Totals t = totals_of(p);
  EXPECT_EQ(value_sums()[cpu], static_cast<int64_t>(t.cpu));
  EXPECT_EQ(value_sums()[samples], static_cast<int64_t>(t.on));
}

TEST(PprofErrors, InconsistentProfileThrows) {
  Profile p = testing::make_synthetic_profile();
  p.stacks.push_back(Stack{kNoIndex, 99999, false});
  EXPECT_THROW(encode_pprof(p), std::runtime_error);
}

std::map<std::string, uint64_t> collapsed(const Profile& p, const CollapsedOptions& options) {
  std::ostringstream out;
  write_collapsed(p, out, options);
  std::map<std::string, uint64_t> lines;
  std::istringstream in(out.str());
  std::string line;
  while (std::getline(in, line)) {
    const size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    EXPECT_FALSE(lines.count(line.substr(0, space))) << "duplicate stack " << line;
    lines[line.substr(0, space)] = std::stoull(line.substr(space + 1));
  }
  return lines;
}

uint64_t sum(const std::map<std::string, uint64_t>& lines) {
  uint64_t s = 0;
  for (const auto& [stack, w] : lines) s += w;
  return s;
}

TEST(Collapsed, WeightsAddUpToTheTotals) {
  const Profile p = testing::make_synthetic_profile();
  const Totals t = totals_of(p);
  const auto samples = collapsed(p, {});
  EXPECT_EQ(sum(samples), t.on);
  EXPECT_EQ(samples.at("main;compute(int);std::vector<int>::push_back(int const&)"), 4u);
  EXPECT_EQ(samples.at("[unknown]"), 1u);  // the sample without a stack
  EXPECT_EQ(samples.at("worker_loop;__memcpy_avx_unaligned_erms"), 3u);
  EXPECT_EQ(sum(collapsed(p, {CollapsedWeight::kCpu, false})), t.cpu);
  const auto wall = collapsed(p, {CollapsedWeight::kWall, false});
  EXPECT_EQ(sum(wall), t.wall);
  EXPECT_EQ(wall.at("worker_loop;futex_wait"), 5000000u);
  for (const auto& [stack, w] : collapsed(p, {CollapsedWeight::kSamples, true})) {
    EXPECT_TRUE(stack.rfind("myapp;", 0) == 0) << stack;
  }
}

// With wall weights, a stack that waited for a CPU ends in a [waiting for CPU] frame: its leaf is where
// the thread was preempted, no cause; the same stack blocked keeps its own line.
TEST(Collapsed, StacksThatWaitedForTheCpuSaySo) {
  const Profile p = with_a_wait();
  const auto wall = collapsed(p, {CollapsedWeight::kWall, false});
  EXPECT_EQ(wall.at("worker_loop;futex_wait"), 5'000'000u);
  EXPECT_EQ(wall.at("worker_loop;futex_wait;[waiting for CPU]"), 3'000'000u);
  EXPECT_EQ(sum(wall), totals_of(p).wall);
  EXPECT_EQ(sum(collapsed(p, {})), totals_of(p).on);  // sample weights: on-CPU only
  // CPU weights: the wait's charged CPU on its own line.
  const auto cpu = collapsed(p, {CollapsedWeight::kCpu, false});
  EXPECT_EQ(cpu.at("worker_loop;futex_wait;[waiting for CPU]"), 40'000u);
  EXPECT_EQ(sum(cpu), totals_of(p).cpu);
}

TEST(Collapsed, PerProcessPrefixesTheProcessAndMergesItsThreads) {
  const Profile p = testing::make_synthetic_profile();
  const std::string prefix = "myapp (" + std::to_string(p.threads.at(0).pid) + ");";
  CollapsedOptions options;
  options.per_process = true;
  const auto lines = collapsed(p, options);
  const auto plain = collapsed(p, {});
  EXPECT_EQ(sum(lines), sum(plain));
  // The same stacks as without a prefix: both threads' samples in one process root.
  ASSERT_EQ(lines.size(), plain.size());
  for (const auto& [stack, w] : plain) EXPECT_EQ(lines.at(prefix + stack), w) << stack;
}

TEST(Collapsed, SeparatorsInNamesAreReplaced) {
  Profile p = testing::make_synthetic_profile();
  p.strings.intern("unused");
  for (Func& f : p.funcs) {
    if (p.strings[f.name] == "main") f.name = p.strings.intern("odd;name\nwith break");
  }
  const auto lines = collapsed(p, {});
  EXPECT_TRUE(lines.count("odd:name with break;compute(int)"));
}

}  // namespace
}  // namespace hpd
