// Tests of the Firefox profile writer: format details, escaping, gzip, atomic replacement, failures.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "firefox_lint.h"
#include "hpd/export/firefox.h"
#include "hpd/export/firefox_reader.h"
#include "synthetic_profile.h"
#include "temp_dir.h"

namespace hpd {
namespace {

using nlohmann::json;
using testing::make_synthetic_profile;
using testing::TempDir;

std::string to_json_text(const Profile& p) {
  std::ostringstream out;
  write_firefox_json(p, out);
  return out.str();
}

json to_json(const Profile& p) {
  return json::parse(to_json_text(p));
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string joined(const std::vector<std::string>& problems) {
  std::string text;
  for (const auto& p : problems) text += p + "\n";
  return text;
}

TEST(FirefoxWriter, SyntheticProfileIsWellFormed) {
  const json doc = to_json(make_synthetic_profile());
  const auto problems = testing::lint_firefox_profile(doc);
  EXPECT_TRUE(problems.empty()) << joined(problems);

  const json& meta = doc["meta"];
  EXPECT_EQ(meta["preprocessedProfileVersion"], 66);
  EXPECT_EQ(meta["interval"], 1);
  EXPECT_EQ(meta["symbolicated"], true);
  EXPECT_EQ(meta["sampleUnits"]["threadCPUDelta"], "ns");
  EXPECT_EQ(meta["startTimeAsClockMonotonicNanosecondsSinceBoot"], 1000000000u);
  EXPECT_EQ(meta["profilingEndTime"], 20);
  EXPECT_EQ(meta["logicalCPUs"], 2);
  EXPECT_EQ(meta["arguments"], "hpctl record -- ./myapp 'it'\\''s here'");
  const std::vector<std::pair<std::string, std::string>> categories = {{"Other", "grey"},
                                                                       {"Idle", "transparent"},
                                                                       {"User", "yellow"},
                                                                       {"Kernel", "orange"},
                                                                       {"Waiting for CPU", "purple"}};
  ASSERT_EQ(meta["categories"].size(), categories.size());
  for (size_t i = 0; i < categories.size(); ++i) {
    EXPECT_EQ(meta["categories"][i]["name"], categories[i].first);
    EXPECT_EQ(meta["categories"][i]["color"], categories[i].second);
  }
  // Lost counts and missing modules are in meta.extra, shown under "Show More" in the info panel.
  const auto extra = [&](const std::string& section, const std::string& label) {
    for (const json& s : meta["extra"]) {
      if (s["label"] != section) continue;
      for (const json& e : s["entries"]) {
        if (e["label"] == label) return e;
      }
    }
    return json();
  };
  EXPECT_EQ(extra("Lost data", "Lost records")["value"], 3);
  EXPECT_EQ(extra("Lost data", "Lost records")["format"], "integer");
  EXPECT_EQ(extra("Lost data", "Failed stack walks")["value"], 2);
  EXPECT_EQ(extra("Lost data", "Missing modules")["value"], 1);
  EXPECT_EQ(extra("Lost data", "Missing module 1")["value"], "/opt/lib/libgone.so");
  EXPECT_EQ(extra("Recording", "Event")["value"], "task-clock");

  const json& libs = doc["libs"];
  ASSERT_EQ(libs.size(), 3u);
  EXPECT_EQ(libs[0]["codeId"], testing::kSyntheticBuildId);
  EXPECT_EQ(libs[0]["breakpadId"], "67452301AB89EFCDFEDCBA98765432100");
  EXPECT_TRUE(libs[1]["codeId"].is_null());
  EXPECT_EQ(libs[1]["breakpadId"], std::string(33, '0'));

  // Inlined push_back: same address and native symbol as compute(), depth 1, a separate func.
  const json& frames = doc["shared"]["frameTable"];
  EXPECT_EQ(frames["inlineDepth"][2], 1);
  EXPECT_EQ(frames["address"][1], frames["address"][2]);
  EXPECT_EQ(frames["nativeSymbol"][1], frames["nativeSymbol"][2]);
  EXPECT_NE(frames["func"][1], frames["func"][2]);
  EXPECT_EQ(frames["category"][6], 3);  // ksys_read is Kernel
  EXPECT_EQ(doc["shared"]["stackTable"]["prefixOffset"][0], 0);
  EXPECT_EQ(doc["shared"]["stackTable"]["prefixOffset"][1], 1);

  const json& main_thread = doc["threads"][0];
  EXPECT_EQ(main_thread["pid"], "100");
  EXPECT_EQ(main_thread["tid"], 100);
  EXPECT_TRUE(main_thread["unregisterTime"].is_null());
  EXPECT_TRUE(main_thread["samples"]["weight"].is_null());
  EXPECT_DOUBLE_EQ(main_thread["samples"]["time"][0].get<double>(), 0.123457);
  EXPECT_EQ(main_thread["samples"]["threadCPUDelta"][7], 500000);
  EXPECT_TRUE(main_thread["samples"]["stack"][8].is_null());
  EXPECT_EQ(main_thread["markers"]["length"], 0);

  const json& worker = doc["threads"][1];
  EXPECT_EQ(worker["name"], "w\xC3\xB6rker");
  EXPECT_EQ(worker["registerTime"], 2);
  EXPECT_EQ(worker["unregisterTime"], 15);
  EXPECT_EQ(worker["samples"]["weight"], json::parse("[1, 1, 5, 1]"));
  EXPECT_EQ(worker["samples"]["threadCPUDelta"][2], 0);
  ASSERT_EQ(worker["markers"]["length"], 1);
  EXPECT_EQ(worker["markers"]["data"][0]["type"], "HpdOffCpu");
  EXPECT_EQ(worker["markers"]["data"][0]["offCpuNs"], 5000000);
  EXPECT_EQ(worker["markers"]["data"][0]["sample"], 2);
  EXPECT_EQ(worker["markers"]["startTime"][0], 5);
  EXPECT_EQ(worker["markers"]["endTime"][0], 10);
  EXPECT_EQ(worker["markers"]["category"][0], 1);  // Idle
}

// A sample of a thread that waited for a CPU (its frames in the Profile's "Waiting for CPU" category,
// as the converter makes them): in the file its stack ends in a "[waiting for CPU]" leaf frame in Idle
// (subcategory "Waiting for CPU"), so that the profiler's "Include idle samples" hides it, and its own
// frames keep their function's CPU category (User) with that subcategory; weighted by its time like
// an off-CPU one, no CPU, and its own marker; the reader gives it back as a wait, with its Profile
// stack. The profile still passes the linter.
TEST(FirefoxWriter, WaitsForTheCpuHaveTheirCategoryAndMarker) {
  Profile p = make_synthetic_profile();
  Thread& worker = p.threads[1];
  const Sample blocked = worker.samples[2];
  Frame waiting_frame = p.frames[p.stacks[blocked.stack].frame];
  waiting_frame.category = Category::kWaitCpu;
  Sample wait = blocked;
  wait.time_ns += 6'000'000;  // 11 ms, after the sample at 10.5 ms
  wait.kind = SampleKind::kWaitCpu;
  wait.off_cpu_ns = 3'000'000;
  wait.stack = p.intern_stack(kNoIndex, p.intern_frame(waiting_frame));
  worker.samples.push_back(wait);

  const json doc = to_json(p);
  const auto problems = testing::lint_firefox_profile(doc);
  EXPECT_TRUE(problems.empty()) << joined(problems);
  EXPECT_EQ(doc["meta"]["categories"][4]["name"], "Waiting for CPU");
  const json& samples = doc["threads"][1]["samples"];
  EXPECT_EQ(samples["weight"], json::parse("[1, 1, 5, 1, 3]"));
  EXPECT_EQ(samples["threadCPUDelta"][4], 0);
  const json& categories = doc["meta"]["categories"];
  EXPECT_EQ(categories[1]["name"], "Idle");
  EXPECT_EQ(categories[1]["subcategories"], json::parse(R"(["Other", "Blocked", "Waiting for CPU"])"));
  EXPECT_EQ(categories[2]["subcategories"], categories[1]["subcategories"]);  // User
  const json& stacks = doc["shared"]["stackTable"];
  const json& frames = doc["shared"]["frameTable"];
  const auto stack = samples["stack"][4].get<size_t>();
  const auto leaf = stacks["frame"][stack].get<size_t>();
  EXPECT_EQ(frames["category"][leaf], 1);     // Idle
  EXPECT_EQ(frames["subcategory"][leaf], 2);  // Waiting for CPU
  const auto& strings = doc["shared"]["stringArray"];
  EXPECT_EQ(strings[doc["shared"]["funcTable"]["name"][frames["func"][leaf].get<size_t>()].get<size_t>()],
            "[waiting for CPU]");
  ASSERT_NE(stacks["prefixOffset"][stack], 0);
  const auto own = stack - stacks["prefixOffset"][stack].get<size_t>();
  const auto frame = stacks["frame"][own].get<size_t>();
  EXPECT_EQ(frames["category"][frame], 2);  // User, as on the CPU
  EXPECT_EQ(frames["subcategory"][frame], 2);
  const json& markers = doc["threads"][1]["markers"];
  ASSERT_EQ(markers["length"], 2);
  EXPECT_EQ(markers["data"][0]["type"], "HpdOffCpu");
  EXPECT_EQ(markers["category"][0], 1);  // Idle
  EXPECT_EQ(markers["data"][1]["type"], "HpdWaitCpu");
  EXPECT_EQ(markers["data"][1]["offCpuNs"], 3000000);
  EXPECT_EQ(markers["data"][1]["sample"], 4);
  EXPECT_EQ(markers["category"][1], 4);
  EXPECT_EQ(strings[markers["name"][1].get<size_t>()], "Waiting for CPU");
  bool schema = false;
  for (const json& s : doc["meta"]["markerSchema"]) schema = schema || s["name"] == "HpdWaitCpu";
  EXPECT_TRUE(schema);

  TempDir dir;
  const std::string path = dir.file("waits.json");
  write_firefox_file(p, path);
  const Profile back = read_firefox_file(path);
  ASSERT_EQ(back.threads.size(), 2u);
  const auto& read = back.threads[1].samples;
  ASSERT_EQ(read.size(), 5u);
  EXPECT_EQ(read[2].kind, SampleKind::kOffCpu);
  EXPECT_EQ(read[4].kind, SampleKind::kWaitCpu);
  EXPECT_EQ(read[4].off_cpu_ns, 3'000'000u);
  EXPECT_EQ(back.frames[back.stacks[read[4].stack].frame].category, Category::kWaitCpu);
  // The leaf frames are the writer's: the Profile read back has the stacks and functions it had.
  EXPECT_EQ(back.stacks[read[4].stack].prefix, kNoIndex);
  EXPECT_EQ(back.frames[back.stacks[read[2].stack].frame].category, Category::kIdle);
  EXPECT_EQ(back.funcs.size(), p.funcs.size());
  EXPECT_EQ(back.frames.size(), p.frames.size());
  EXPECT_EQ(back.stacks.size(), p.stacks.size());
}

TEST(FirefoxWriter, BreakpadIdOfKnownBuildIds) {
  // Build-id bytes 01 23 45 67 | 89 ab | cd ef | fe dc ba 98 76 54 32 10 (| 0a 0b 0c 0d dropped):
  // the GUID's u32 67452301, u16 AB89, u16 EFCD (byte-swapped), then 8 bytes as they are, age 0.
  EXPECT_EQ(breakpad_id_from_build_id("0123456789abcdeffedcba98765432100a0b0c0d"),
            "67452301AB89EFCDFEDCBA98765432100");
  // A 4-byte id is zero-padded to 16 bytes: de ad be ef -> u32 EFBEADDE, then zeros.
  EXPECT_EQ(breakpad_id_from_build_id("DEADBEEF"), "EFBEADDE0000000000000000000000000");
  EXPECT_EQ(breakpad_id_from_build_id(""), "");
  EXPECT_EQ(breakpad_id_from_build_id("xyz1"), "");
  EXPECT_EQ(breakpad_id_from_build_id("abc"), "");
  EXPECT_EQ(code_id_from_build_id("DEADbeef"), "deadbeef");
  EXPECT_EQ(code_id_from_build_id("dead beef"), "");
}

TEST(FirefoxWriter, EscapesStringsAndRepairsInvalidUtf8) {
  Profile p = make_synthetic_profile();
  const std::string tricky =
      std::string("q\"b\\s\nt\t\x01 caf\xC3\xA9 \xE2\x82\xAC bad:\xFF\xC3(") + '\0' + "end";
  p.funcs[0].name = p.strings.intern(tricky);
  const std::string text = to_json_text(p);
  const json doc = json::parse(text);  // throws on invalid UTF-8 or bad escapes
  const std::string expected =
      std::string("q\"b\\s\nt\t\x01 caf\xC3\xA9 \xE2\x82\xAC bad:\xEF\xBF\xBD\xEF\xBF\xBD(") + '\0' + "end";
  const json& strings = doc["shared"]["stringArray"];
  EXPECT_EQ(strings[doc["shared"]["funcTable"]["name"][0].get<size_t>()], expected);
  EXPECT_NE(text.find("\\u0001"), std::string::npos);
  EXPECT_NE(text.find("\\u0000"), std::string::npos);
}

TEST(FirefoxWriter, TimesAreExactDecimalsWithoutExponent) {
  Profile p = make_synthetic_profile();
  auto& samples = p.threads[1].samples;
  const uint64_t t0 = p.meta.recording.start_mono_ns;
  samples = {samples[0], samples[1], samples[3]};
  samples[0].time_ns = t0 - 500000;                        // before the start: negative
  samples[1].time_ns = t0 + 1;                             // one nanosecond
  samples[2].time_ns = t0 + 3ull * 3600 * 1000000000 + 7;  // three hours and 7 ns
  const std::string text = to_json_text(p);
  EXPECT_NE(text.find("\"time\":[-0.5,0.000001,10800000.000007]"), std::string::npos) << text;
}

TEST(FirefoxWriter, SortsUnsortedSamplesAndKeepsMarkersPaired) {
  Profile p = make_synthetic_profile();
  auto& samples = p.threads[1].samples;  // on, on, off, on
  std::swap(samples[0], samples[2]);     // off, on, on, on: times 5, 4.5, 2.5, 10.5 ms
  const json doc = to_json(p);
  EXPECT_TRUE(testing::lint_firefox_profile(doc).empty()) << joined(testing::lint_firefox_profile(doc));
  const json& worker = doc["threads"][1];
  EXPECT_EQ(worker["samples"]["time"], json::parse("[2.5, 4.5, 5, 10.5]"));
  EXPECT_EQ(worker["samples"]["weight"], json::parse("[1, 1, 5, 1]"));
  EXPECT_EQ(worker["markers"]["data"][0]["sample"], 2);
}

TEST(FirefoxWriter, OffCpuWeightsCarryTheRoundingRemainder) {
  Profile p = make_synthetic_profile();
  auto& samples = p.threads[1].samples;
  const Sample off = samples[2];
  samples.clear();
  for (int i = 0; i < 5; ++i) {
    Sample s = off;
    s.time_ns += static_cast<uint64_t>(i) * 1000000;
    s.off_cpu_ns = 300000;  // 0.3 intervals each, 1.5 in all
    samples.push_back(s);
  }
  const json doc = to_json(p);
  // Running remainder 0.3 -> 0, 0.6 -> 1 (-0.4), -0.1 -> 0, 0.2 -> 0, 0.5 -> 1: two intervals in all.
  EXPECT_EQ(doc["threads"][1]["samples"]["weight"], json::parse("[0, 1, 0, 0, 1]"));
}

TEST(FirefoxWriter, GzipFileHasMagicAndDecompresses) {
  TempDir dir;
  const std::string path = dir.file("profile.json.gz");
  write_firefox_file(make_synthetic_profile(), path);
  const std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 3u);
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0x1f);
  EXPECT_EQ(static_cast<unsigned char>(bytes[1]), 0x8b);
  EXPECT_EQ(static_cast<unsigned char>(bytes[2]), 0x08);  // deflate, which the profiler requires
  const json doc = testing::load_json_maybe_gzip(path);
  EXPECT_TRUE(testing::lint_firefox_profile(doc).empty());
  EXPECT_EQ(doc, to_json(make_synthetic_profile()));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"profile.json.gz"});  // no temporary left over
}

TEST(FirefoxWriter, PlainFileReplacesAnExistingOne) {
  TempDir dir;
  const std::string path = dir.file("profile.json");
  std::ofstream(path) << "old contents";
  write_firefox_file(make_synthetic_profile(), path);
  const std::string bytes = read_bytes(path);
  ASSERT_FALSE(bytes.empty());
  EXPECT_EQ(bytes[0], '{');
  EXPECT_EQ(json::parse(bytes), to_json(make_synthetic_profile()));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"profile.json"});
}

TEST(FirefoxWriter, UnwritablePathThrowsWithPathAndReason) {
  TempDir dir;
  const std::string missing_dir = dir.file("no/such/dir/profile.json.gz");
  try {
    write_firefox_file(make_synthetic_profile(), missing_dir);
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(missing_dir), std::string::npos) << e.what();
    // The reason, in the words of the one output opener (base/output_file): the missing directory.
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  std::ofstream(dir.file("plain")) << "x";
  EXPECT_THROW(write_firefox_file(make_synthetic_profile(), dir.file("plain/profile.json")),
               std::runtime_error);
  EXPECT_THROW(write_firefox_file(make_synthetic_profile(), dir.file("sub/")), std::runtime_error);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"plain"});
}

TEST(FirefoxWriter, FailureWhileWritingLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("big.json");
  Profile p = make_synthetic_profile();
  for (int i = 0; i < 20000; ++i) p.threads[0].samples.push_back(p.threads[0].samples[0]);
  // In a child process, a 4 KiB file size limit makes write() fail with EFBIG part way through.
  const auto write_with_small_limit = [&] {
    const rlimit limit{4096, 4096};
    setrlimit(RLIMIT_FSIZE, &limit);
    signal(SIGXFSZ, SIG_IGN);
    try {
      write_firefox_file(p, path);
    } catch (const std::runtime_error& e) {
      const bool reason = std::string(e.what()).find("File too large") != std::string::npos;
      std::_Exit(reason ? 0 : 2);
    }
    std::_Exit(1);
  };
  EXPECT_EXIT(write_with_small_limit(), ::testing::ExitedWithCode(0), "");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(FirefoxWriter, RejectsInconsistentProfiles) {
  Profile p = make_synthetic_profile();
  p.stacks[3].frame = 999;
  std::ostringstream out;
  EXPECT_THROW(write_firefox_json(p, out), std::runtime_error);

  Profile q = make_synthetic_profile();
  q.threads[0].samples[0].stack = 12345;
  EXPECT_THROW(write_firefox_json(q, out), std::runtime_error);

  Profile r = make_synthetic_profile();
  r.stacks[1].prefix = 5;  // a prefix must precede its stack
  EXPECT_THROW(write_firefox_json(r, out), std::runtime_error);
}

TEST(FirefoxWriter, FailingStreamThrows) {
  std::ofstream closed;  // never opened: every write fails
  EXPECT_THROW(write_firefox_json(make_synthetic_profile(), closed), std::runtime_error);
}

TEST(FirefoxWriter, EmptyProfileIsWellFormed) {
  const json doc = to_json(Profile{});
  EXPECT_TRUE(testing::lint_firefox_profile(doc).empty()) << joined(testing::lint_firefox_profile(doc));
  EXPECT_EQ(doc["threads"].size(), 0u);
}

}  // namespace
}  // namespace hpd
