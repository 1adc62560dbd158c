// Tests of the report: exact exclusive/inclusive attribution, wall-clock view, layout, JSON.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "hpd/export/report.h"
#include "hpd/model/validate.h"
#include "synthetic_profile.h"

namespace hpd {
namespace {

using nlohmann::json;

// 10 samples with a known split, 1 ms CPU each except main->D (0.5 ms):
//   4 x main->B->C, 3 x main->B, 2 x main->D, 1 x main->B->B (recursion)
// self:  B 4 (40%), C 4 (40%), D 2 (20%), main 0
// total: main 10 (100%), B 8 (80%, the recursive sample once), C 4 (40%), D 2 (20%)
Profile make_split_profile() {
  Profile p;
  p.meta.recording.interval_ns = 1000000;
  Lib lib;
  lib.name = "app";
  lib.path = "/bin/app";
  const uint32_t l = p.intern_lib(lib);
  const auto frame = [&](const char* name, int64_t address) {
    Frame f;
    f.func = p.intern_func(name, "", l);
    f.lib = l;
    f.address = address;
    return p.intern_frame(f);
  };
  const uint32_t main = p.intern_stack(kNoIndex, frame("main", 0x10));
  const uint32_t b = p.intern_stack(main, frame("B", 0x20));
  const uint32_t bc = p.intern_stack(b, frame("C", 0x30));
  const uint32_t d = p.intern_stack(main, frame("D", 0x40));
  const uint32_t bb = p.intern_stack(b, frame("B", 0x24));
  Thread t;
  t.pid = 7;
  t.tid = 7;
  t.name = "app";
  uint64_t time = 0;
  const auto add = [&](uint32_t stack, int count, uint64_t cpu) {
    for (int i = 0; i < count; ++i) {
      Sample s;
      s.time_ns = time += 1000000;
      s.stack = stack;
      s.cpu_delta_ns = cpu;
      t.samples.push_back(s);
    }
  };
  add(bc, 4, 1000000);
  add(b, 3, 1000000);
  add(d, 2, 500000);
  add(bb, 1, 1000000);
  p.threads.push_back(t);
  return p;
}

const ReportRow& row(const Report& r, const std::string& name) {
  for (const ReportRow& x : r.rows) {
    if (x.name == name) return x;
  }
  throw std::runtime_error("no row " + name);
}

TEST(Report, ExactExclusiveAndInclusiveSplit) {
  const Report r = compute_report(make_split_profile(), ReportOptions{});
  EXPECT_EQ(r.totals.samples, 10u);
  EXPECT_EQ(r.totals.threads, 1u);
  EXPECT_EQ(r.totals.processes, 1u);
  EXPECT_EQ(r.totals.cpu_ns, 9000000u);
  ASSERT_EQ(r.rows.size(), 4u);

  // Sorted by self; B and C tie at 4 and B's larger total breaks the tie.
  EXPECT_EQ(r.rows[0].name, "B");
  EXPECT_EQ(r.rows[1].name, "C");
  EXPECT_EQ(r.rows[2].name, "D");
  EXPECT_EQ(r.rows[3].name, "main");

  const ReportRow& b = row(r, "B");
  EXPECT_EQ(b.self_samples, 4u);
  EXPECT_EQ(b.total_samples, 8u);
  EXPECT_DOUBLE_EQ(b.self_percent, 40.0);
  EXPECT_DOUBLE_EQ(b.total_percent, 80.0);
  EXPECT_EQ(b.self_cpu_ns, 4000000u);
  EXPECT_EQ(b.total_cpu_ns, 8000000u);
  EXPECT_EQ(b.library, "app");

  const ReportRow& c = row(r, "C");
  EXPECT_EQ(c.self_samples, 4u);
  EXPECT_EQ(c.total_samples, 4u);
  EXPECT_DOUBLE_EQ(c.total_percent, 40.0);

  const ReportRow& d = row(r, "D");
  EXPECT_DOUBLE_EQ(d.self_percent, 20.0);
  EXPECT_EQ(d.self_cpu_ns, 1000000u);

  const ReportRow& main = row(r, "main");
  EXPECT_EQ(main.self_samples, 0u);
  EXPECT_EQ(main.total_samples, 10u);
  EXPECT_DOUBLE_EQ(main.total_percent, 100.0);
  EXPECT_EQ(main.total_cpu_ns, 9000000u);

  // Without off-CPU samples the wall-clock view is samples x interval.
  EXPECT_EQ(r.totals.wall_ns, 10000000u);
  EXPECT_EQ(b.total_wall_ns, 8000000u);
  EXPECT_DOUBLE_EQ(b.total_wall_percent, 80.0);

  ReportOptions by_total;
  by_total.sort = ReportSort::kTotal;
  const Report t = compute_report(make_split_profile(), by_total);
  EXPECT_EQ(t.rows[0].name, "main");
  EXPECT_EQ(t.rows[1].name, "B");
  EXPECT_EQ(t.rows[2].name, "C");
  EXPECT_EQ(t.rows[3].name, "D");
}

// A recording's duration counts from its first on-CPU sample; the time from the request to it, when
// known, is stated apart (text and JSON), and nothing is stated when it is not.
TEST(Report, DurationCountsFromTheFirstSampleAndTheUnsampledStartIsStated) {
  Profile p = testing::make_synthetic_profile();
  RecordingInfo& info = p.meta.recording;
  info.first_sample_mono_ns = info.start_mono_ns + 123457;  // the first sample of make_synthetic_profile
  info.requested_mono_ns = info.start_mono_ns - 3000000;
  ReportOptions options;
  const Report r = compute_report(p, options);
  EXPECT_EQ(r.totals.duration_ns, 20000000u - 123457u);
  EXPECT_TRUE(r.totals.unsampled_start_known);
  EXPECT_EQ(r.totals.unsampled_start_ns, 3123457u);
  std::ostringstream text;
  print_report(r, text, options);
  EXPECT_NE(text.str().find("duration 19.9 ms"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("First sample 3.1 ms after the request"), std::string::npos) << text.str();
  std::ostringstream doc;
  print_report_json(r, doc, options);
  EXPECT_EQ(json::parse(doc.str())["totals"]["unsampled_start_ns"], 3123457u) << doc.str();

  info.requested_mono_ns = 0;  // unknown (an older file)
  const Report unknown = compute_report(p, options);
  EXPECT_FALSE(unknown.totals.unsampled_start_known);
  std::ostringstream unknown_text;
  print_report(unknown, unknown_text, options);
  EXPECT_EQ(unknown_text.str().find("First sample"), std::string::npos) << unknown_text.str();
}

// The hypervisor's steal during the recording: the JSON has it whenever it is known; the header states
// it, with what it does to the samples, from 0.5% of the recording's CPU time (length x CPUs) on.
TEST(Report, TheHypervisorsStealIsStatedWithWhatItDoesToTheSamples) {
  Profile p = testing::make_synthetic_profile();
  RecordingInfo& info = p.meta.recording;
  ASSERT_EQ(info.end_mono_ns - info.start_mono_ns, 20000000u);
  info.logical_cpus = 2;
  info.host_steal_known = true;
  info.host_steal_ns = 4000000;  // 10% of 2 CPUs x 20 ms
  ReportOptions options;
  const Report r = compute_report(p, options);
  EXPECT_TRUE(r.totals.host_steal_known);
  std::ostringstream text;
  print_report(r, text, options);
  const std::string said = text.str();
  // Wrapped at the width, not cut: its lines, joined again, are the sentence.
  const size_t from = said.find("Note: ");
  ASSERT_NE(from, std::string::npos) << said;
  std::string note;
  for (size_t at = from, end; at < said.size(); at = end + 1) {
    end = std::min(said.find('\n', at), said.size());
    const std::string line = said.substr(at, end - at);
    if (at != from && line.rfind("  ", 0) != 0) break;
    EXPECT_LE(line.size(), options.width) << line;
    note += at == from ? line : " " + line.substr(2);
  }
  EXPECT_EQ(note,
            "Note: the hypervisor took 10.0% of this machine's CPU time during the recording (4 ms of the 2 "
            "CPUs' 20 ms); the sampling timer counts it as the running threads' time and their CPU clocks do "
            "not, so samples may exceed the threads' CPU time by up to that much")
      << said;
  // Any width the command line takes (print_report makes it 60 at least) ends, and no line of the note
  // is longer than that.
  for (const size_t narrow : {1, 2, 3, 5, 8, 9, 12}) {
    ReportOptions o = options;
    o.width = narrow;
    std::ostringstream out;
    print_report(r, out, o);
    const std::string all = out.str();
    for (size_t at = all.find("Note: "), end; at != std::string::npos && at < all.size(); at = end + 1) {
      end = std::min(all.find('\n', at), all.size());
      if (all.compare(at, 3, "CPU") == 0) break;  // the next header line
      EXPECT_LE(end - at, std::max<size_t>(narrow, 60)) << all.substr(at, end - at);
    }
  }
  std::ostringstream doc;
  print_report_json(r, doc, options);
  EXPECT_EQ(json::parse(doc.str())["totals"]["host_steal_ns"], 4000000u) << doc.str();

  info.host_steal_ns = 100000;  // 0.25%: in the JSON, not in the header
  std::ostringstream small;
  print_report(compute_report(p, options), small, options);
  EXPECT_EQ(small.str().find("hypervisor"), std::string::npos) << small.str();
  info.host_steal_known = false;  // unknown (an older file): null
  std::ostringstream unknown;
  print_report_json(compute_report(p, options), unknown, options);
  EXPECT_TRUE(json::parse(unknown.str())["totals"]["host_steal_ns"].is_null()) << unknown.str();
}

// Samples the timer did not take: a sample whose thread's CPU clock ran several intervals stands for
// the others. The header says so from 1% of the samples, the JSON counts it, the Firefox meta carries
// the same sentence; a recording sampled per CPU does not count it (null).
TEST(Report, SamplesNotTakenAreCountedFromTheSamplesCpuTime) {
  Profile p = testing::make_synthetic_profile();
  ReportOptions options;
  const Report before = compute_report(p, options);
  // Its samples stand for 3 intervals more than they are (fewer than 5: not said).
  const uint64_t known = before.totals.not_taken.samples;
  EXPECT_EQ(known, 3u);
  EXPECT_TRUE(before.totals.not_taken_note.empty());
  const uint64_t cpu_before = before.totals.cpu_ns;
  // The first on-CPU sample now stands for 9 intervals more: 9 more samples not taken, 9 ms.
  Sample* first = nullptr;
  for (Thread& t : p.threads)
    for (Sample& s : t.samples)
      if (first == nullptr && s.kind == SampleKind::kOnCpu) first = &s;
  ASSERT_NE(first, nullptr);
  const uint64_t extra = 9 * p.meta.recording.interval_ns;
  first->cpu_delta_ns += extra;
  const Report r = compute_report(p, options);
  EXPECT_EQ(r.totals.cpu_ns, cpu_before + extra);
  EXPECT_EQ(r.totals.not_taken.samples, known + 9);
  EXPECT_EQ(r.totals.samples, before.totals.samples);
  std::ostringstream text;
  print_report(r, text, options);
  EXPECT_NE(text.str().find("Note: at least 12 samples were not taken"), std::string::npos) << text.str();
  EXPECT_EQ(r.totals.not_taken_note, samples_not_taken_note(p));
  std::ostringstream doc;
  print_report_json(r, doc, options);
  const json totals = json::parse(doc.str())["totals"];
  EXPECT_EQ(totals["samples_not_taken"]["samples"], known + 9) << doc.str();
  EXPECT_GE(totals["samples_not_taken"]["cpu_ns"].get<uint64_t>(), extra);

  // A recording that states no interval: not counted against an assumed one.
  RecordingInfo& info = p.meta.recording;
  const RecordingInfo stated = info;
  info.interval_ns = 0;
  info.frequency_hz = 0;
  std::ostringstream unstated_doc;
  print_report_json(compute_report(p, options), unstated_doc, options);
  EXPECT_TRUE(json::parse(unstated_doc.str())["totals"]["samples_not_taken"].is_null()) << unstated_doc.str();
  EXPECT_EQ(samples_not_taken_note(p), "");
  info = stated;

  p.meta.recording.target = std::string(kAllProcessesTarget);
  const Report all = compute_report(p, options);
  std::ostringstream all_text, all_doc;
  print_report(all, all_text, options);
  print_report_json(all, all_doc, options);
  EXPECT_EQ(all_text.str().find("not taken"), std::string::npos) << all_text.str();
  EXPECT_TRUE(json::parse(all_doc.str())["totals"]["samples_not_taken"].is_null()) << all_doc.str();
}

TEST(Report, InlinedKernelAndOffCpuAttribution) {
  ReportOptions options;
  options.limit = 0;
  const Report r = compute_report(testing::make_synthetic_profile(), options);
  EXPECT_EQ(r.totals.samples, 12u);
  EXPECT_EQ(r.totals.samples_without_stack, 1u);
  EXPECT_EQ(r.totals.off_cpu_samples, 1u);
  EXPECT_EQ(r.totals.off_cpu_ns, 5000000u);
  EXPECT_EQ(r.totals.cpu_ns, 14500000u);
  EXPECT_EQ(r.totals.wall_ns, 17000000u);
  EXPECT_EQ(r.totals.threads, 2u);
  EXPECT_EQ(r.totals.duration_ns, 20000000u);
  EXPECT_EQ(r.totals.lost.lost_records, 3u);
  EXPECT_EQ(r.totals.missing_modules.size(), 1u);

  // The inlined push_back is the leaf of 4 samples; compute() is their caller.
  const ReportRow& helper = row(r, "std::vector<int>::push_back(int const&)");
  EXPECT_EQ(helper.self_samples, 4u);
  EXPECT_DOUBLE_EQ(helper.self_percent, 100.0 * 4 / 12);
  const ReportRow& compute = row(r, "compute(int)");
  EXPECT_EQ(compute.self_samples, 3u);   // 2 direct + the recursive leaf
  EXPECT_EQ(compute.total_samples, 7u);  // recursion counted once
  const ReportRow& kernel = row(r, "ksys_read");
  EXPECT_EQ(kernel.library, "[kernel.kallsyms]");
  EXPECT_EQ(kernel.self_cpu_ns, 500000u);

  const ReportRow& futex = row(r, "futex_wait");
  EXPECT_EQ(futex.self_samples, 0u);
  EXPECT_EQ(futex.self_off_cpu_samples, 1u);
  EXPECT_EQ(futex.self_wall_ns, 5000000u);
  EXPECT_DOUBLE_EQ(futex.self_wall_percent, 100.0 * 5 / 17);
  const ReportRow& worker = row(r, "worker_loop");
  EXPECT_EQ(worker.total_samples, 3u);
  EXPECT_EQ(worker.total_off_cpu_samples, 1u);
  EXPECT_EQ(worker.total_wall_ns, 8000000u);
  EXPECT_EQ(worker.total_cpu_ns, 6000000u);
}

TEST(Report, ThreadAndProcessFilters) {
  const Profile p = testing::make_synthetic_profile();
  ReportOptions worker;
  worker.tid = 101;
  const Report w = compute_report(p, worker);
  EXPECT_EQ(w.totals.threads, 1u);
  EXPECT_EQ(w.totals.samples, 3u);
  EXPECT_EQ(w.rows.size(), 3u);  // worker_loop, memcpy, futex_wait

  ReportOptions process;
  process.pid = 100;
  EXPECT_EQ(compute_report(p, process).totals.samples, 12u);

  ReportOptions nobody;
  nobody.pid = 4242;
  const Report none = compute_report(p, nobody);
  EXPECT_EQ(none.totals.threads, 0u);
  EXPECT_TRUE(none.rows.empty());
  std::ostringstream out;
  print_report(none, out, nobody);
  EXPECT_NE(out.str().find("No samples with a stack in the selected threads"), std::string::npos)
      << out.str();
}

size_t display_width(const std::string& line) {
  size_t n = 0;
  for (char c : line) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

TEST(Report, TextFitsEightyColumns) {
  Profile p = testing::make_synthetic_profile();
  // Very long names, multi-byte characters and a long library name must all be cut to fit.
  p.funcs[1].name = p.strings.intern(
      "std::__detail::_Executor<__gnu_cxx::__normal_iterator<char const*, std::__cxx11::basic_string<char, "
      "std::char_traits<char>, std::allocator<char> > >, "
      "std::allocator<std::__cxx11::sub_match<>>>::_M_dfs()");
  p.funcs[2].name = p.strings.intern(
      "\xCE\xB1\xCE\xB2\xCE\xB3::\xE2\x88\x82_long_greek_name_with_more_text_\xCE\xB4\xCE\xB5\xCE\xB6");
  p.libs[0].name = "libextraordinarily_long_library_name.so.1.2.3";
  p.meta.missing_modules.push_back("/very/long/path/" + std::string(120, 'x') + "/libmissing.so");
  for (int i = 0; i < 6; ++i) p.meta.missing_modules.push_back("/lib/m" + std::to_string(i) + ".so");
  ReportOptions options;
  options.limit = 0;
  std::ostringstream out;
  print_report(compute_report(p, options), out, options);
  const std::string text = out.str();
  std::istringstream lines(text);
  std::string line;
  size_t count = 0;
  while (std::getline(lines, line)) {
    ++count;
    EXPECT_LE(display_width(line), 80u) << line;
  }
  EXPECT_GT(count, 20u);
  EXPECT_NE(text.find("hpd report: 12 on-CPU samples, 2 threads in 1 process, duration 20.0 ms"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find(
          "Lost: 3 records, 1 throttle event\nStacks: 2 failed, 0 truncated, 1 sample without a stack\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("Missing modules: 8"), std::string::npos) << text;
  EXPECT_NE(text.find("and 3 more"), std::string::npos) << text;
  EXPECT_NE(text.find("\xE2\x80\xA6"), std::string::npos) << "long names end in an ellipsis";
  EXPECT_NE(text.find("Wall clock (on-CPU + off-CPU)"), std::string::npos) << text;
  EXPECT_NE(text.find(" 33.3%"), std::string::npos) << text;  // push_back's self share
  // The truncated Greek name is cut on a character boundary.
  EXPECT_NE(text.find("\xCE\xB1\xCE\xB2\xCE\xB3::"), std::string::npos);
}

// One thread ran, blocked and waited for a CPU: the three are kept apart in the totals, per thread
// and per function, in the text and in JSON; wall time is their sum.
TEST(Report, BlockedAndWaitingForTheCpuAreApart) {
  Profile p = make_split_profile();  // 10 on-CPU samples of 1 ms interval, 9 ms CPU
  Thread& t = p.threads[0];
  const uint32_t b = t.samples[4].stack;  // main->B
  const auto off = [&](SampleKind kind, uint64_t ns) {
    Sample s;
    s.time_ns = 20'000'000 + t.samples.size();
    s.stack = b;
    s.kind = kind;
    s.off_cpu_ns = ns;
    t.samples.push_back(s);
  };
  off(SampleKind::kOffCpu, 7'000'000);
  off(SampleKind::kWaitCpu, 2'000'000);
  off(SampleKind::kWaitCpu, 3'000'000);
  Thread other;  // only waits
  other.pid = 7;
  other.tid = 8;
  other.name = "waiter";
  Sample w;
  w.time_ns = 30'000'000;
  w.stack = b;
  w.kind = SampleKind::kWaitCpu;
  w.off_cpu_ns = 40'000'000;
  other.samples.push_back(w);
  p.threads.push_back(other);

  ReportOptions options;
  options.limit = 0;
  const Report r = compute_report(p, options);
  EXPECT_EQ(r.totals.samples, 10u);
  EXPECT_EQ(r.totals.off_cpu_samples, 1u);
  EXPECT_EQ(r.totals.off_cpu_ns, 7'000'000u);
  EXPECT_EQ(r.totals.wait_cpu_samples, 3u);
  EXPECT_EQ(r.totals.wait_cpu_ns, 45'000'000u);
  EXPECT_EQ(r.totals.wall_ns, 10'000'000u + 7'000'000u + 45'000'000u);
  ASSERT_EQ(r.totals.time_by_thread.size(), 2u);
  const ThreadTime& waiter = r.totals.time_by_thread[0];  // most wall time first
  EXPECT_EQ(waiter.tid, 8);
  EXPECT_EQ(waiter.wait_cpu_ns, 40'000'000u);
  EXPECT_EQ(waiter.off_cpu_ns, 0u);
  EXPECT_EQ(waiter.cpu_ns, 0u);
  const ThreadTime& app = r.totals.time_by_thread[1];
  EXPECT_EQ(app.tid, 7);
  EXPECT_EQ(app.samples, 10u);
  EXPECT_EQ(app.cpu_ns, 9'000'000u);
  EXPECT_EQ(app.off_cpu_ns, 7'000'000u);
  EXPECT_EQ(app.wait_cpu_ns, 5'000'000u);
  EXPECT_EQ(app.wall_ns, 10'000'000u + 12'000'000u);
  const ReportRow& row_b = row(r, "B");
  EXPECT_EQ(row_b.self_off_cpu_ns, 7'000'000u);
  EXPECT_EQ(row_b.self_wait_cpu_ns, 45'000'000u);
  EXPECT_EQ(row_b.self_wait_cpu_samples, 3u);
  EXPECT_EQ(row_b.self_wall_ns, 4'000'000u + 7'000'000u + 45'000'000u);  // B is the leaf of 4 on-CPU samples
  EXPECT_EQ(row(r, "main").total_wait_cpu_ns, 45'000'000u);
  EXPECT_EQ(row(r, "C").total_wait_cpu_ns, 0u);

  std::ostringstream text;
  print_report(r, text, options);
  EXPECT_NE(text.str().find("blocked 7.0 ms (1 sample), waiting for a CPU 45.0 ms (3 samples)"),
            std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("Wait CPU"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("     9.0       7.0       5.0  tid 7 app (pid 7)"), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("     0.0       0.0      40.0  tid 8 waiter (pid 7)"), std::string::npos)
      << text.str();

  std::ostringstream out;
  print_report_json(r, out, options);
  const json doc = json::parse(out.str());
  EXPECT_EQ(doc["totals"]["wait_cpu_ns"], 45'000'000u);
  EXPECT_EQ(doc["totals"]["off_cpu_ns"], 7'000'000u);
  const json& by_thread = doc["totals"]["time_by_thread"];
  ASSERT_EQ(by_thread.size(), 2u);
  EXPECT_EQ(by_thread[1]["tid"], 7);
  EXPECT_EQ(by_thread[1]["cpu_ns"], 9'000'000u);
  EXPECT_EQ(by_thread[1]["off_cpu_ns"], 7'000'000u);
  EXPECT_EQ(by_thread[1]["wait_cpu_ns"], 5'000'000u);
  bool b_seen = false;
  for (const json& f : doc["functions"]) {
    if (f["name"] != "B") continue;
    b_seen = true;
    EXPECT_EQ(f["self_wait_cpu_ns"], 45'000'000u);
    EXPECT_EQ(f["self_off_cpu_ns"], 7'000'000u);
  }
  EXPECT_TRUE(b_seen);
}

// A wait for a CPU after a wakeup that the scheduler charged as CPU time: that time is CPU of the
// waiting sample's stack (self and total, the thread's and the totals'), not an on-CPU sample.
TEST(Report, AWaitsChargedCpuIsItsStacksCpu) {
  Profile p = make_split_profile();  // 10 on-CPU samples of 1 ms interval, 9 ms CPU
  Thread& t = p.threads[0];
  Sample w;
  w.time_ns = 20'000'000;
  w.stack = t.samples[4].stack;  // main->B
  w.kind = SampleKind::kWaitCpu;
  w.off_cpu_ns = 2'000'000;
  w.cpu_delta_ns = 30'000;
  t.samples.push_back(w);

  ReportOptions options;
  options.limit = 0;
  const Report r = compute_report(p, options);
  EXPECT_EQ(r.totals.samples, 10u);
  EXPECT_EQ(r.totals.cpu_ns, 9'030'000u);
  ASSERT_EQ(r.totals.time_by_thread.size(), 1u);
  EXPECT_EQ(r.totals.time_by_thread[0].cpu_ns, 9'030'000u);
  EXPECT_EQ(r.totals.time_by_thread[0].samples, 10u);
  const Report before = compute_report(make_split_profile(), options);
  EXPECT_EQ(row(r, "B").self_cpu_ns, row(before, "B").self_cpu_ns + 30'000u);
  EXPECT_EQ(row(r, "main").total_cpu_ns, row(before, "main").total_cpu_ns + 30'000u);
  EXPECT_EQ(row(r, "B").self_samples, row(before, "B").self_samples);
  EXPECT_EQ(row(r, "C").total_cpu_ns, row(before, "C").total_cpu_ns);
}

TEST(Report, LimitBoundsTheRows) {
  ReportOptions options;
  options.limit = 2;
  std::ostringstream out;
  print_report(compute_report(make_split_profile(), options), out, options);
  const std::string text = out.str();
  EXPECT_NE(text.find("top 2 of 4 functions"), std::string::npos) << text;
  EXPECT_EQ(text.find(" main "), std::string::npos) << text;  // third by self, so cut
  EXPECT_EQ(text.find("Wall clock"), std::string::npos) << "no off-CPU samples, no wall-clock table";
}

TEST(Report, JsonCarriesTheSameNumbers) {
  ReportOptions options;
  options.limit = 3;
  const Report r = compute_report(testing::make_synthetic_profile(), options);
  std::ostringstream out;
  print_report_json(r, out, options);
  const json doc = json::parse(out.str());
  EXPECT_EQ(doc["sort"], "self");
  EXPECT_EQ(doc["totals"]["samples"], r.totals.samples);
  EXPECT_EQ(doc["totals"]["cpu_ns"], r.totals.cpu_ns);
  EXPECT_EQ(doc["totals"]["wall_ns"], r.totals.wall_ns);
  EXPECT_EQ(doc["totals"]["off_cpu_samples"], 1);
  EXPECT_EQ(doc["totals"]["lost"]["stack_failures"], 2);
  EXPECT_EQ(doc["totals"]["missing_modules"][0], "/opt/lib/libgone.so");
  EXPECT_EQ(doc["totals"]["functions"], r.rows.size());
  ASSERT_EQ(doc["functions"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const json& f = doc["functions"][i];
    EXPECT_EQ(f["name"], r.rows[i].name);
    EXPECT_EQ(f["library"], r.rows[i].library);
    EXPECT_EQ(f["self_samples"], r.rows[i].self_samples);
    EXPECT_EQ(f["total_samples"], r.rows[i].total_samples);
    EXPECT_DOUBLE_EQ(f["self_percent"].get<double>(), r.rows[i].self_percent);
    EXPECT_DOUBLE_EQ(f["total_percent"].get<double>(), r.rows[i].total_percent);
    EXPECT_EQ(f["self_cpu_ns"], r.rows[i].self_cpu_ns);
    EXPECT_EQ(f["total_wall_ns"], r.rows[i].total_wall_ns);
  }
  EXPECT_EQ(doc["functions"][0]["name"], "std::vector<int>::push_back(int const&)");
}

// A thread without samples (kept by the symbolizer for a recording of named processes) is listed with
// "no samples" and, when the recording shows why, the reason; it changes no share and no total.
TEST(Report, ThreadsWithoutSamplesAreNamedAndChangeNoFigure) {
  Profile p = make_split_profile();
  p.meta.recording.backend = "perf";
  ReportOptions options;
  const Report before = compute_report(p, options);
  Thread idle;
  idle.pid = 7;
  idle.tid = 9;
  idle.name = "reader";
  idle.start_ns = 0;
  p.threads.push_back(idle);
  const Report r = compute_report(p, options);
  EXPECT_EQ(r.totals.samples, before.totals.samples);
  EXPECT_EQ(r.totals.cpu_ns, before.totals.cpu_ns);
  EXPECT_EQ(r.totals.wall_ns, before.totals.wall_ns);
  EXPECT_EQ(r.totals.duration_ns, before.totals.duration_ns);
  ASSERT_EQ(r.rows.size(), before.rows.size());
  for (size_t i = 0; i < r.rows.size(); ++i) {
    EXPECT_EQ(r.rows[i].name, before.rows[i].name);
    EXPECT_DOUBLE_EQ(r.rows[i].self_percent, before.rows[i].self_percent);
    EXPECT_DOUBLE_EQ(r.rows[i].total_percent, before.rows[i].total_percent);
  }
  EXPECT_EQ(r.totals.threads, 2u);  // it existed: counted among the threads, not among the samples
  ASSERT_EQ(r.totals.unsampled_threads.size(), 1u);
  EXPECT_EQ(r.totals.unsampled_threads[0].tid, 9);
  EXPECT_EQ(r.totals.unsampled_threads[0].name, "reader");

  std::ostringstream text;
  print_report(r, text, options);
  EXPECT_NE(
      text.str().find("  tid 9 reader: no samples (perf_event without --off-cpu samples only CPU time)\n"),
      std::string::npos)
      << text.str();
  std::ostringstream out;
  print_report_json(r, out, options);
  const json doc = json::parse(out.str());
  ASSERT_EQ(doc["totals"]["unsampled_threads"].size(), 1u);
  EXPECT_EQ(doc["totals"]["unsampled_threads"][0]["tid"], 9);
  EXPECT_EQ(doc["totals"]["unsampled_threads"][0]["why"],
            "perf_event without --off-cpu samples only CPU time");

  // With off-CPU samples in the recording hpd does not know why this one has none: no reason given.
  p.threads[0].samples[0].kind = SampleKind::kOffCpu;
  p.threads[0].samples[0].off_cpu_ns = 1000;
  p.threads[0].samples[0].cpu_delta_ns = 0;
  const Report off = compute_report(p, options);
  ASSERT_EQ(off.totals.unsampled_threads.size(), 1u);
  EXPECT_EQ(off.totals.unsampled_threads[0].why, "");
  std::ostringstream off_text;
  print_report(off, off_text, options);
  EXPECT_NE(off_text.str().find("  tid 9 reader: no samples\n"), std::string::npos) << off_text.str();
  // The same when only the idle thread is selected: the others' off-CPU samples still say they were
  // taken.
  ReportOptions only_idle = options;
  only_idle.tid = 9;
  const Report selected = compute_report(p, only_idle);
  ASSERT_EQ(selected.totals.unsampled_threads.size(), 1u);
  EXPECT_EQ(selected.totals.unsampled_threads[0].why, "");
  // A profile without any sample (a capture cut before its first samples block) tells nothing of
  // off-CPU samples: no reason given.
  Profile none = p;
  for (Thread& t : none.threads) t.samples.clear();
  const Report empty = compute_report(none, options);
  ASSERT_EQ(empty.totals.unsampled_threads.size(), none.threads.size());
  for (const UnsampledThread& u : empty.totals.unsampled_threads) EXPECT_EQ(u.why, "") << u.tid;

  // Records lost from a full ring may have been its samples: it says so, beside any other reason.
  p.meta.lost.lost_records = 7;
  EXPECT_EQ(compute_report(p, options).totals.unsampled_threads.at(0).why,
            "its samples may be among the 7 records lost when the ring was full");
  p.threads[0].samples[0].kind = SampleKind::kOnCpu;
  p.threads[0].samples[0].off_cpu_ns = 0;
  EXPECT_EQ(compute_report(p, options).totals.unsampled_threads.at(0).why,
            "perf_event without --off-cpu samples only CPU time, or its samples may be among the 7 records "
            "lost when the ring was full");
}

TEST(Report, RejectsInconsistentProfiles) {
  Profile p = make_split_profile();
  p.stacks[2].prefix = 4;  // not a predecessor: walking it could loop
  EXPECT_THROW(compute_report(p, ReportOptions{}), std::runtime_error);
  Profile q = make_split_profile();
  q.threads[0].samples[0].stack = 99;
  EXPECT_THROW(compute_report(q, ReportOptions{}), std::runtime_error);
}

// compute_report checks the samples in its own pass rather than through validate() (validate.h):
// it must still refuse every profile validate() refuses, with the same message, whether or not the
// broken sample's thread is selected, and when a table and a sample are both broken.
TEST(Report, RefusesExactlyWhatValidateRefuses) {
  const auto message = [](const std::function<void()>& call) -> std::string {
    try {
      call();
      return "accepted";
    } catch (const InvalidProfileError& e) {
      return e.what();
    }
  };
  ReportOptions only_main;
  only_main.tid = 100;
  ReportOptions only_worker;
  only_worker.tid = 101;
  const std::function<void(Profile&)> breaks[] = {
      [](Profile& p) { p.funcs[1].name = 500; },
      [](Profile& p) { p.frames[0].func = 99; },
      [](Profile& p) { p.stacks[3].frame = 999; },
      [](Profile& p) { p.stacks[1].prefix = 7; },
      [](Profile& p) { p.threads[0].samples[2].stack = 99; },            // main thread
      [](Profile& p) { p.threads[1].samples.back().stack = 77; },        // worker, last sample
      [](Profile& p) { p.threads[1].samples[0].stack = kNoIndex - 1; },  // worker, first sample
      [](Profile& p) {
        p.call_edges.push_back(CallEdge{100, 0, 1000, 1});
      },  // after the samples' check
      [](Profile& p) {
        p.threads[0].samples[0].stack = 99;
        p.mip_counts.push_back(MipCount{100, 4000});
      },
  };
  for (size_t k = 0; k < std::size(breaks); ++k) {
    SCOPED_TRACE("case " + std::to_string(k));
    Profile p = testing::make_synthetic_profile();
    breaks[k](p);
    const std::string expected = message([&] { validate(p); });
    ASSERT_EQ(expected.rfind("invalid profile: ", 0), 0u) << expected;
    for (const ReportOptions* options : {&only_main, &only_worker}) {
      EXPECT_EQ(message([&] { compute_report(p, *options); }), expected) << "tid " << options->tid;
    }
    EXPECT_EQ(message([&] { compute_report(p, ReportOptions{}); }), expected);
  }
  EXPECT_EQ(message([&] { compute_report(testing::make_synthetic_profile(), only_worker); }), "accepted");
}

}  // namespace
}  // namespace hpd
