// Tests of the Firefox profile reader: round trips through the writer, foreign input, clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

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

std::string text_report(const Profile& p, const ReportOptions& options) {
  std::ostringstream out;
  print_report(compute_report(p, options), out, options);
  return out.str();
}

std::string json_report(const Profile& p, const ReportOptions& options) {
  std::ostringstream out;
  print_report_json(compute_report(p, options), out, options);
  return out.str();
}

std::string json_text(const Profile& p) {
  std::ostringstream out;
  write_firefox_json(p, out);
  return out.str();
}

TEST(FirefoxReader, RoundTripGivesTheSameReport) {
  TempDir dir;
  const Profile original = make_synthetic_profile();
  for (const char* name : {"p.json.gz", "p.json"}) {
    const std::string path = dir.file(name);
    write_firefox_file(original, path);
    const Profile read = read_firefox_file(path);
    std::vector<ReportOptions> variants(6);
    variants[0].limit = 0;
    variants[1].sort = ReportSort::kTotal;
    variants[2].sort = ReportSort::kSelfWall;
    variants[3].tid = 101;
    variants[4].pid = 100;
    variants[5].sort = ReportSort::kTotalWall;
    variants[5].limit = 2;
    for (const ReportOptions& options : variants) {
      EXPECT_EQ(text_report(read, options), text_report(original, options)) << name;
      EXPECT_EQ(json_report(read, options), json_report(original, options)) << name;
    }
  }
}

TEST(FirefoxReader, RoundTripKeepsTheProfile) {
  TempDir dir;
  Profile a = make_synthetic_profile();
  a.meta.recording.first_sample_mono_ns = a.meta.recording.start_mono_ns + 123457;
  a.meta.recording.requested_mono_ns = a.meta.recording.start_mono_ns - 3000000;
  a.meta.recording.host_steal_known = true;
  a.meta.recording.host_steal_ns = 20000000;
  // An off-CPU sample with CPU time: what the scheduler charged a thread for a wait after its wakeup
  // (threadCPUDelta of the off-CPU sample's row).
  ASSERT_TRUE(testing::charge_first_off_cpu_sample(a, 25'000));
  const std::string path = dir.file("p.json.gz");
  write_firefox_file(a, path);
  const Profile b = read_firefox_file(path);

  EXPECT_EQ(b.meta.product, a.meta.product);
  const RecordingInfo& ra = a.meta.recording;
  const RecordingInfo& rb = b.meta.recording;
  EXPECT_EQ(rb.start_mono_ns, ra.start_mono_ns);
  EXPECT_EQ(rb.end_mono_ns, ra.end_mono_ns);
  EXPECT_EQ(rb.interval_ns, ra.interval_ns);
  EXPECT_NEAR(static_cast<double>(rb.start_unix_ns), static_cast<double>(ra.start_unix_ns), 1000.0);
  EXPECT_EQ(rb.frequency_hz, ra.frequency_hz);
  EXPECT_EQ(rb.backend, ra.backend);
  EXPECT_EQ(rb.event, ra.event);
  EXPECT_EQ(rb.call_graph, ra.call_graph);
  EXPECT_EQ(rb.target, ra.target);
  EXPECT_EQ(rb.arguments, ra.arguments);
  EXPECT_EQ(rb.hostname, ra.hostname);
  EXPECT_EQ(rb.kernel_release, ra.kernel_release);
  EXPECT_EQ(rb.kernel_frames, ra.kernel_frames);
  EXPECT_EQ(rb.logical_cpus, ra.logical_cpus);
  EXPECT_EQ(rb.requested_mono_ns, ra.requested_mono_ns);
  EXPECT_EQ(rb.first_sample_mono_ns, ra.first_sample_mono_ns);
  EXPECT_TRUE(rb.host_steal_known);
  EXPECT_EQ(rb.host_steal_ns, ra.host_steal_ns);
  EXPECT_EQ(b.meta.lost.lost_records, 3u);
  EXPECT_EQ(b.meta.lost.throttle_events, 1u);
  EXPECT_EQ(b.meta.lost.stack_failures, 2u);
  EXPECT_EQ(b.meta.missing_modules, a.meta.missing_modules);

  ASSERT_EQ(b.libs.size(), a.libs.size());
  for (size_t i = 0; i < a.libs.size(); ++i) {
    EXPECT_EQ(b.libs[i].name, a.libs[i].name);
    EXPECT_EQ(b.libs[i].path, a.libs[i].path);
    EXPECT_EQ(b.libs[i].build_id, a.libs[i].build_id);
    EXPECT_EQ(b.libs[i].is_kernel, a.libs[i].is_kernel);
  }
  ASSERT_EQ(b.funcs.size(), a.funcs.size());
  for (size_t i = 0; i < a.funcs.size(); ++i) {
    EXPECT_EQ(b.func_name(i), a.func_name(i));
    EXPECT_EQ(b.funcs[i].lib, a.funcs[i].lib);
    EXPECT_EQ(a.funcs[i].file == kNoIndex ? "" : a.strings[a.funcs[i].file],
              b.funcs[i].file == kNoIndex ? "" : b.strings[b.funcs[i].file]);
  }
  ASSERT_EQ(b.frames.size(), a.frames.size());
  for (size_t i = 0; i < a.frames.size(); ++i) {
    const Frame& x = a.frames[i];
    const Frame& y = b.frames[i];
    EXPECT_EQ(y.func, x.func);
    EXPECT_EQ(y.native_symbol, x.native_symbol);
    EXPECT_EQ(y.lib, x.lib);
    EXPECT_EQ(y.address, x.address);
    EXPECT_EQ(y.line, x.line);
    EXPECT_EQ(y.inline_depth, x.inline_depth);
    EXPECT_EQ(y.category, x.category);
  }
  ASSERT_EQ(b.stacks.size(), a.stacks.size());
  for (size_t i = 0; i < a.stacks.size(); ++i) {
    EXPECT_EQ(b.stacks[i].prefix, a.stacks[i].prefix);
    EXPECT_EQ(b.stacks[i].frame, a.stacks[i].frame);
  }
  ASSERT_EQ(b.threads.size(), a.threads.size());
  for (size_t t = 0; t < a.threads.size(); ++t) {
    const Thread& x = a.threads[t];
    const Thread& y = b.threads[t];
    EXPECT_EQ(y.pid, x.pid);
    EXPECT_EQ(y.tid, x.tid);
    EXPECT_EQ(y.name, x.name);
    EXPECT_EQ(y.process_name, x.process_name);
    EXPECT_EQ(y.is_main, x.is_main);
    EXPECT_EQ(y.end_ns, x.end_ns);
    ASSERT_EQ(y.samples.size(), x.samples.size());
    for (size_t i = 0; i < x.samples.size(); ++i) {
      EXPECT_EQ(y.samples[i].time_ns, x.samples[i].time_ns) << t << "/" << i;
      EXPECT_EQ(y.samples[i].stack, x.samples[i].stack);
      EXPECT_EQ(y.samples[i].cpu_delta_ns, x.samples[i].cpu_delta_ns);
      EXPECT_EQ(y.samples[i].kind, x.samples[i].kind);
      EXPECT_EQ(y.samples[i].off_cpu_ns, x.samples[i].off_cpu_ns);
    }
  }
}

// The synthetic profile with sampled allocations (--alloc) of every kind the model has: freed by
// another thread, live, untracked with its address reused by a tracked block, freed where the free was
// not seen, without a stack, of a thread with no track of its own (written in its process's main
// thread's table), from 1 byte to 1 TiB. In time order, as the reader gives them back.
Profile profile_with_allocations() {
  Profile p = make_synthetic_profile();
  p.meta.alloc = {.mean_bytes = 4096, .processes = 2, .dropped = 3, .untracked = 1, .frees_unmatched = 5};
  const uint64_t t0 = p.meta.recording.start_mono_ns;
  const uint32_t helper = p.threads[0].samples[0].stack, memcpy_stack = p.threads[1].samples[0].stack;
  const auto add = [&](int32_t tid, uint32_t stack, uint64_t address, uint64_t size, uint64_t time) {
    Allocation a;
    a.pid = 100;
    a.tid = tid;
    a.stack = stack;
    a.address = address;
    a.size = size;
    a.time_ns = t0 + time;
    p.allocations.push_back(a);
    return &p.allocations.back() - p.allocations.data();
  };
  const auto free = [&](ptrdiff_t i, int32_t tid, uint64_t time) {
    Allocation& a = p.allocations[static_cast<size_t>(i)];
    a.freed = true;
    a.free_tid = tid;
    a.free_time_ns = time == 0 ? 0 : t0 + time;
  };
  free(add(100, helper, 0x7f0000001000, 64, 1000), 101, 9000001);  // freed by the worker
  add(101, memcpy_stack, 0x7f0000100000, 1 << 20, 2500001);        // live
  p.allocations[add(100, helper, 0x5555000, 4096, 3000001)].tracked = false;
  free(add(100, helper, 0x5555000, 100, 3000002), 100, 3500000);  // the untracked block's address again
  // Its address came back while it was live: freed where the runtime did not see it (no time, no tid).
  free(add(100, helper, 0x6666000, 123457, 4000000), 0, 0);
  add(100, kNoIndex, 0x6666000, 3, 4100000);  // no stack; live
  add(102, helper, 0x7777000, 1, 4200000);    // thread 102 has no track
  free(add(101, memcpy_stack, 0x10000000000, uint64_t{1} << 40, 6000000), 101, 7000000);
  return p;
}

// Write, read, compare field by field: every field of every allocation comes back but those the
// format cannot carry (docs/memory.md): a free the runtime did not see reads as one at its
// allocation's time by the allocating thread. The reports (text and JSON) are the same.
TEST(FirefoxReader, RoundTripKeepsTheAllocations) {
  TempDir dir;
  const Profile a = profile_with_allocations();
  const std::string path = dir.file("alloc.json.gz");
  write_firefox_file(a, path);
  const std::vector<std::string> problems =
      testing::lint_firefox_profile(testing::load_json_maybe_gzip(path));
  EXPECT_TRUE(problems.empty()) << (problems.empty() ? "" : problems.front());
  const Profile b = read_firefox_file(path);
  EXPECT_EQ(b.meta.alloc.mean_bytes, 4096u);
  EXPECT_EQ(b.meta.alloc.processes, 2u);
  EXPECT_EQ(b.meta.alloc.dropped, 3u);
  EXPECT_EQ(b.meta.alloc.untracked, 1u);
  EXPECT_EQ(b.meta.alloc.frees_unmatched, 5u);
  ASSERT_EQ(b.allocations.size(), a.allocations.size());
  for (size_t i = 0; i < a.allocations.size(); ++i) {
    SCOPED_TRACE(i);
    const Allocation& x = a.allocations[i];
    const Allocation& y = b.allocations[i];
    EXPECT_EQ(y.pid, x.pid);
    EXPECT_EQ(y.tid, x.tid);
    EXPECT_EQ(y.stack, x.stack);
    EXPECT_EQ(y.address, x.address);
    EXPECT_EQ(y.size, x.size);
    EXPECT_EQ(y.freed, x.freed);
    EXPECT_EQ(y.tracked, x.tracked);
    EXPECT_EQ(y.time_ns, x.time_ns);
    EXPECT_EQ(y.free_time_ns, x.free_time_ns != 0 || !x.freed ? x.free_time_ns : x.time_ns);
    EXPECT_EQ(y.free_tid, x.free_tid != 0 || !x.freed ? x.free_tid : x.tid);
  }
  ReportOptions all;
  all.limit = 0;
  ReportOptions worker = all;
  worker.tid = 101;
  for (const ReportOptions& options : {all, worker}) {
    EXPECT_EQ(text_report(b, options), text_report(a, options));
    EXPECT_EQ(json_report(b, options), json_report(a, options));
  }
  EXPECT_NE(text_report(b, all).find("Allocations (sampled by bytes, one per 4.0 KiB"), std::string::npos)
      << text_report(b, all);
}

// A file with allocation tables and no sampling mean (written before hpd wrote it, or by another
// producer): every allocation is taken as sampled, its weight as its size in bytes.
TEST(FirefoxReader, AllocationsWithoutTheSamplingMeanAreTakenAsExact) {
  json doc = json::parse(json_text(profile_with_allocations()));
  json& extra = doc["meta"]["extra"];
  const size_t before = extra.size();
  extra.erase(std::remove_if(extra.begin(), extra.end(),
                             [](const json& section) { return section["label"] == "Allocations"; }),
              extra.end());
  ASSERT_EQ(extra.size(), before - 1);
  json& table = doc["threads"][0]["nativeAllocations"];
  table["weight"] = json::array();
  const size_t n = table["length"].get<size_t>();
  for (size_t i = 0; i < n; ++i) table["weight"].push_back(i % 2 == 0 ? 1000 : -1000);
  const Profile p = parse_firefox_json(doc.dump(), "old.json");
  EXPECT_EQ(p.meta.alloc.mean_bytes, 1u);
  ASSERT_FALSE(p.allocations.empty());
  for (const Allocation& a : p.allocations) {
    if (a.pid == 100 && a.tid != 101) {
      EXPECT_EQ(a.size, 1000u);
    }
  }
  const Report r = compute_report(p, ReportOptions{});
  EXPECT_GT(r.alloc_bytes, 0);
  EXPECT_DOUBLE_EQ(r.alloc_bytes, std::round(r.alloc_bytes));  // whole bytes: no weighting
}

TEST(FirefoxReader, ReadsTheReferenceProfileFromAnotherWriter) {
  // Written by hand after the format: microsecond CPU deltas, timeDeltas, a foreign marker.
  const Profile p = read_firefox_file(HPD_EXPORT_TEST_DATA "/firefox-profile-minimal-v66.json");
  ASSERT_EQ(p.threads.size(), 2u);
  EXPECT_EQ(p.threads[0].pid, 1234);
  EXPECT_EQ(p.threads[1].tid, 1235);
  ASSERT_EQ(p.threads[1].samples.size(), 5u);
  EXPECT_EQ(p.threads[1].samples[4].time_ns - p.threads[1].samples[0].time_ns, 4000000u);
  EXPECT_EQ(p.threads[0].samples[3].cpu_delta_ns, 800000u);  // 800 µs
  EXPECT_EQ(p.meta.recording.interval_ns, 1000000u);
  // Frames 1 and 2 are compute() with inline_helper inlined at one address.
  EXPECT_EQ(p.frames[2].inline_depth, 1);
  EXPECT_EQ(p.frames[1].address, p.frames[2].address);
  EXPECT_EQ(p.func_name(p.frames[2].func), "inline_helper");
  EXPECT_EQ(p.frames[5].category, Category::kIdle);

  ReportOptions options;
  options.limit = 0;
  const Report r = compute_report(p, options);
  EXPECT_EQ(r.totals.samples, 11u);
  EXPECT_EQ(r.totals.cpu_ns, (0 + 1000 + 1000 + 800 + 1000 + 500 + 0 + 1000 + 50 + 0 + 900) * 1000u);
}

class ReaderErrors : public ::testing::Test {
 protected:
  // Expects parse_firefox_json(text) to throw a runtime_error whose message contains `needle`.
  static void expect_error(const std::string& text, const std::string& needle) {
    try {
      parse_firefox_json(text, "test.json");
      ADD_FAILURE() << "no error for input containing: " << needle;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("test.json"), std::string::npos) << e.what();
    }
  }

  static json good() { return json::parse(json_text(make_synthetic_profile())); }
};

TEST_F(ReaderErrors, NotJson) {
  expect_error("hello, world", "not a JSON document");
  expect_error("", "not a JSON document");
  expect_error(json_text(make_synthetic_profile()).substr(0, 500), "not a JSON document");
}

TEST_F(ReaderErrors, NotAProcessedProfile) {
  expect_error("[1, 2, 3]", "not an object");
  expect_error(R"({"meta": {"version": 24}, "threads": []})", "not a Firefox processed profile");
  expect_error(R"({"traceEvents": []})", "missing profile.meta");
}

TEST_F(ReaderErrors, UnsupportedVersion) {
  json doc = good();
  doc["meta"]["preprocessedProfileVersion"] = 70;
  expect_error(doc.dump(), "version 70 is not supported");
  doc["meta"]["preprocessedProfileVersion"] = 48;
  expect_error(doc.dump(), "version 48 is not supported");
}

TEST_F(ReaderErrors, InconsistentTables) {
  json doc = good();
  doc["shared"]["frameTable"]["func"][0] = 999;
  expect_error(doc.dump(), "shared.frameTable.func[0] = 999 is not a valid index");

  doc = good();
  doc["shared"]["stackTable"]["frame"].push_back(0);
  expect_error(doc.dump(), "shared.stackTable.frame has");

  doc = good();
  doc["shared"]["stackTable"]["prefixOffset"][0] = 5;
  expect_error(doc.dump(), "prefixOffset[0] = 5 does not point at an earlier stack");

  doc = good();
  doc["threads"][0]["samples"]["stack"][0] = -3;
  expect_error(doc.dump(), "samples.stack[0] = -3 is not a valid index");

  doc = good();
  doc["shared"]["funcTable"]["name"][1] = "main";
  expect_error(doc.dump(), "funcTable.name[1] = \"main\" is not a valid index");

  doc = good();
  doc["threads"][1]["markers"]["data"][0]["sample"] = 77;
  expect_error(doc.dump(), "off-CPU marker with an invalid sample");

  doc = good();
  doc["threads"][0]["pid"] = "one hundred";
  expect_error(doc.dump(), "threads[0].pid");

  doc = good();
  doc["threads"][0]["samples"]["time"][0] = 1e300;
  expect_error(doc.dump(), "out of range");

  doc = good();
  doc["shared"].erase("frameTable");
  expect_error(doc.dump(), "missing shared.frameTable");
}

// Replaces one random leaf of `base` whose JSON pointer starts with one of `under` with a value of a
// random type, `rounds` times: the reader must either accept the result or throw std::runtime_error,
// and what it accepts must be usable. Returns how many it accepted.
size_t read_corrupted(const json& base, const std::vector<std::string>& under, int rounds) {
  const json flat = base.flatten();
  std::vector<std::string> leaves;
  for (const auto& item : flat.items()) {
    for (const std::string& prefix : under)
      if (item.key().rfind(prefix, 0) == 0) leaves.push_back(item.key());
  }
  EXPECT_FALSE(leaves.empty());
  if (leaves.empty()) return 0;
  const json replacements[] = {nullptr,        -1,   4294967295u, 1e300, "x", json::array(),
                               json::object(), true, 3.5,         0};
  std::mt19937 rng(1234);
  size_t accepted = 0;
  for (int i = 0; i < rounds; ++i) {
    json doc = base;
    doc[json::json_pointer(leaves[rng() % leaves.size()])] = replacements[rng() % std::size(replacements)];
    try {
      const Profile p = parse_firefox_json(doc.dump(), "fuzz");
      ++accepted;
      std::ostringstream sink;
      print_report(compute_report(p, ReportOptions{}), sink, ReportOptions{});
      write_firefox_json(p, sink);
    } catch (const std::runtime_error&) {
    }
  }
  return accepted;
}

TEST_F(ReaderErrors, RandomCorruptionsNeverCrash) {
  // Many leaves (names, extra entries) are harmless to change.
  EXPECT_GT(read_corrupted(good(), {""}, 2000), 0u);
}

// The same for the allocation tables and the sampling's meta.extra section.
TEST_F(ReaderErrors, RandomCorruptionsOfAllocationsNeverCrash) {
  EXPECT_GT(
      read_corrupted(json::parse(json_text(profile_with_allocations())),
                     {"/threads/0/nativeAllocations", "/threads/1/nativeAllocations", "/meta/extra"}, 2000),
      0u);
}

TEST_F(ReaderErrors, BadAllocationTablesAreNamed) {
  const json base = json::parse(json_text(profile_with_allocations()));
  json doc = base;
  doc["threads"][0]["nativeAllocations"]["weight"][1] = "x";
  expect_error(doc.dump(), "threads[0].nativeAllocations.weight[1] is not a number");
  doc = base;
  doc["threads"][0]["nativeAllocations"]["memoryAddress"][0] = -1;
  expect_error(doc.dump(), "threads[0].nativeAllocations.memoryAddress[0] = -1 is not an address");
  doc = base;
  doc["threads"][0]["nativeAllocations"].erase("memoryAddress");
  expect_error(doc.dump(), "threads[0].nativeAllocations has no memoryAddress column");
  doc = base;
  doc["threads"][0]["nativeAllocations"]["hpdUntracked"][0] = 2;
  expect_error(doc.dump(), "threads[0].nativeAllocations.hpdUntracked[0] = 2 is not 0 or 1");
  doc = base;
  doc["threads"][0]["nativeAllocations"]["weightType"] = "samples";
  expect_error(doc.dump(), "threads[0].nativeAllocations.weightType is \"samples\", not \"bytes\"");
  doc = base;
  doc["threads"][0]["nativeAllocations"]["stack"][0] = 9999;
  expect_error(doc.dump(), "threads[0].nativeAllocations.stack[0] = 9999 is not a valid index");
}

TEST(FirefoxReaderFiles, MissingFile) {
  try {
    read_firefox_file("/nonexistent/profile.json.gz");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/profile.json.gz"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
}

TEST(FirefoxReaderFiles, TruncatedAndCorruptGzip) {
  TempDir dir;
  const std::string path = dir.file("p.json.gz");
  write_firefox_file(make_synthetic_profile(), path);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    bytes = s.str();
  }
  const std::string truncated = dir.file("truncated.json.gz");
  std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  try {
    read_firefox_file(truncated);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated gzip"), std::string::npos) << e.what();
  }

  std::string corrupt = bytes;
  for (size_t i = 20; i < 60 && i < corrupt.size(); ++i) corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5a);
  const std::string corrupt_path = dir.file("corrupt.json.gz");
  std::ofstream(corrupt_path, std::ios::binary) << corrupt;
  EXPECT_THROW(read_firefox_file(corrupt_path), std::runtime_error);

  const std::string magic_only = dir.file("magic.json.gz");
  std::ofstream(magic_only, std::ios::binary) << "\x1f\x8b";
  EXPECT_THROW(read_firefox_file(magic_only), std::runtime_error);
}

}  // namespace
}  // namespace hpd
