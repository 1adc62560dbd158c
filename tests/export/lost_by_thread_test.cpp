// Per-thread lost data and stack completeness on their way from a RawProfile to the reader's view:
// symbolization keeps each thread's counts, the report lists the threads that lost something (text and
// JSON), and the Firefox profile carries them in meta.extra and gives them back when read.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "firefox_lint.h"
#include "hpd/export/firefox.h"
#include "hpd/export/firefox_reader.h"
#include "hpd/export/report.h"
#include "hpd/symbolizer/convert.h"
#include "synthetic_profile.h"
#include "temp_dir.h"

namespace hpd {
namespace {

using nlohmann::json;

bool same(const LostCounts& a, const LostCounts& b) {
  return a.lost_records == b.lost_records && a.throttle_events == b.throttle_events &&
         a.stack_failures == b.stack_failures && a.truncated_stacks == b.truncated_stacks;
}

// The synthetic profile ("myapp" tid 100, "wörker" tid 101 in pid 100) with losses on both threads and a
// third thread whose every record was lost (no samples).
Profile profile_with_losses() {
  Profile p = testing::make_synthetic_profile();
  p.meta.lost = LostCounts{12, 0, 3, 4};
  for (Thread& t : p.threads) {
    if (t.tid == 100) t.lost = LostCounts{2, 0, 1, 0};
    if (t.tid == 101) t.lost = LostCounts{3, 0, 2, 4};
  }
  Thread silent;
  silent.pid = 100;
  silent.tid = 102;
  silent.name = "silent: worker";  // a ": " in the name must not confuse the reader
  silent.process_name = "myapp";
  silent.lost = LostCounts{7, 0, 0, 0};
  p.threads.push_back(silent);
  return p;
}

std::string text_report(const Profile& p, const ReportOptions& options = {}) {
  std::ostringstream out;
  print_report(compute_report(p, options), out, options);
  return out.str();
}

json json_report(const Profile& p, const ReportOptions& options = {}) {
  std::ostringstream out;
  print_report_json(compute_report(p, options), out, options);
  return json::parse(out.str());
}

TEST(LostByThread, ReportListsThreadsWithLossesWorstFirst) {
  const Profile p = profile_with_losses();
  const Report r = compute_report(p, ReportOptions{});
  ASSERT_EQ(r.totals.lost_by_thread.size(), 3u);
  // 9 for worker, 7 for silent, 3 for main.
  EXPECT_EQ(r.totals.lost_by_thread[0].tid, 101);
  EXPECT_EQ(r.totals.lost_by_thread[1].tid, 102);
  EXPECT_EQ(r.totals.lost_by_thread[2].tid, 100);
  EXPECT_TRUE(same(r.totals.lost_by_thread[0].lost, LostCounts{3, 0, 2, 4}));
  EXPECT_EQ(r.totals.lost_by_thread[1].name, "silent: worker");

  const std::string text = text_report(p);
  EXPECT_NE(text.find("Lost by thread:\n"), std::string::npos) << text;
  EXPECT_NE(
      text.find("  tid 101 w\xC3\xB6rker (pid 100): 3 lost records, 2 failed stacks, 4 truncated stacks\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("  tid 102 silent: worker (pid 100): 7 lost records\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  tid 100 myapp (pid 100): 2 lost records, 1 failed stack\n"), std::string::npos)
      << text;
  // Worst first, in the text too.
  EXPECT_LT(text.find("tid 101"), text.find("tid 102"));
  EXPECT_LT(text.find("tid 102"), text.find("tid 100 "));
}

TEST(LostByThread, ReportJsonHasEveryThreadWithItsCounts) {
  const json doc = json_report(profile_with_losses());
  const json& threads = doc.at("totals").at("lost_by_thread");
  ASSERT_EQ(threads.size(), 3u);
  EXPECT_EQ(threads[0].at("pid"), 100);
  EXPECT_EQ(threads[0].at("tid"), 101);
  EXPECT_EQ(threads[0].at("name"), "w\xC3\xB6rker");
  EXPECT_EQ(threads[0].at("lost_records"), 3);
  EXPECT_EQ(threads[0].at("throttle_events"), 0);
  EXPECT_EQ(threads[0].at("stack_failures"), 2);
  EXPECT_EQ(threads[0].at("truncated_stacks"), 4);
  uint64_t records = 0;
  for (const json& t : threads) records += t.at("lost_records").get<uint64_t>();
  EXPECT_EQ(records, doc.at("totals").at("lost").at("lost_records").get<uint64_t>());
}

TEST(LostByThread, ReportFollowsThePidAndTidFilter) {
  const Profile p = profile_with_losses();
  ReportOptions one;
  one.tid = 102;
  const json doc = json_report(p, one);
  ASSERT_EQ(doc.at("totals").at("lost_by_thread").size(), 1u);
  EXPECT_EQ(doc.at("totals").at("lost_by_thread")[0].at("tid"), 102);
  ReportOptions other;
  other.pid = 4242;
  EXPECT_TRUE(json_report(p, other).at("totals").at("lost_by_thread").empty());
  EXPECT_EQ(text_report(p, other).find("Lost by thread"), std::string::npos);
}

TEST(LostByThread, NoLossesNoSection) {
  const Profile p = testing::make_synthetic_profile();
  EXPECT_EQ(text_report(p).find("Lost by thread"), std::string::npos);
  EXPECT_TRUE(json_report(p).at("totals").at("lost_by_thread").empty());
  std::ostringstream out;
  write_firefox_json(p, out);
  EXPECT_EQ(out.str().find("Lost data by thread"), std::string::npos);
}

// How stacks ended, on-CPU and off-CPU apart and per thread: the report (text and JSON) and the Firefox
// meta give the same counts as the samples' stack_end.
TEST(StackCompleteness, OnAndOffCpuPerThreadInTheReportJsonAndFirefoxMeta) {
  Profile p = testing::make_synthetic_profile();
  uint64_t want[2][2][3] = {};  // [thread 100/101][on/off][complete/truncated/failed]
  int i = 0;
  for (Thread& t : p.threads) {
    for (Sample& s : t.samples) {
      // A fixed pattern: every third sample failed, every fifth (not third) truncated.
      s.stack_end = i % 3 == 0 ? StackEnd::kFailed : i % 5 == 0 ? StackEnd::kTruncated : StackEnd::kComplete;
      ++i;
      const int th = t.tid == 100 ? 0 : 1;
      const int kind = s.kind == SampleKind::kOffCpu ? 1 : 0;
      ++want[th][kind][s.stack_end == StackEnd::kComplete ? 0 : s.stack_end == StackEnd::kTruncated ? 1 : 2];
    }
  }
  ASSERT_GT(want[1][1][0] + want[1][1][1] + want[1][1][2], 0u) << "the worker has an off-CPU sample";
  const Report r = compute_report(p, ReportOptions{});
  EXPECT_EQ(r.totals.stacks_complete, want[0][0][0] + want[1][0][0]);
  EXPECT_EQ(r.totals.stacks_failed, want[0][0][2] + want[1][0][2]);
  EXPECT_EQ(r.totals.off_stacks_complete + r.totals.off_stacks_truncated + r.totals.off_stacks_failed,
            want[0][1][0] + want[0][1][1] + want[0][1][2] + want[1][1][0] + want[1][1][1] + want[1][1][2]);
  ASSERT_EQ(r.totals.stacks_by_thread.size(), 2u);
  for (const ThreadStacks& ts : r.totals.stacks_by_thread) {
    const int th = ts.tid == 100 ? 0 : 1;
    EXPECT_EQ(ts.on_complete, want[th][0][0]);
    EXPECT_EQ(ts.on_truncated, want[th][0][1]);
    EXPECT_EQ(ts.on_failed, want[th][0][2]);
    EXPECT_EQ(ts.off_complete, want[th][1][0]);
    EXPECT_EQ(ts.off_failed, want[th][1][2]);
  }
  const std::string text = text_report(p);
  EXPECT_NE(text.find("Complete stacks: "), std::string::npos) << text;
  EXPECT_NE(text.find("of off-CPU samples"), std::string::npos) << text;
  EXPECT_NE(text.find("  tid 101 "), std::string::npos) << text;

  const json j = json_report(p);
  const json& by_thread = j.at("totals").at("stacks").at("by_thread");
  ASSERT_EQ(by_thread.size(), 2u);
  for (const json& t : by_thread) {
    const int th = t.at("tid") == 100 ? 0 : 1;
    EXPECT_EQ(t.at("on_cpu").at("complete"), want[th][0][0]);
    EXPECT_EQ(t.at("off_cpu").at("failed"), want[th][1][2]);
  }

  std::ostringstream out;
  write_firefox_json(p, out);
  const json firefox = json::parse(out.str());
  bool found = false;
  for (const json& section : firefox.at("meta").at("extra")) {
    if (section.at("label") != "Complete stacks") continue;
    found = true;
    for (const json& e : section.at("entries")) {
      const std::string label = e.at("label");
      if (label.find("Thread 100 ") != 0 || label.find(": on-CPU") == std::string::npos) continue;
      const uint64_t n = want[0][0][0] + want[0][0][1] + want[0][0][2];
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f%% complete of %llu", 100.0 * double(want[0][0][0]) / double(n),
                    static_cast<unsigned long long>(n));
      EXPECT_EQ(e.at("value").get<std::string>().rfind(buf, 0), 0u) << e.dump();
    }
  }
  EXPECT_TRUE(found);
}

// Off-CPU completeness by time as well as by samples: nine short complete intervals and one long
// failed one are 90% of the samples complete but 0.9% of the time. The report (text and JSON) and the
// Firefox meta state both, from the same samples.
TEST(StackCompleteness, OffCpuByTimeBesideBySamples) {
  Profile p = testing::make_synthetic_profile();
  Thread* worker = nullptr;
  for (Thread& t : p.threads)
    if (t.tid == 101) worker = &t;
  ASSERT_NE(worker, nullptr);
  for (Thread& t : p.threads)  // only the worker's ten intervals are off the CPU
    std::erase_if(t.samples, [](const Sample& s) { return is_off_cpu_interval(s.kind); });
  ASSERT_FALSE(worker->samples.empty());
  const Sample model = worker->samples.front();
  for (int i = 0; i < 10; ++i) {
    Sample s = model;
    s.kind = SampleKind::kOffCpu;
    s.cpu_delta_ns = 0;
    s.time_ns = model.time_ns + static_cast<uint64_t>(i) * 1000;
    s.off_cpu_ns = i < 9 ? 1'000'000 : 999'000'000;  // 9 x 1 ms complete, then 999 ms failed
    s.stack_end = i < 9 ? StackEnd::kComplete : StackEnd::kFailed;
    worker->samples.push_back(s);
  }
  std::stable_sort(worker->samples.begin(), worker->samples.end(),
                   [](const Sample& a, const Sample& b) { return a.time_ns < b.time_ns; });
  const Report r = compute_report(p, ReportOptions{});
  EXPECT_EQ(r.totals.off_stacks_complete, 9u);
  EXPECT_EQ(r.totals.off_stacks_failed, 1u);
  EXPECT_EQ(r.totals.off_stacks_complete_ns, 9'000'000u);
  EXPECT_EQ(r.totals.off_stacks_failed_ns, 999'000'000u);
  EXPECT_EQ(r.totals.off_stacks_unknown_ns, 0u);
  const std::string text = text_report(p);
  EXPECT_NE(text.find("90.0% of off-CPU samples (0.0% truncated, 10.0% failed)\n                 0.9% of "
                      "off-CPU time\n"),
            std::string::npos)
      << text;
  const json j = json_report(p);
  const json& off = j.at("totals").at("stacks").at("off_cpu");
  EXPECT_EQ(off.at("complete_ns"), 9'000'000u);
  EXPECT_EQ(off.at("failed_ns"), 999'000'000u);
  for (const json& t : j.at("totals").at("stacks").at("by_thread")) {
    if (t.at("tid") == 101) {
      EXPECT_EQ(t.at("off_cpu").at("complete_ns"), 9'000'000u);
    }
  }

  std::ostringstream out;
  write_firefox_json(p, out);
  const json firefox = json::parse(out.str());
  size_t said = 0;
  for (const json& section : firefox.at("meta").at("extra")) {
    if (section.at("label") != "Complete stacks") continue;
    for (const json& e : section.at("entries")) {
      if (e.at("label").get<std::string>().find("off-CPU") == std::string::npos) continue;
      EXPECT_EQ(e.at("value"), "90.0% complete of 10 (0 truncated, 1 failed); 0.9% of the time") << e.dump();
      ++said;
    }
  }
  EXPECT_EQ(said, 2u) << "all threads and the worker";
}

TEST(LostByThread, ReportCutsTheListAfterTenThreads) {
  Profile p = testing::make_synthetic_profile();
  for (int32_t i = 0; i < 13; ++i) {
    Thread t;
    t.pid = 500;
    t.tid = 500 + i;
    t.name = "w" + std::to_string(i);
    t.lost.truncated_stacks = static_cast<uint64_t>(100 - i);
    p.threads.push_back(t);
  }
  const std::string text = text_report(p);
  EXPECT_NE(text.find("  tid 509 w9 (pid 500): 91 truncated stacks\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("tid 510 "), std::string::npos) << text;
  EXPECT_NE(text.find("  and 3 more threads\n"), std::string::npos) << text;
  EXPECT_EQ(json_report(p).at("totals").at("lost_by_thread").size(), 13u);
}

TEST(LostByThread, FirefoxProfileCarriesThemAndPassesTheLinter) {
  const Profile p = profile_with_losses();
  std::ostringstream out;
  write_firefox_json(p, out);
  const json doc = json::parse(out.str());
  const auto problems = testing::lint_firefox_profile(doc);
  EXPECT_TRUE(problems.empty()) << problems.front();

  const json* section = nullptr;
  for (const json& s : doc.at("meta").at("extra")) {
    if (s.at("label") == "Lost data by thread") section = &s;
  }
  ASSERT_NE(section, nullptr);
  // Nonzero counts only: 2 + 3 + 1 entries.
  ASSERT_EQ(section->at("entries").size(), 6u);
  bool found = false;
  for (const json& e : section->at("entries")) {
    EXPECT_EQ(e.at("format"), "integer");
    if (e.at("label") == "Thread 101 (pid 100) w\xC3\xB6rker: Truncated stacks") {
      found = true;
      EXPECT_EQ(e.at("value"), 4);
    }
  }
  EXPECT_TRUE(found) << section->dump();
}

TEST(LostByThread, FirefoxRoundTripKeepsThemSoReportsAgree) {
  testing::TempDir dir;
  const Profile a = profile_with_losses();
  const std::string path = dir.file("p.json.gz");
  write_firefox_file(a, path);
  const Profile b = read_firefox_file(path);
  ASSERT_EQ(b.threads.size(), a.threads.size());
  for (size_t i = 0; i < a.threads.size(); ++i) {
    EXPECT_EQ(b.threads[i].tid, a.threads[i].tid);
    EXPECT_TRUE(same(b.threads[i].lost, a.threads[i].lost)) << a.threads[i].tid;
  }
  EXPECT_TRUE(same(b.meta.lost, a.meta.lost));
  EXPECT_EQ(text_report(b), text_report(a));
  EXPECT_EQ(json_report(b), json_report(a));
}

TEST(LostByThread, ReaderIgnoresMalformedOrUnknownThreadLabels) {
  const Profile p = profile_with_losses();
  std::ostringstream out;
  write_firefox_json(p, out);
  json doc = json::parse(out.str());
  json& extra = doc.at("meta").at("extra");
  json bad = json::array();
  const auto entry = [](const std::string& label, json value) {
    return json{{"label", label}, {"format", "integer"}, {"value", std::move(value)}};
  };
  bad.push_back(entry("Thread (pid 100) x: Lost records", 5));               // no tid
  bad.push_back(entry("Thread 100 (pid 99999999999) x: Lost records", 5));   // pid out of range
  bad.push_back(entry("Thread 100 (pid 100) x: Lost things", 5));            // unknown kind
  bad.push_back(entry("Thread 100 (pid 100) x Lost records", 5));            // no ": "
  bad.push_back(entry("Thread 100 (pid 100) x: Truncated stacks", "many"));  // not a number
  bad.push_back(entry("Thread 100 (pid 100) x: Stack failures", -4));        // negative
  bad.push_back(entry("Thread 777 (pid 777) gone: Lost records", 9));        // no such thread
  extra.push_back(json{{"label", "Lost data by thread"}, {"entries", bad}});
  const Profile read = parse_firefox_json(doc.dump());
  for (const Thread& t : read.threads) {
    if (t.tid == 100) {
      EXPECT_EQ(t.lost.lost_records, 2u);
      EXPECT_EQ(t.lost.stack_failures, 1u);
      EXPECT_EQ(t.lost.truncated_stacks, 0u);  // "many" reads as 0, the entry it replaces was 0 too
    }
    EXPECT_NE(t.tid, 777);
  }
}

// RawProfile -> Profile: per-thread counts are copied, and a thread with losses but no samples is
// kept so that its losses stay visible.
TEST(LostByThread, SymbolizationKeepsPerThreadCounts) {
  RawProfile raw;
  raw.info.start_mono_ns = 1'000'000'000;
  raw.info.end_mono_ns = 1'100'000'000;
  raw.info.interval_ns = 1'000'000;
  raw.lost = LostCounts{9, 0, 1, 2};
  RawProcess& process = raw.process(50);
  process.name = "app";
  raw.thread(50, 50).name = "app";
  raw.thread(50, 50).lost = LostCounts{4, 0, 1, 2};
  raw.thread(50, 51).name = "starved";
  raw.thread(50, 51).lost = LostCounts{5, 0, 0, 0};
  raw.thread(50, 52).name = "idle";  // neither samples nor losses: left out
  const uint64_t leaf = 0x1234;
  const uint32_t stack = raw.stacks.intern({}, std::span<const uint64_t>(&leaf, 1));
  for (int i = 0; i < 3; ++i) {
    RawSample s;
    s.time_ns = raw.info.start_mono_ns + 1'000'000 * uint64_t(i + 1);
    s.pid = 50;
    s.tid = 50;
    s.stack = stack;
    s.cpu_delta_ns = 1'000'000;
    raw.samples.push_back(s);
  }
  Symbolizer symbolizer;
  ConvertOptions options;
  options.kernel_frames = false;
  const Profile p = symbolize_profile(raw, symbolizer, options);
  ASSERT_EQ(p.threads.size(), 2u);
  EXPECT_EQ(p.threads[0].tid, 50);
  EXPECT_TRUE(same(p.threads[0].lost, LostCounts{4, 0, 1, 2}));
  EXPECT_EQ(p.threads[1].tid, 51);
  EXPECT_EQ(p.threads[1].name, "starved");
  EXPECT_TRUE(p.threads[1].samples.empty());
  EXPECT_TRUE(same(p.threads[1].lost, LostCounts{5, 0, 0, 0}));

  const json doc = json_report(p);
  ASSERT_EQ(doc.at("totals").at("lost_by_thread").size(), 2u);
  EXPECT_EQ(doc.at("totals").at("lost_by_thread")[0].at("tid"), 50);  // 7 lost against 5
  // A thread without samples is still a valid Firefox thread.
  std::ostringstream out;
  write_firefox_json(p, out);
  const auto problems = testing::lint_firefox_profile(json::parse(out.str()));
  EXPECT_TRUE(problems.empty()) << problems.front();
}

}  // namespace
}  // namespace hpd
