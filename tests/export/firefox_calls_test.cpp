// Tests of the Firefox export's calls track: exact call edges as a weighted "calls (exact)" thread
// per process, and the reader turning that thread back into Profile::call_edges.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>

#include "firefox_lint.h"
#include "hpd/export/firefox.h"
#include "hpd/export/firefox_reader.h"
#include "hpd/export/report.h"
#include "synthetic_profile.h"
#include "temp_dir.h"

namespace hpd {
namespace {

using nlohmann::json;
using testing::make_synthetic_profile;
using testing::TempDir;

uint32_t func_named(const Profile& p, const std::string& name) {
  for (uint32_t i = 0; i < p.funcs.size(); ++i) {
    if (p.func_name(i) == name) return i;
  }
  ADD_FAILURE() << "no function " << name;
  return 0;
}

// The synthetic profile (process 100) with edges known by construction, among them a recursive one,
// one without a known caller, one to a function no sample hit, and a second process (200) that has
// edges but no sampled thread.
Profile profile_with_calls() {
  Profile p = make_synthetic_profile();
  const uint32_t main = func_named(p, "main");
  const uint32_t compute = func_named(p, "compute(int)");
  const uint32_t worker = func_named(p, "worker_loop");
  const uint32_t unsampled = p.intern_func("never_sampled", "/src/app.cpp", p.funcs[main].lib);
  p.call_edges = {
      CallEdge{100, main, compute, 1000}, CallEdge{100, worker, compute, 250},
      CallEdge{100, compute, compute, 7}, CallEdge{100, kNoIndex, main, 1},
      CallEdge{100, main, unsampled, 3},  CallEdge{200, main, compute, 5},
  };
  return p;
}

json to_json(const Profile& p) {
  std::ostringstream out;
  write_firefox_json(p, out);
  return json::parse(out.str());
}

std::string joined(const std::vector<std::string>& problems) {
  std::string text;
  for (const auto& p : problems) text += p + "\n";
  return text;
}

std::vector<const json*> calls_threads(const json& doc) {
  std::vector<const json*> out;
  for (const json& t : doc["threads"]) {
    if (t.contains("hpdCalls")) out.push_back(&t);
  }
  return out;
}

// "caller->callee" -> summed weight of one calls thread, names read from the JSON's own tables.
std::map<std::string, uint64_t> edges_of(const json& doc, const json& thread) {
  const json& shared = doc["shared"];
  const auto name_of_frame = [&](uint64_t frame) {
    const uint64_t func = shared["frameTable"]["func"][frame].get<uint64_t>();
    return shared["stringArray"][shared["funcTable"]["name"][func].get<uint64_t>()].get<std::string>();
  };
  std::map<std::string, uint64_t> out;
  const json& samples = thread["samples"];
  for (size_t i = 0; i < samples["length"].get<size_t>(); ++i) {
    const uint64_t stack = samples["stack"][i].get<uint64_t>();
    const uint64_t offset = shared["stackTable"]["prefixOffset"][stack].get<uint64_t>();
    std::string caller = "?";
    if (offset != 0) {
      const uint64_t prefix = stack - offset;
      EXPECT_EQ(shared["stackTable"]["prefixOffset"][prefix], 0) << "a calls stack has two frames at most";
      caller = name_of_frame(shared["stackTable"]["frame"][prefix].get<uint64_t>());
    }
    const std::string callee = name_of_frame(shared["stackTable"]["frame"][stack].get<uint64_t>());
    out[caller + "->" + callee] += samples["weight"][i].get<uint64_t>();
  }
  return out;
}

TEST(FirefoxCalls, EachProcessGetsACallsTrackWithTheExactCounts) {
  const Profile p = profile_with_calls();
  const json doc = to_json(p);
  const auto problems = testing::lint_firefox_profile(doc);
  EXPECT_TRUE(problems.empty()) << joined(problems);

  ASSERT_EQ(doc["threads"].size(), p.threads.size() + 2);
  const auto calls = calls_threads(doc);
  ASSERT_EQ(calls.size(), 2u);
  const json& t100 = *calls[0];
  const json& t200 = *calls[1];
  EXPECT_EQ(t100["hpdCalls"], true);
  EXPECT_EQ(t100["name"], "calls (exact)");
  EXPECT_EQ(t100["pid"], "100");
  EXPECT_EQ(t200["pid"], "200");
  EXPECT_EQ(t100["processName"], p.threads[0].process_name);
  EXPECT_EQ(t100["isMainThread"], false);
  // A tid no real thread has (the main thread's tid equals the pid).
  EXPECT_EQ(t100["tid"], "100-calls");
  // Counts, not CPU: weighted samples and no CPU deltas to feed the CPU graphs.
  EXPECT_EQ(t100["samples"]["weightType"], "samples");
  EXPECT_FALSE(t100["samples"].contains("threadCPUDelta"));
  EXPECT_FALSE(t200["samples"].contains("threadCPUDelta"));

  const std::map<std::string, uint64_t> expected100 = {{"main->compute(int)", 1000},
                                                       {"worker_loop->compute(int)", 250},
                                                       {"compute(int)->compute(int)", 7},
                                                       {"?->main", 1},
                                                       {"main->never_sampled", 3}};
  EXPECT_EQ(edges_of(doc, t100), expected100);
  EXPECT_EQ(edges_of(doc, t200), (std::map<std::string, uint64_t>{{"main->compute(int)", 5}}));
  uint64_t weights = 0;
  for (const json& w : t100["samples"]["weight"]) weights += w.get<uint64_t>();
  EXPECT_EQ(weights, 1000u + 250 + 7 + 1 + 3);

  // The functions are the profile's own, so the calls track's nodes are the sampled threads' nodes
  // (plus the "[blocked]" leaf the writer gives the worker's off-CPU sample).
  EXPECT_EQ(doc["shared"]["funcTable"]["length"], p.funcs.size() + 1);
  // The added frames carry no address or line: no sampled instruction is credited with calls.
  const json& frames = doc["shared"]["frameTable"];
  ASSERT_GT(frames["length"].get<size_t>(), p.frames.size());
  for (size_t i = p.frames.size(); i < frames["length"].get<size_t>(); ++i) {
    EXPECT_EQ(frames["address"][i], -1) << i;
    EXPECT_TRUE(frames["line"][i].is_null()) << i;
    EXPECT_TRUE(frames["nativeSymbol"][i].is_null()) << i;
  }
}

TEST(FirefoxCalls, RealThreadsAreUnchangedByTheCallsTrack) {
  Profile without = profile_with_calls();
  without.call_edges.clear();
  const json a = to_json(without);
  const json b = to_json(profile_with_calls());
  for (size_t i = 0; i < without.threads.size(); ++i) EXPECT_EQ(b["threads"][i], a["threads"][i]) << i;
  // The meta is the same but for the calls track (thread 2), shown with its process.
  json meta_b = b["meta"];
  EXPECT_EQ(meta_b["initialVisibleThreads"], json::array({0, 1, 2}));
  meta_b["initialVisibleThreads"] = a["meta"]["initialVisibleThreads"];
  EXPECT_EQ(meta_b, a["meta"]);
  EXPECT_EQ(b["shared"]["funcTable"], a["shared"]["funcTable"]);
}

TEST(FirefoxCalls, AProfileWithoutEdgesHasNoCallsTrack) {
  const Profile p = make_synthetic_profile();
  ASSERT_TRUE(p.call_edges.empty());
  const json doc = to_json(p);
  EXPECT_EQ(doc["threads"].size(), p.threads.size());
  EXPECT_TRUE(calls_threads(doc).empty());
  // The profile's frames and stacks, plus the "[blocked]" leaf of the worker's off-CPU sample.
  EXPECT_EQ(doc["shared"]["frameTable"]["length"], p.frames.size() + 1);
  EXPECT_EQ(doc["shared"]["stackTable"]["length"], p.stacks.size() + 1);
}

std::string report_json(const Profile& p) {
  std::ostringstream out;
  const ReportOptions options;
  print_report_json(compute_report(p, options), out, options);
  return out.str();
}

TEST(FirefoxCalls, RoundTripRestoresTheCallEdgesNotSamples) {
  TempDir dir;
  const Profile a = profile_with_calls();
  const std::string path = dir.file("calls.json.gz");
  write_firefox_file(a, path);
  const Profile b = read_firefox_file(path);

  ASSERT_EQ(b.call_edges.size(), a.call_edges.size());
  for (size_t i = 0; i < a.call_edges.size(); ++i) {
    const CallEdge& x = a.call_edges[i];
    const CallEdge& y = b.call_edges[i];
    EXPECT_EQ(y.pid, x.pid) << i;
    EXPECT_EQ(y.count, x.count) << i;
    EXPECT_EQ(y.callee_func, x.callee_func) << i;
    EXPECT_EQ(y.caller_func, x.caller_func) << i;
    EXPECT_EQ(b.func_name(y.callee_func), a.func_name(x.callee_func)) << i;
  }
  // The calls track is not read as a thread, and the real threads keep their samples.
  ASSERT_EQ(b.threads.size(), a.threads.size());
  for (size_t t = 0; t < a.threads.size(); ++t)
    EXPECT_EQ(b.threads[t].samples.size(), a.threads[t].samples.size());
  // So `hpctl report FILE.json.gz` shows the same calls table (and everything else) as the recording.
  const std::string report = report_json(b);
  EXPECT_EQ(report, report_json(a));
  EXPECT_NE(report.find("never_sampled"), std::string::npos);

  // Writing the read profile again reuses the frames and stacks the first write added.
  const json first = to_json(a);
  const json second = to_json(b);
  EXPECT_EQ(second["shared"]["frameTable"]["length"], first["shared"]["frameTable"]["length"]);
  EXPECT_EQ(second["shared"]["stackTable"]["length"], first["shared"]["stackTable"]["length"]);
  const auto calls_a = calls_threads(first);
  const auto calls_b = calls_threads(second);
  ASSERT_EQ(calls_b.size(), calls_a.size());
  for (size_t i = 0; i < calls_a.size(); ++i)
    EXPECT_EQ(edges_of(second, *calls_b[i]), edges_of(first, *calls_a[i]));
}

TEST(FirefoxCalls, ReaderChecksTheCallsTrack) {
  const json good = to_json(profile_with_calls());
  const size_t calls = make_synthetic_profile().threads.size();  // index of the first calls thread
  ASSERT_EQ(good["threads"][calls]["hpdCalls"], true);

  const auto expect_error = [](const json& doc, const std::string& needle) {
    try {
      parse_firefox_json(doc.dump(), "calls.json");
      ADD_FAILURE() << "accepted; expected an error with: " << needle;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  json doc = good;
  doc["threads"][calls]["samples"]["weight"][0] = -5;
  expect_error(doc, "samples.weight[0] is not a call count");
  doc = good;
  doc["threads"][calls]["samples"]["weight"][1] = "many";
  expect_error(doc, "samples.weight[1]");
  doc = good;
  doc["threads"][calls]["samples"]["stack"][0] = 100000;
  expect_error(doc, "samples.stack[0] = 100000 is not a valid index");

  // Another writer's track without weights counts each sample once; a sample without a stack is no
  // edge.
  doc = good;
  doc["threads"][calls]["samples"]["weight"] = nullptr;
  doc["threads"][calls]["samples"]["stack"][4] = nullptr;
  const Profile p = parse_firefox_json(doc.dump(), "calls.json");
  ASSERT_EQ(p.call_edges.size(), 5u);  // process 100's five less the one without a stack, then 200's
  for (const CallEdge& e : p.call_edges) EXPECT_EQ(e.count, e.pid == 100 ? 1u : 5u);
  EXPECT_EQ(p.call_edges.back().pid, 200);

  // Any one corrupted value of the calls tracks is refused or read into a usable profile.
  std::vector<std::string> leaves;
  const json flat = good.flatten();
  for (const auto& item : flat.items()) {
    if (item.key().rfind("/threads/" + std::to_string(calls), 0) == 0 ||
        item.key().rfind("/threads/" + std::to_string(calls + 1), 0) == 0)
      leaves.push_back(item.key());
  }
  ASSERT_FALSE(leaves.empty());
  const json replacements[] = {nullptr,        -1,    4294967295u, 1e300, "x", json::array(),
                               json::object(), false, 3.5};
  std::mt19937 rng(77);
  for (int i = 0; i < 300; ++i) {
    json bad = good;
    bad[json::json_pointer(leaves[rng() % leaves.size()])] = replacements[rng() % std::size(replacements)];
    try {
      const Profile read = parse_firefox_json(bad.dump(), "fuzz");
      std::ostringstream sink;
      print_report(compute_report(read, ReportOptions{}), sink, ReportOptions{});
      write_firefox_json(read, sink);
    } catch (const std::runtime_error&) {
    }
  }
}

}  // namespace
}  // namespace hpd

namespace hpd {
namespace {

// profile_with_calls() plus the latency hpd's runtime would have timed: compute(int) in process 100
// with 1000 calls of 1 us and 250 of 9 us (its p95 is in the 9 us tail), recursion counted once.
Profile profile_with_latency() {
  Profile p = profile_with_calls();
  CallLatency l;
  l.pid = 100;
  l.func = func_named(p, "compute(int)");
  l.calls = 1250;
  l.sum_ns = 1000 * 1000 + 250 * 9000;
  l.outer_ns = l.sum_ns - 7 * 1000;
  l.max_ns = 9500;
  l.histogram.ns_per_tick = 0.5;  // 2 ticks per ns: 1 us = 2000 ticks, 9 us = 18000 ticks
  l.histogram.buckets = {{LatencyHistogram::bucket_of_ticks(2000), 1000},
                         {LatencyHistogram::bucket_of_ticks(18000), 250}};
  p.call_latency.push_back(l);
  p.meta.recording.call_counter = "runtime";
  p.meta.recording.start_mono_ns = 1'000'000'000;
  p.meta.recording.end_mono_ns = 1'010'000'000;  // 10 ms
  return p;
}

TEST(FirefoxCalls, LatencyIsAMarkerOfTheCallsTrackAndSurvivesTheRoundTrip) {
  const Profile a = profile_with_latency();
  const json doc = to_json(a);
  const auto problems = testing::lint_firefox_profile(doc);
  EXPECT_TRUE(problems.empty()) << joined(problems);
  const auto calls = calls_threads(doc);
  ASSERT_EQ(calls.size(), 2u);
  const json& markers = (*calls[0])["markers"];
  ASSERT_EQ(markers["length"], 1u);
  const json& data = markers["data"][0];
  EXPECT_EQ(data["type"], "HpdCallLatency");
  EXPECT_EQ(data["calls"], 1250u);
  EXPECT_EQ(data["avgNs"], (1000u * 1000 + 250 * 9000) / 1250);
  const uint64_t p95 = data["p95Ns"].get<uint64_t>();
  EXPECT_GE(p95, 9000u * 15 / 16);  // in the 9 us bucket (1/16 wide)
  EXPECT_LE(p95, 9500u);
  EXPECT_EQ((*calls[1])["markers"]["length"], 0u);  // process 200 has no latency

  // What the profiler shows: the latencies as durations (its 'duration' format takes milliseconds and
  // prints them in the closest unit), equal to the recorded ones; a summary of the whole recording,
  // so the marker spans it (an interval marker, from the process's start to the recording's end).
  const CallLatency& recorded = a.call_latency[0];
  EXPECT_DOUBLE_EQ(data.at("avg").get<double>(), double(recorded.avg_ns()) / 1e6);
  EXPECT_DOUBLE_EQ(data.at("p95").get<double>(), double(recorded.p95_ns()) / 1e6);
  EXPECT_DOUBLE_EQ(data.at("max").get<double>(), double(recorded.max_ns) / 1e6);
  EXPECT_DOUBLE_EQ(data.at("total").get<double>(), double(recorded.outer_ns) / 1e6);
  EXPECT_EQ(markers["phase"][0], 1);  // interval
  EXPECT_DOUBLE_EQ(markers["startTime"][0].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(markers["endTime"][0].get<double>(), 10.0);
  std::map<std::string, std::string> format;
  for (const json& schema : doc["meta"]["markerSchema"]) {
    if (schema["name"] != "HpdCallLatency") continue;
    for (const json& field : schema["fields"]) {
      if (!field.value("hidden", false)) format[field["key"]] = field["format"];
    }
    EXPECT_NE(std::find(schema["display"].begin(), schema["display"].end(), "marker-chart"),
              schema["display"].end());
  }
  for (const char* key : {"avg", "p95", "max", "total"}) EXPECT_EQ(format[key], "duration") << key;
  for (const auto& [key, f] : format) EXPECT_NE(f, "nanoseconds") << key << " is shown as raw nanoseconds";

  TempDir dir;
  const std::string path = dir.file("latency.json.gz");
  write_firefox_file(a, path);
  const Profile b = read_firefox_file(path);
  EXPECT_EQ(b.meta.recording.call_counter, "runtime");
  ASSERT_EQ(b.call_latency.size(), 1u);
  const CallLatency &x = a.call_latency[0], &y = b.call_latency[0];
  EXPECT_EQ(b.func_name(y.func), "compute(int)");
  EXPECT_EQ(y.pid, x.pid);
  EXPECT_EQ(y.calls, x.calls);
  EXPECT_EQ(y.sum_ns, x.sum_ns);
  EXPECT_EQ(y.outer_ns, x.outer_ns);
  EXPECT_EQ(y.max_ns, x.max_ns);
  EXPECT_EQ(y.histogram.ns_per_tick, x.histogram.ns_per_tick);
  EXPECT_EQ(y.histogram.buckets, x.histogram.buckets);
}

// The calls table with latency: Avg (exact), P95 (from the histogram), Total and its share of the
// recording; the JSON has the same under "latency".
TEST(FirefoxCalls, ReportShowsTheLatencyBesideTheCalls) {
  const Profile p = profile_with_latency();
  std::ostringstream text;
  print_report(compute_report(p, ReportOptions{}), text, ReportOptions{});
  const std::string t = text.str();
  EXPECT_NE(t.find("counted and timed by hpd's runtime"), std::string::npos) << t;
  EXPECT_NE(t.find("Avg"), std::string::npos) << t;
  EXPECT_NE(t.find("P95"), std::string::npos) << t;
  EXPECT_NE(t.find("%Wall"), std::string::npos) << t;
  // compute(int): 1262 calls, avg 2.6 us; total 3.243 ms of 10 ms = 32.4%.
  const size_t row = t.find("compute(int)", t.find("counted and timed by"));
  ASSERT_NE(row, std::string::npos);
  const std::string line = t.substr(t.rfind('\n', row) + 1, row - t.rfind('\n', row) - 1);
  EXPECT_NE(line.find("1262"), std::string::npos) << line;
  EXPECT_NE(line.find("2.60 us"), std::string::npos) << line;
  EXPECT_NE(line.find("32.4"), std::string::npos) << line;

  const json doc = json::parse(report_json(p));
  EXPECT_EQ(doc["calls"]["counter"], "runtime");
  bool found = false;
  for (const json& r : doc["calls"]["rows"]) {
    if (r["name"] != "compute(int)") continue;
    found = true;
    EXPECT_EQ(r["latency"]["timed_calls"], 1250u);
    EXPECT_EQ(r["latency"]["avg_ns"], 2600u);
    EXPECT_EQ(r["latency"]["total_ns"], 3243000u);
    EXPECT_GE(r["latency"]["p95_ns"].get<uint64_t>(), 9000u * 15 / 16);
    EXPECT_EQ(r["latency"]["max_ns"], 9500u);
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace hpd
