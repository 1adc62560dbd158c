// MIP counts joined into a recording: a synthetic RawProfile over the real gcc fixture binary is
// symbolized (counts meet the sampled function), reported (Calls (MIP) section, text and JSON), and
// carried through .hpr captures (block 9) and the Firefox profile's MipCalls markers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "hpd/capture/capture.h"
#include "hpd/export/firefox.h"
#include "hpd/export/firefox_reader.h"
#include "hpd/export/report.h"
#include "hpd/symbolizer/convert.h"
#include "mip_test_support.h"

namespace hpd {
namespace {

constexpr int32_t kPid = 4242;
constexpr int32_t kQuietPid = 5000;  // has counts but no samples
constexpr uint64_t kBase = 0x10000000;

struct Built {
  RawProfile raw;
  uint64_t leaf = 0;
};

// One sample in leaf; an early and a late snapshot of the module; a snapshot of a process without samples.
Built build_raw() {
  Built b;
  const std::string binary = mip::test::fixture("mip_calls_gcc");
  const auto symbols = mip::test::read_function_symbols(binary);
  b.leaf = symbols.at("leaf").value;
  RawProfile& raw = b.raw;
  raw.info.start_mono_ns = 1'000'000'000;
  raw.info.end_mono_ns = 2'000'000'000;
  raw.info.interval_ns = 1'000'000;
  const uint32_t module = raw.intern_module(binary, "");
  for (int32_t pid : {kPid, kQuietPid}) {
    RawProcess& p = raw.process(pid);
    p.name = "mip_calls_gcc";
    p.start_ns = 1'000'000'000;
    p.end_ns = 1'900'000'000;  // exited: nothing is read from /proc
    // A PIE mapped whole at kBase: file offset = vaddr for GNU ld's text segment.
    p.mappings.push_back(RawMapping{kBase, kBase + 0x100000, 0, module, 0, 0});
    raw.thread(pid, pid).name = "mip_calls_gcc";
  }
  const uint64_t user[] = {kBase + b.leaf + 2};
  RawSample s;
  s.time_ns = 1'100'000'000;
  s.pid = s.tid = kPid;
  s.stack = raw.stacks.intern({}, user);
  s.cpu_delta_ns = 3'200'000;
  raw.samples.push_back(s);

  const auto snapshot = [&](int32_t pid, uint64_t time, uint64_t leaf_calls) {
    RawMipSnapshot snap;
    snap.pid = pid;
    snap.time_ns = time;
    snap.module = module;
    snap.module_hash = 0xabcd;
    snap.counts_calls = true;
    snap.functions.push_back({"leaf", b.leaf, 16, leaf_calls, 2, 3, 3});
    snap.functions.push_back({"mid", symbols.at("mid").value, 16, leaf_calls / 2, 1, 1, 1});
    snap.functions.push_back({"never_called", symbols.at("never_called").value, 32, 0, 0, 0, 4});
    snap.functions.push_back({"_Z3fooi", 0, 0, 7, 3, 0, 0});  // no address: named by demangling
    return snap;
  };
  raw.mip_snapshots.push_back(snapshot(kPid, 1'200'000'000, 5));
  raw.mip_snapshots.push_back(snapshot(kPid, 1'800'000'000, 32000));
  raw.mip_snapshots.push_back(snapshot(kQuietPid, 1'500'000'000, 10));
  return b;
}

const MipCount* find_count(const Profile& p, int32_t pid, const std::string& name) {
  for (const MipCount& c : p.mip_counts) {
    if (c.pid == pid && p.func_name(c.func) == name) return &c;
  }
  return nullptr;
}

Profile symbolize(const RawProfile& raw) {
  Symbolizer symbolizer;
  ConvertOptions options;
  options.kernel_frames = false;
  return symbolize_profile(raw, symbolizer, options);
}

TEST(MipJoin, LastSnapshotPerProcessMeetsTheSampledFunction) {
  const Built b = build_raw();
  const Profile p = symbolize(b.raw);
  ASSERT_EQ(p.mip_counts.size(), 8u);  // 4 functions x 2 processes, the early snapshot left out

  // The sampled leaf frame and the MIP count share one Func.
  const Thread* sampled = nullptr;
  for (const Thread& t : p.threads) {
    if (t.pid == kPid) sampled = &t;
  }
  ASSERT_NE(sampled, nullptr);
  ASSERT_EQ(sampled->samples.size(), 1u);
  const uint32_t leaf_func = p.frames[p.stacks[sampled->samples[0].stack].frame].func;
  EXPECT_EQ(p.func_name(leaf_func), "leaf");
  const MipCount* leaf = find_count(p, kPid, "leaf");
  ASSERT_NE(leaf, nullptr);
  EXPECT_EQ(leaf->func, leaf_func);
  EXPECT_EQ(leaf->calls, 32000u);
  EXPECT_EQ(leaf->first_call, 2u);
  EXPECT_EQ(leaf->time_ns, 1'800'000'000u);
  EXPECT_FALSE(leaf->never_called);

  const MipCount* never = find_count(p, kPid, "never_called");
  ASSERT_NE(never, nullptr);
  EXPECT_TRUE(never->never_called);
  EXPECT_EQ(never->calls, 0u);
  EXPECT_EQ(never->blocks_total, 4u);

  const MipCount* foo = find_count(p, kPid, "foo(int)");
  ASSERT_NE(foo, nullptr);
  EXPECT_EQ(p.funcs[foo->func].lib, p.funcs[leaf_func].lib);

  EXPECT_EQ(find_count(p, kQuietPid, "leaf")->calls, 10u);
  // The process without samples got an empty main thread to carry its counts.
  bool quiet_main = false;
  for (const Thread& t : p.threads) {
    if (t.pid == kQuietPid) quiet_main = t.is_main && t.tid == kQuietPid && t.samples.empty();
  }
  EXPECT_TRUE(quiet_main);
}

TEST(MipJoin, ReportShowsCallsCpuPerCallAndNeverCalled) {
  const Profile p = symbolize(build_raw().raw);
  ReportOptions options;
  options.pid = kPid;
  const Report r = compute_report(p, options);
  ASSERT_EQ(r.mip_called.size(), 3u);
  EXPECT_EQ(r.mip_called[0].name, "mid");  // first call 1
  EXPECT_EQ(r.mip_called[1].name, "leaf");
  EXPECT_EQ(r.mip_called[2].name, "foo(int)");
  EXPECT_EQ(r.mip_called[1].self_cpu_ns, 3'200'000u);
  EXPECT_EQ(r.mip_called[1].cpu_per_call_ns, 100u);  // 3.2 ms over 32000 calls
  EXPECT_EQ(r.mip_called[0].cpu_per_call_ns, 0u);    // never sampled
  ASSERT_EQ(r.mip_never_called.size(), 1u);
  EXPECT_EQ(r.mip_never_called[0].name, "never_called");

  std::ostringstream text;
  print_report(r, text, options);
  const std::string out = text.str();
  EXPECT_NE(out.find("Calls (MIP): 3 of 4 functions called"), std::string::npos) << out;
  EXPECT_NE(out.find("100 ns  leaf"), std::string::npos) << out;
  EXPECT_NE(out.find("Never called: 1 function: never_called"), std::string::npos) << out;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 80u) << line;

  std::ostringstream json_out;
  print_report_json(r, json_out, options);
  const auto doc = nlohmann::json::parse(json_out.str());
  EXPECT_EQ(doc.at("mip").at("functions_called"), 3);
  EXPECT_EQ(doc.at("mip").at("functions")[1].at("calls"), 32000);
  EXPECT_EQ(doc.at("mip").at("functions")[1].at("cpu_per_call_ns"), 100);
  EXPECT_EQ(doc.at("mip").at("never_called")[0].at("name"), "never_called");

  // Without counts there is no section.
  Profile plain = p;
  plain.mip_counts.clear();
  std::ostringstream none;
  print_report(compute_report(plain, options), none, options);
  EXPECT_EQ(none.str().find("Calls (MIP)"), std::string::npos);
}

TEST(MipJoin, FirefoxMarkersRoundTrip) {
  const Profile p = symbolize(build_raw().raw);
  std::ostringstream out;
  write_firefox_json(p, out);
  const auto doc = nlohmann::json::parse(out.str());
  size_t markers = 0;
  for (const auto& t : doc.at("threads")) {
    for (const auto& d : t.at("markers").at("data")) markers += d.value("type", "") == "MipCalls";
  }
  EXPECT_EQ(markers, 8u);
  const Profile back = parse_firefox_json(out.str());
  ASSERT_EQ(back.mip_counts.size(), p.mip_counts.size());
  for (const MipCount& c : p.mip_counts) {
    const MipCount* b = find_count(back, c.pid, p.func_name(c.func));
    ASSERT_NE(b, nullptr) << p.func_name(c.func);
    EXPECT_EQ(b->calls, c.calls);
    EXPECT_EQ(b->first_call, c.first_call);
    EXPECT_EQ(b->blocks_covered, c.blocks_covered);
    EXPECT_EQ(b->blocks_total, c.blocks_total);
    EXPECT_EQ(b->never_called, c.never_called);
    EXPECT_EQ(back.libs[back.funcs[b->func].lib].path, p.libs[p.funcs[c.func].lib].path);
  }
}

std::string temp_path(const char* name) {
  return ::testing::TempDir() + "/mip_join_" + std::to_string(getpid()) + "_" + name;
}

TEST(MipJoin, CaptureBlockRoundTripAndBadModule) {
  const Built b = build_raw();
  const std::string path = temp_path("ok.hpr");
  write_capture_file(b.raw, path);
  const CaptureContents c = read_capture_file(path);
  unlink(path.c_str());
  ASSERT_EQ(c.profile.mip_snapshots.size(), b.raw.mip_snapshots.size());
  EXPECT_EQ(c.info.skipped_blocks, 0u);
  for (size_t i = 0; i < b.raw.mip_snapshots.size(); ++i) {
    const RawMipSnapshot& x = b.raw.mip_snapshots[i];
    const RawMipSnapshot& y = c.profile.mip_snapshots[i];
    EXPECT_EQ(x.pid, y.pid);
    EXPECT_EQ(x.time_ns, y.time_ns);
    EXPECT_EQ(x.module, y.module);
    EXPECT_EQ(x.module_hash, y.module_hash);
    EXPECT_EQ(x.counts_calls, y.counts_calls);
    ASSERT_EQ(x.functions.size(), y.functions.size());
    for (size_t k = 0; k < x.functions.size(); ++k) {
      EXPECT_EQ(x.functions[k].name, y.functions[k].name);
      EXPECT_EQ(x.functions[k].address, y.functions[k].address);
      EXPECT_EQ(x.functions[k].call_count, y.functions[k].call_count);
      EXPECT_EQ(x.functions[k].first_call, y.functions[k].first_call);
      EXPECT_EQ(x.functions[k].blocks_covered, y.functions[k].blocks_covered);
      EXPECT_EQ(x.functions[k].blocks_total, y.functions[k].blocks_total);
    }
  }

  RawProfile bad = b.raw;
  bad.mip_snapshots[0].module = 7;  // no such module
  const std::string bad_path = temp_path("bad.hpr");
  write_capture_file(bad, bad_path);
  try {
    read_capture_file(bad_path);
    ADD_FAILURE() << "a MIP snapshot naming a missing module was accepted";
  } catch (const CaptureError& e) {
    EXPECT_NE(std::string(e.what()).find("mip"), std::string::npos) << e.what();
  }
  unlink(bad_path.c_str());
}

}  // namespace
}  // namespace hpd
