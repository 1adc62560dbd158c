// Privileged: `hpctl record --alloc -- CMD` end to end, on a program that knows its own allocations
// (alloc_fixture.c): the sampled estimates per function against the truth within the sampling's
// error, the frees matched exactly, stacks that reach main with and without frame pointers, the
// pprof heap columns read by `go tool pprof`, threads/fork/exec/realloc without a crash, and --pid
// refused.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "firefox_lint.h"
#include "subprocess.h"
#include "temp_dir.h"

#include <nlohmann/json.hpp>

namespace {

std::string fixture(const std::string& name) {
  return std::string(HPD_CALLS_FIXTURES) + "/" + name;
}

struct Truth {
  double blocks = 0;
  double size = 0;
  double leaked = 0;
};

std::map<std::string, Truth> read_truth(const std::string& path) {
  std::map<std::string, Truth> out;
  std::ifstream in(path);
  std::string name;
  Truth t;
  while (in >> name >> t.blocks >> t.size >> t.leaked) out[name] = t;
  return out;
}

constexpr double kMean = 4096;

// The error the sampling allows. A block of `size` bytes is sampled with p = 1 - exp(-size/mean) and
// then weighs size/p, so over n blocks the estimate of their bytes is unbiased with variance
// n * size^2 * (1 - p) / p. We allow five standard deviations (a false failure about once in 1.7
// million runs) plus one byte for the rounding of an exact (p = 1) estimate.
double allowed_error(double blocks, double size) {
  const double p = -std::expm1(-size / kMean);
  return 5.0 * size * std::sqrt(blocks * (1.0 - p) / p) + 1.0;
}

const nlohmann::json* row_of(const nlohmann::json& doc, const std::string& name) {
  for (const nlohmann::json& row : doc["allocations"]["rows"])
    if (row["name"] == name) return &row;
  return nullptr;
}

// `daemon_socket`: through the hpd listening there, else a local recording.
void check_against_truth(const std::string& program, const std::string& daemon_socket = "") {
  SCOPED_TRACE(program);
  const hpd::testing::TempDir dir("hpd-alloc");
  const std::string out = dir.file("alloc.hpr");
  std::vector<std::string> argv = {HPD_HPCTL_PATH, "--local"};
  if (!daemon_socket.empty()) argv = {HPD_HPCTL_PATH, "--socket", daemon_socket, "--daemon"};
  argv.insert(argv.end(), {"record", "--alloc", "--alloc-mean", "4096", "-o", out, "--", fixture(program),
                           "truth", dir.file("truth.txt")});
  const hpd::test::RunResult r = hpd::test::run(argv, 300, {"HPD_CALLS_RUNTIME="});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (!daemon_socket.empty()) {
    EXPECT_NE(r.err.find("recorded by hpd"), std::string::npos) << r.err;
  }
  EXPECT_NE(r.err.find("allocations (hpd's runtime, in-process): "), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("Allocations (sampled by bytes, one per 4.0 KiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Live at the end"), std::string::npos) << r.out;
  const std::map<std::string, Truth> truth = read_truth(dir.file("truth.txt"));
  ASSERT_EQ(truth.size(), 3u);

  const hpd::test::RunResult rep = hpd::test::run({HPD_HPCTL_PATH, "report", "--json", "--limit", "0", out});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const nlohmann::json doc = nlohmann::json::parse(rep.out);
  ASSERT_TRUE(doc.contains("allocations")) << rep.out;
  EXPECT_EQ(doc["allocations"]["mean_bytes"], 4096);
  uint64_t sampled = 0, freed_samples = 0;
  for (const auto& [name, t] : truth) {
    SCOPED_TRACE(name);
    const nlohmann::json* row = row_of(doc, name);
    ASSERT_NE(row, nullptr) << rep.out;
    const double total = (*row)["total_bytes"].get<double>();
    const double self = (*row)["self_bytes"].get<double>();
    const double live = (*row)["live_total_bytes"].get<double>();
    // Allocated by the function itself (its frame calls the allocator), all of it.
    EXPECT_NEAR(total, t.blocks * t.size, allowed_error(t.blocks, t.size));
    EXPECT_DOUBLE_EQ(self, total);
    if (t.leaked == 0) {
      // Every sampled block of it was freed, and each free was matched: nothing is left live.
      EXPECT_EQ(live, 0.0);
      freed_samples += (*row)["samples"].get<uint64_t>();
    } else {
      EXPECT_NEAR(live, t.leaked * t.size, allowed_error(t.leaked, t.size));
    }
    sampled += (*row)["samples"].get<uint64_t>();
  }
  // Exactly the sampled blocks of the freeing functions were matched with their frees (the fixture
  // allocates nothing else once its runtime started).
  EXPECT_EQ(doc["allocations"]["frees_matched"].get<uint64_t>(), freed_samples);
  EXPECT_EQ(doc["allocations"]["samples"].get<uint64_t>(), sampled);
  // Complete stacks: every sampled allocation's stack reaches the program's entry, _start (the CFI
  // unwinder goes through code without frame pointers; main itself tail-calls truth() at -O2).
  const nlohmann::json* start_row = row_of(doc, "_start");
  ASSERT_NE(start_row, nullptr) << rep.out;
  EXPECT_EQ((*start_row)["samples"].get<uint64_t>(), sampled);
  const nlohmann::json* truth_row = row_of(doc, "truth");
  ASSERT_NE(truth_row, nullptr) << rep.out;
  EXPECT_EQ((*truth_row)["samples"].get<uint64_t>(), sampled);
}

TEST(AllocRecord, EstimatesMatchTheTruthWithFramePointers) {
  check_against_truth("alloc_fp");
}

TEST(AllocRecord, EstimatesMatchTheTruthWithoutFramePointers) {
  check_against_truth("alloc_nofp");
}

// The function names on each stack of a Firefox profile's shared stack table (v66: prefixOffset k > 0
// names the stack k rows before, 0 a root), each name once.
std::vector<std::set<std::string>> firefox_stack_functions(const nlohmann::json& profile) {
  const nlohmann::json& shared = profile["shared"];
  const nlohmann::json& strings = shared["stringArray"];
  const nlohmann::json& stacks = shared["stackTable"];
  std::vector<std::set<std::string>> out(stacks["length"].get<size_t>());
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t frame = stacks["frame"][i].get<size_t>();
    const size_t func = shared["frameTable"]["func"][frame].get<size_t>();
    const uint64_t offset = stacks["prefixOffset"][i].get<uint64_t>();
    if (offset != 0) out[i] = out[i - offset];
    out[i].insert(strings[shared["funcTable"]["name"][func].get<size_t>()].get<std::string>());
  }
  return out;
}

// The Firefox export's native allocations (threads[i].nativeAllocations, the profiler's balanced
// table): each thread's table has the profiler's columns; the allocations' weights, summed per function
// as the profiler's call tree sums them, are the report's bytes per function; what the profiler's
// "Retained memory" keeps (allocations no deallocation of the same address follows) is the report's
// live bytes, and the leaking function's is the fixture's truth within the sampling's error; the
// times put the fixture's phases in the order it ran them.
TEST(AllocRecord, FirefoxExportHasTheNativeAllocationTables) {
  const hpd::testing::TempDir dir("hpd-alloc-firefox");
  const std::string hpr = dir.file("alloc.hpr");
  const std::string ff = dir.file("alloc.json");
  const hpd::test::RunResult r =
      hpd::test::run({HPD_HPCTL_PATH, "--local", "record", "--alloc", "--alloc-mean", "4096", "--no-report",
                      "-o", hpr, "--", fixture("alloc_nofp"), "truth", dir.file("truth.txt")},
                     300, {"HPD_CALLS_RUNTIME="});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::map<std::string, Truth> truth = read_truth(dir.file("truth.txt"));
  ASSERT_EQ(truth.size(), 3u);
  const hpd::test::RunResult c = hpd::test::run({HPD_HPCTL_PATH, "convert", hpr, "-o", ff});
  ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
  const hpd::test::RunResult rep = hpd::test::run({HPD_HPCTL_PATH, "report", "--json", "--limit", "0", hpr});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const nlohmann::json report = nlohmann::json::parse(rep.out);
  const nlohmann::json profile = hpd::testing::load_json_maybe_gzip(ff);

  const std::vector<std::string> problems = hpd::testing::lint_firefox_profile(profile);
  std::string listed;
  for (const std::string& p : problems) listed += p + "\n";
  EXPECT_TRUE(problems.empty()) << listed;

  const std::vector<std::set<std::string>> stack_functions = firefox_stack_functions(profile);
  std::map<std::string, double> allocated, retained;
  std::map<std::string, std::pair<double, double>> first_last;  // per fixture function: its times
  size_t tables = 0, allocations = 0, deallocations = 0;
  for (const nlohmann::json& thread : profile["threads"]) {
    if (!thread.contains("nativeAllocations")) continue;
    ++tables;
    const nlohmann::json& a = thread["nativeAllocations"];
    std::set<std::string> keys;
    for (const auto& [key, value] : a.items()) keys.insert(key);
    EXPECT_EQ(keys, (std::set<std::string>{"length", "weightType", "time", "weight", "stack", "memoryAddress",
                                           "threadId"}));
    EXPECT_EQ(a["weightType"], "bytes");
    const size_t n = a["length"].get<size_t>();
    // The profiler's filterToRetainedAllocations: an allocation is retained unless a deallocation of
    // its address follows it.
    std::map<uint64_t, size_t> live_at;
    std::vector<bool> kept(n, false);
    for (size_t i = 0; i < n; ++i) {
      const double weight = a["weight"][i].get<double>();
      const uint64_t address = a["memoryAddress"][i].get<uint64_t>();
      if (weight >= 0) {
        ++allocations;
        kept[i] = true;
        live_at[address] = i;
        // The fixture allocates in its main thread only.
        EXPECT_EQ(a["threadId"][i], thread["tid"]);
        const size_t stack = a["stack"][i].get<size_t>();
        const double t = a["time"][i].get<double>();
        for (const std::string& f : stack_functions.at(stack)) {
          allocated[f] += weight;
          if (truth.count(f) == 0) continue;
          auto [it, inserted] = first_last.try_emplace(f, t, t);
          it->second.first = std::min(it->second.first, t);
          it->second.second = std::max(it->second.second, t);
        }
      } else {
        ++deallocations;
        EXPECT_TRUE(a["stack"][i].is_null());
        const auto it = live_at.find(address);
        ASSERT_NE(it, live_at.end()) << "a deallocation of an address with no allocation before it";
        EXPECT_EQ(a["weight"][it->second].get<double>(), -weight);
        kept[it->second] = false;
        live_at.erase(it);
      }
    }
    for (size_t i = 0; i < n; ++i) {
      if (!kept[i]) continue;
      for (const std::string& f : stack_functions.at(a["stack"][i].get<size_t>()))
        retained[f] += a["weight"][i].get<double>();
    }
  }
  EXPECT_EQ(tables, 1u);
  EXPECT_EQ(allocations, report["allocations"]["samples"].get<uint64_t>());
  EXPECT_EQ(deallocations, report["allocations"]["frees_matched"].get<uint64_t>());
  // Per function, the profiler's sums are the report's (the same estimates, summed in another order).
  for (const nlohmann::json& row : report["allocations"]["rows"]) {
    const std::string name = row["name"].get<std::string>();
    SCOPED_TRACE(name);
    const double total = row["total_bytes"].get<double>(), live = row["live_total_bytes"].get<double>();
    EXPECT_NEAR(allocated[name], total, 1e-9 * total + 1e-6);
    EXPECT_NEAR(retained[name], live, 1e-9 * live + 1e-6);
  }
  for (const auto& [name, t] : truth) {
    SCOPED_TRACE(name);
    EXPECT_NEAR(allocated[name], t.blocks * t.size, allowed_error(t.blocks, t.size));
    EXPECT_NEAR(retained[name], t.leaked * t.size, allowed_error(t.leaked, t.size));
  }
  // The fixture runs small_blocks, then large_blocks, then leak_pages: their sampled allocations'
  // times (the runtime's clock, the samples' clock) come in that order.
  ASSERT_EQ(first_last.size(), 3u);
  EXPECT_LE(first_last["small_blocks"].second, first_last["large_blocks"].first);
  EXPECT_LE(first_last["large_blocks"].second, first_last["leak_pages"].first);
  EXPECT_GE(first_last["small_blocks"].first, 0.0);
}

// `hpctl record --alloc -- CMD` through hpd: hpctl makes the runtime's log, preloads the runtime hpd
// names into the command it starts, and hands hpd the log; the estimates are checked against the
// same truth as a local recording's.
TEST(AllocRecord, ThroughHpdTheEstimatesMatchTheTruth) {
  const hpd::testing::TempDir dir("hpd-alloc-daemon");
  std::ofstream(dir.file("hpd.conf")).close();
  const std::string socket = dir.file("hpd.sock");
  hpd::test::Background server({HPD_HPD_PATH, "--config", dir.file("hpd.conf"), "--socket", socket});
  // Until hpd answers (its socket may exist before it listens).
  bool answers = false;
  for (int attempt = 0; attempt < 300 && !answers; ++attempt) {
    answers = hpd::test::run({HPD_HPCTL_PATH, "--socket", socket, "status"}, 30).exit_code == 0;
    if (!answers) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(answers) << "hpd did not answer on " << socket;
  check_against_truth("alloc_nofp", socket);
}

std::string go_tool() {
  const std::string configured = HPD_GO_PATH;
  if (!configured.empty() && configured.find("NOTFOUND") == std::string::npos) return configured;
  return "go";
}

// pprof's heap columns: `go tool pprof -sample_index=inuse_space` puts the leaking function first and
// shows no live bytes for the functions that freed everything; alloc_space puts the big one first.
TEST(AllocRecord, PprofHasTheHeapColumns) {
  const hpd::testing::TempDir dir("hpd-alloc-pprof");
  const std::string hpr = dir.file("alloc.hpr");
  const std::string pb = dir.file("alloc.pb.gz");
  const hpd::test::RunResult r =
      hpd::test::run({HPD_HPCTL_PATH, "--local", "record", "--alloc", "--alloc-mean", "4096", "--no-report",
                      "-o", hpr, "--", fixture("alloc_nofp"), "truth", dir.file("truth.txt")},
                     300, {"HPD_CALLS_RUNTIME="});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const hpd::test::RunResult c = hpd::test::run({HPD_HPCTL_PATH, "convert", hpr, "-o", pb});
  ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
  const std::string go = go_tool();
  ASSERT_TRUE(go != "go" || hpd::test::have_tool("go"))
      << "go is needed to read pprof files (PATH or /usr/local/go/bin)";
  const hpd::test::RunResult inuse = hpd::test::run(
      {go, "tool", "pprof", "-sample_index=inuse_space", "-top", pb}, 300, {"HOME=" + dir.path()});
  ASSERT_EQ(inuse.exit_code, 0) << inuse.out << inuse.err;
  EXPECT_NE(inuse.out.find("Type: inuse_space"), std::string::npos) << inuse.out;
  // The first row of the table is the leaking function (flat = its live bytes).
  std::istringstream lines(inuse.out);
  std::string line, first_row;
  bool in_table = false;
  while (std::getline(lines, line)) {
    if (line.find("flat%") != std::string::npos) {
      in_table = true;
      continue;
    }
    if (in_table && !line.empty()) {
      first_row = line;
      break;
    }
  }
  EXPECT_NE(first_row.find("leak_pages"), std::string::npos) << inuse.out;
  EXPECT_EQ(inuse.out.find("small_blocks"), std::string::npos) << inuse.out;

  const hpd::test::RunResult alloc = hpd::test::run(
      {go, "tool", "pprof", "-sample_index=alloc_space", "-top", pb}, 300, {"HOME=" + dir.path()});
  ASSERT_EQ(alloc.exit_code, 0) << alloc.out << alloc.err;
  const size_t large = alloc.out.find("large_blocks"), small = alloc.out.find("small_blocks");
  ASSERT_NE(large, std::string::npos) << alloc.out;
  ASSERT_NE(small, std::string::npos) << alloc.out;
  EXPECT_LT(large, small) << alloc.out;
}

// Threads that allocate in one thread and free in another, realloc growth, the aligned allocators,
// free(NULL), a fork whose child allocates and execs: the program runs to its end, every process
// start has the runtime, and what one thread allocated and another freed is not live.
TEST(AllocRecord, ThreadsForkAndExecRunUnharmed) {
  const hpd::testing::TempDir dir("hpd-alloc-churn");
  const std::string out = dir.file("churn.hpr");
  const hpd::test::RunResult r =
      hpd::test::run({HPD_HPCTL_PATH, "--local", "record", "--alloc", "--alloc-mean", "4096", "--no-report",
                      "-o", out, "--", fixture("alloc_nofp"), "churn"},
                     300, {"HPD_CALLS_RUNTIME="});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // The command itself, its forked child, and the child's exec of /bin/true.
  EXPECT_NE(r.err.find("3 process start(s)"), std::string::npos) << r.err;
  const hpd::test::RunResult rep = hpd::test::run({HPD_HPCTL_PATH, "report", "--json", "--limit", "0", out});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const nlohmann::json doc = nlohmann::json::parse(rep.out);
  const nlohmann::json* producer = row_of(doc, "producer");
  ASSERT_NE(producer, nullptr) << rep.out;
  EXPECT_GT((*producer)["samples"].get<uint64_t>(), 10u);
  EXPECT_EQ((*producer)["live_total_bytes"].get<double>(), 0.0);
}

TEST(AllocRecord, AMeanAloneIsRefusedWithAClearMessage) {
  const hpd::test::RunResult m =
      hpd::test::run({HPD_HPCTL_PATH, "--local", "record", "--alloc-mean", "4096", "--", "true"});
  EXPECT_NE(m.exit_code, 0);
  EXPECT_NE(m.err.find("--alloc-mean goes with --alloc"), std::string::npos) << m.err;
}

// Whether process `pid` (a child not reaped yet) still runs: not gone, not a zombie.
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z';
}

// Waits for `path` to exist, as long as `alive` (when given) runs.
bool wait_for_file(const std::string& path, double timeout_s, pid_t alive = 0) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (std::filesystem::exists(path)) return true;
    if (alive != 0 && !running(alive)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `hpctl record --alloc --pid PID`: uprobes on the allocator of a process already running
// (alloc_pid_fixture.c, -O2 -g without frame pointers). The fixture waits until the probes are in
// before it allocates, so all its allocations are seen; it knows them: byte shares within 3 points,
// each function's bytes and the leak's live bytes within five standard deviations of the sampling,
// the freeing functions with nothing live; free(NULL) and frees of blocks allocated before the attach
// counted, not matched; after the recording the probes are gone and the target runs to its end.
// `daemon_socket`: through the hpd listening there, else a local recording.
void check_pid_attach(const std::string& daemon_socket) {
  const hpd::testing::TempDir dir("hpd-alloc-pid");
  hpd::test::Background target({fixture("alloc_pid_nofp"), dir.path()});
  ASSERT_TRUE(wait_for_file(dir.file("ready"), 60));
  const pid_t target_pid = target.pid();
  const std::string out = dir.file("pid.hpr");
  const std::string err = dir.file("hpctl.err");
  hpd::test::BackgroundOptions recorder_options;
  recorder_options.stdout_path = dir.file("hpctl.out");
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>'" + err + "'", HPD_HPCTL_PATH};
  if (daemon_socket.empty())
    argv.push_back("--local");
  else
    argv.insert(argv.end(), {"--socket", daemon_socket, "--daemon"});
  argv.insert(argv.end(), {"record", "--alloc", "--alloc-mean", "4096", "--no-report", "-o", out, "--pid",
                           std::to_string(target_pid), "-d", "600"});
  hpd::test::Background recorder(argv, recorder_options);
  ASSERT_TRUE(wait_for_file(dir.file("done"), 180, recorder.pid())) << read_file(dir.file("hpctl.err"));
  ASSERT_EQ(recorder.terminate(120), 0) << read_file(dir.file("hpctl.err"));
  const std::string summary = read_file(dir.file("hpctl.err"));
  // Detached: the fixture saw its functions' code restored, its memory intact, and allocated again.
  ASSERT_EQ(target.wait(), 0) << summary;
  if (!daemon_socket.empty()) {
    EXPECT_NE(summary.find("recorded by hpd"), std::string::npos) << summary;
  }
  EXPECT_NE(summary.find("allocations (uprobes on pid " + std::to_string(target_pid)), std::string::npos)
      << summary;
  // The 1,000 frees of blocks allocated before the attach, and most frees of the small blocks (not
  // sampled), are counted as frees of unsampled addresses; the 1,000 free(NULL) apart.
  const std::regex frees(R"(allocations: (\d+) free\(NULL\), (\d+) frees? of addresses not sampled)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(summary, m, frees)) << summary;
  EXPECT_EQ(std::stoull(m[1]), 1000u) << summary;
  EXPECT_GE(std::stoull(m[2]), 1000u) << summary;

  const std::map<std::string, Truth> truth = read_truth(dir.file("truth"));
  ASSERT_EQ(truth.size(), 3u);
  double truth_bytes = 0;
  for (const auto& [name, t] : truth) truth_bytes += t.blocks * t.size;
  const hpd::test::RunResult rep = hpd::test::run({HPD_HPCTL_PATH, "report", "--json", "--limit", "0", out});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const nlohmann::json doc = nlohmann::json::parse(rep.out);
  ASSERT_TRUE(doc.contains("allocations")) << rep.out;
  EXPECT_EQ(doc["allocations"]["mean_bytes"], 4096);
  const double all_bytes = doc["allocations"]["bytes"].get<double>();
  uint64_t freed_samples = 0;
  std::string top_live;
  double top_live_bytes = -1;
  for (const nlohmann::json& row : doc["allocations"]["rows"]) {
    if (row["live_self_bytes"].get<double>() > top_live_bytes) {
      top_live_bytes = row["live_self_bytes"].get<double>();
      top_live = row["name"].get<std::string>();
    }
  }
  for (const auto& [name, t] : truth) {
    SCOPED_TRACE(name);
    const nlohmann::json* row = row_of(doc, name);
    ASSERT_NE(row, nullptr) << rep.out;
    // The leaf frame is the function that called the allocator (the uretprobe's return address).
    const double self = (*row)["self_bytes"].get<double>();
    EXPECT_NEAR(self, t.blocks * t.size, allowed_error(t.blocks, t.size));
    EXPECT_NEAR(100.0 * self / all_bytes, 100.0 * t.blocks * t.size / truth_bytes, 3.0);
    const double live = (*row)["live_self_bytes"].get<double>();
    if (t.leaked == 0) {
      EXPECT_EQ(live, 0.0);
      freed_samples += (*row)["samples"].get<uint64_t>();
    } else {
      EXPECT_NEAR(live, t.leaked * t.size, allowed_error(t.leaked, t.size));
    }
  }
  EXPECT_EQ(top_live, "leak_blocks") << rep.out;
  EXPECT_EQ(doc["allocations"]["frees_matched"].get<uint64_t>(), freed_samples);
}

TEST(AllocRecord, PidAttachesToARunningProcessAndMatchesItsTruth) {
  check_pid_attach("");
}

// The same through hpd, as root (the access rules of any --pid recording apply).
TEST(AllocRecord, PidThroughHpdAttachesAndMatchesTheTruth) {
  const hpd::testing::TempDir dir("hpd-alloc-pid-daemon");
  std::ofstream(dir.file("hpd.conf")).close();
  const std::string socket = dir.file("hpd.sock");
  hpd::test::Background server({HPD_HPD_PATH, "--config", dir.file("hpd.conf"), "--socket", socket});
  bool answers = false;
  for (int attempt = 0; attempt < 300 && !answers; ++attempt) {
    answers = hpd::test::run({HPD_HPCTL_PATH, "--socket", socket, "status"}, 30).exit_code == 0;
    if (!answers) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(answers) << "hpd did not answer on " << socket;
  check_pid_attach(socket);
}

TEST(AllocRecord, PidWithoutAnAllocatorIsRefusedNamingWhatWasLookedFor) {
  // A static program maps no libc: nothing to probe.
  const hpd::testing::TempDir dir("hpd-alloc-static");
  hpd::test::Background target({fixture("alloc_static"), "wait"});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const hpd::test::RunResult r =
      hpd::test::run({HPD_HPCTL_PATH, "--local", "record", "--alloc", "--no-report", "-d", "1", "-o",
                      dir.file("s.hpr"), "--pid", std::to_string(target.pid())});
  EXPECT_NE(r.err.find("allocations not sampled"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("malloc"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("free"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(std::to_string(target.pid())), std::string::npos) << r.err;
}

}  // namespace
