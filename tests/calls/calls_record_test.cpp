// Privileged: exact call counts of the fixtures, recorded for real through hpd::record(--calls), with
// both backends, threads, a library dlopen'd during the recording, and the targets' code after detach.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "hpd/calls/call_counter.h"
#include "hpd/calls/discovery.h"
#include "hpd/collect/recorder.h"
#include "hpd/export/firefox.h"
#include "hpd/export/firefox_reader.h"
#include "hpd/symbolizer/convert.h"
#include "subprocess.h"

namespace {

std::string fixture(const std::string& name) {
  return std::string(HPD_CALLS_FIXTURES) + "/" + name;
}

struct Counted {
  hpd::RecordResult result;
  hpd::Profile profile;  // symbolized
  // "caller->callee" -> count, summed over processes.
  std::map<std::string, uint64_t> edges;
  std::map<std::string, uint64_t> calls_to;  // callee -> count
};

// "caller->callee" and callee -> count, summed over processes.
void count_edges(const hpd::Profile& profile, std::map<std::string, uint64_t>& edges,
                 std::map<std::string, uint64_t>& calls_to) {
  for (const hpd::CallEdge& e : profile.call_edges) {
    const std::string caller = e.caller_func != hpd::kNoIndex ? profile.func_name(e.caller_func) : "?";
    const std::string callee = profile.func_name(e.callee_func);
    edges[caller + "->" + callee] += e.count;
    calls_to[callee] += e.count;
  }
}

Counted record_calls(std::vector<std::string> command, hpd::Backend backend = hpd::Backend::kBpf) {
  hpd::RecordOptions options;
  options.command = std::move(command);
  options.count_calls = true;
  options.backend = backend;
  options.frequency_hz = 499;
  options.off_cpu = backend == hpd::Backend::kPerf ? hpd::OffCpu::kOff : hpd::OffCpu::kAuto;
  Counted out;
  out.result = hpd::record(options);
  hpd::Symbolizer symbolizer;
  out.profile = hpd::symbolize_profile(out.result.profile, symbolizer);
  count_edges(out.profile, out.edges, out.calls_to);
  return out;
}

std::string dump(const Counted& c) {
  std::string s;
  for (const auto& [edge, n] : c.edges) s += edge + " " + std::to_string(n) + "\n";
  for (const std::string& m : c.result.calls.messages) s += "message: " + m + "\n";
  return s;
}

void expect_fixture_counts(const std::string& name, hpd::Backend backend = hpd::Backend::kBpf) {
  SCOPED_TRACE(name);
  const Counted c = record_calls({fixture(name), "1000", "250"}, backend);
  EXPECT_EQ(c.result.command_exit_status, 0);
  EXPECT_EQ(c.edges.count("caller_a->callee") ? c.edges.at("caller_a->callee") : 0, 1000u) << dump(c);
  EXPECT_EQ(c.edges.count("caller_b->callee") ? c.edges.at("caller_b->callee") : 0, 250u) << dump(c);
  EXPECT_EQ(c.calls_to.count("caller_a") ? c.calls_to.at("caller_a") : 0, 1u) << dump(c);
  EXPECT_EQ(c.calls_to.count("caller_b") ? c.calls_to.at("caller_b") : 0, 1u) << dump(c);
  EXPECT_TRUE(c.result.calls.enabled);
  EXPECT_GE(c.result.calls.hits(), 1252u);
  EXPECT_EQ(c.result.calls.calls_not_counted, 0u);
}

TEST(CallsRecord, GccPg) {
  expect_fixture_counts("gcc_pg");
}
TEST(CallsRecord, GccFentry) {
  expect_fixture_counts("gcc_fentry");
}
TEST(CallsRecord, GccNopMcountNonPie) {
  expect_fixture_counts("gcc_nop");
}
TEST(CallsRecord, ClangPg) {
  expect_fixture_counts("clang_pg");
}
TEST(CallsRecord, ClangFentry) {
  expect_fixture_counts("clang_fentry");
}
TEST(CallsRecord, RustInstrumentMcount) {
  if (!HPD_CALLS_HAVE_RUST) GTEST_SKIP() << "rustc not installed";
  expect_fixture_counts("rust_mcount");
}
// A tail call leaves no return address of its own: leaf's hook finds the one its caller's caller
// pushed, so mid->leaf and other->leaf are counted as main->leaf (docs/call-counts.md, "Tail
// calls"). The fixture's source has 300 mid->leaf and 70 other->leaf calls.
TEST(CallsRecord, TailCallsAreCreditedToTheCallersCaller) {
  // The premise: gcc did compile both calls to leaf into jumps.
  const hpd::test::RunResult dis =
      hpd::test::run({"objdump", "-d", "--no-show-raw-insn", fixture("gcc_tail")});
  ASSERT_EQ(dis.exit_code, 0) << dis.err;
  for (const char* fn : {"<mid>:", "<other>:"}) {
    const size_t at = dis.out.find(fn);
    ASSERT_NE(at, std::string::npos) << fn;
    const std::string body = dis.out.substr(at, dis.out.find("\n\n", at) - at);
    EXPECT_NE(body.find("jmp"), std::string::npos) << body;
    size_t calls = 0;
    for (size_t p = body.find("call"); p != std::string::npos; p = body.find("call", p + 1)) ++calls;
    EXPECT_EQ(calls, 1u) << "only the call to __fentry__: " << body;
  }
  const Counted c = record_calls({fixture("gcc_tail"), "300", "70"});
  EXPECT_EQ(c.result.command_exit_status, 0);
  const auto edge = [&](const std::string& e) { return c.edges.count(e) ? c.edges.at(e) : 0; };
  EXPECT_EQ(edge("main->mid"), 300u) << dump(c);
  EXPECT_EQ(edge("main->other"), 70u) << dump(c);
  EXPECT_EQ(edge("main->leaf"), 370u) << dump(c);
  EXPECT_EQ(edge("mid->leaf"), 0u) << dump(c);
  EXPECT_EQ(edge("other->leaf"), 0u) << dump(c);
  EXPECT_EQ(c.calls_to.count("leaf") ? c.calls_to.at("leaf") : 0, 370u) << dump(c);  // the total is exact
}

TEST(CallsRecord, PerfBackendToo) {
  expect_fixture_counts("gcc_nop", hpd::Backend::kPerf);
  expect_fixture_counts("gcc_fentry", hpd::Backend::kPerf);
}

// The Firefox file carries the edges in its calls track; reading it back (what `hpctl report
// FILE.json.gz` and `hpctl convert` do) gives the exact counts again.
TEST(CallsRecord, FirefoxFileKeepsTheExactCounts) {
  const Counted c = record_calls({fixture("gcc_nop"), "1000", "250"});
  ASSERT_EQ(c.edges.count("caller_a->callee") ? c.edges.at("caller_a->callee") : 0, 1000u) << dump(c);
  std::string dir = (std::filesystem::temp_directory_path() / "hpd-calls-XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string path = dir + "/calls.json.gz";
  hpd::write_firefox_file(c.profile, path);
  const hpd::Profile read = hpd::read_firefox_file(path);
  std::filesystem::remove_all(dir);
  std::map<std::string, uint64_t> edges, calls_to;
  count_edges(read, edges, calls_to);
  EXPECT_EQ(edges.count("caller_a->callee") ? edges.at("caller_a->callee") : 0, 1000u);
  EXPECT_EQ(edges.count("caller_b->callee") ? edges.at("caller_b->callee") : 0, 250u);
  EXPECT_EQ(edges, c.edges);
  EXPECT_EQ(read.threads.size(), c.profile.threads.size());  // the calls track is no thread
}

TEST(CallsRecord, NopSitesAreCountedAtNop5Probes) {
  const Counted c = record_calls({fixture("gcc_nop"), "1000", "250"});
  uint64_t nop5 = 0, call = 0;
  for (const auto& p : c.result.calls.probe_points) {
    if (p.probe_point == "nop5") nop5 = p.hits;
    if (p.probe_point == "call") call = p.hits;
  }
  EXPECT_EQ(nop5, 1253u);  // main, caller_a, caller_b, 1250 x callee
  EXPECT_EQ(call, 0u);
  EXPECT_GT(c.result.calls.estimated_overhead_ns(), 0u);
}

TEST(CallsRecord, EveryThreadIsCounted) {
  for (const char* name : {"threads_fentry", "threads_nop"}) {
    SCOPED_TRACE(name);
    const Counted c = record_calls({fixture(name), "4", "20000"});
    EXPECT_EQ(c.result.command_exit_status, 0);
    EXPECT_EQ(c.edges.count("worker->callee") ? c.edges.at("worker->callee") : 0, 80000u) << dump(c);
  }
}

TEST(CallsRecord, LibraryDlopenedDuringTheRecording) {
  const Counted c = record_calls({fixture("dso_main"), fixture("libcalls_dso.so"), "5000"});
  // Exit 3: the fixture never saw a probe on lib_run (the library was not attached).
  ASSERT_EQ(c.result.command_exit_status, 0) << dump(c);
  EXPECT_EQ(c.edges.count("lib_run->lib_callee") ? c.edges.at("lib_run->lib_callee") : 0, 5000u) << dump(c);
  EXPECT_EQ(c.calls_to.count("lib_run") ? c.calls_to.at("lib_run") : 0, 1u) << dump(c);
}

TEST(CallsRecord, UninstrumentedTargetGetsTheAdviceAndASampledProfile) {
  const Counted c = record_calls({fixture("plain"), "3000000", "1000000", "20"});
  EXPECT_EQ(c.result.command_exit_status, 0);
  EXPECT_TRUE(c.result.profile.call_edges.empty());
  bool advised = false;
  for (const std::string& m : c.result.calls.messages) {
    if (m.find("no mcount/__fentry__ instrumentation") != std::string::npos &&
        m.find("-pg -mfentry") != std::string::npos && m.find("-Zinstrument-mcount") != std::string::npos)
      advised = true;
  }
  EXPECT_TRUE(advised) << dump(c);
  EXPECT_GT(c.result.profile.samples.size(), 0u);
}

std::string read_memory(pid_t pid, uint64_t address, size_t n) {
  std::string out(n, '\0');
  const int fd = ::open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  const ssize_t got = ::pread(fd, out.data(), n, static_cast<off_t>(address));
  ::close(fd);
  return got == static_cast<ssize_t>(n) ? out : "";
}

// The runtime address of the gcc_nop fixture's `callee` nop5 site (non-PIE: link-time address).
uint64_t gcc_nop_callee_site() {
  const hpd::calls::ModuleInstrumentation m = hpd::calls::scan_module(fixture("gcc_nop"));
  // Functions in source order: callee, caller_a, caller_b, main; sites sorted by address.
  return m.nop_sites.empty() ? 0 : m.nop_sites.front().vaddr;
}

TEST(CallsRecord, DetachRestoresTheCodeBytes) {
  // A long-running target: counted by pid, for a moment, then it keeps running unprobed.
  // Started outside, recorded with --pid, then left running after the recording.
  hpd::test::Background target({fixture("gcc_nop"), "1000", "1000", "1000000000"});
  ASSERT_GT(target.pid(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const uint64_t site = gcc_nop_callee_site();
  ASSERT_NE(site, 0u);
  const std::string before = read_memory(target.pid(), site, 5);
  ASSERT_EQ(before, std::string("\x0f\x1f\x44\x00\x00", 5));

  hpd::RecordOptions options;
  options.pids = {target.pid()};
  options.count_calls = true;
  options.duration_s = 1.0;
  const hpd::RecordResult r = hpd::record(options);
  uint64_t callee_calls = 0;
  for (const hpd::RawCallEdge& e : r.profile.call_edges) callee_calls += e.count;
  EXPECT_GT(callee_calls, 1000u);
  // The kernel rewrote the nop5 into a call to its trampoline while attached; after detach the
  // original bytes are back.
  EXPECT_EQ(read_memory(target.pid(), site, 5), before);
}

// Detached, the target runs at its unprobed speed: the per-call time of a fixed amount of work after
// the recording is far below the probed one (a probe hit costs hundreds of ns, the call itself a few).
TEST(CallsRecord, DetachRestoresTheSpeed) {
  const auto run_ns = [](const std::vector<std::string>& argv) {
    const auto t0 = std::chrono::steady_clock::now();
    hpd::test::Background p(argv);
    p.wait();
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  };
  const std::vector<std::string> work = {fixture("gcc_nop"), "200000", "0", "5"};  // 1M calls
  double probed = 0;
  {
    // A counter attached to the file: every process running it traps at the nop5 sites.
    hpd::calls::CallCounter counter(hpd::calls::CallCounterOptions{});
    counter.add_launched(static_cast<int32_t>(::getpid()), fixture("gcc_nop"));
    probed = run_ns(work);
    hpd::RawProfile ignored;
    counter.finish(ignored);
  }
  const double after = run_ns(work);
  // Generous: probed runs cost >= 300 ns x 1M = 0.3 s more; require only half of the difference.
  EXPECT_LT(after, probed * 0.5) << "probed " << probed / 1e6 << " ms, after detach " << after / 1e6 << " ms";
}

}  // namespace
