// Privileged: `hpctl record --alloc -- CMD` end to end, on a program that knows its own allocations
// (alloc_fixture.c): the sampled estimates per function against the truth within the sampling's
// error, the frees matched exactly, stacks that reach main with and without frame pointers, the
// pprof heap columns read by `go tool pprof`, threads/fork/exec/realloc without a crash, and --pid
// refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

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

void check_against_truth(const std::string& program) {
  SCOPED_TRACE(program);
  const hpd::testing::TempDir dir("hpd-alloc");
  const std::string out = dir.file("alloc.hpr");
  const hpd::test::RunResult r =
      hpd::test::run({HPD_HPCTL_PATH, "--local", "record", "--alloc", "--alloc-mean", "4096", "-o", out, "--",
                      fixture(program), "truth", dir.file("truth.txt")},
                     300, {"HPD_CALLS_RUNTIME="});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("allocations (hpd's runtime, in-process): "), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("Allocations (sampled by hpd's runtime, one per 4.0 KiB"), std::string::npos) << r.out;
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

TEST(AllocRecord, PidDaemonAndAMeanAloneAreRefusedWithAClearMessage) {
  const hpd::test::RunResult r = hpd::test::run(
      {HPD_HPCTL_PATH, "--local", "record", "--alloc", "--pid", "1", "-d", "1", "-o", "/tmp/x.hpr"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--alloc is not supported for --pid yet"), std::string::npos) << r.err;
  const hpd::test::RunResult m =
      hpd::test::run({HPD_HPCTL_PATH, "--local", "record", "--alloc-mean", "4096", "--", "true"});
  EXPECT_NE(m.exit_code, 0);
  EXPECT_NE(m.err.find("--alloc-mean goes with --alloc"), std::string::npos) << m.err;
  const hpd::test::RunResult d =
      hpd::test::run({HPD_HPCTL_PATH, "--daemon", "record", "--alloc", "--", "true"});
  EXPECT_NE(d.exit_code, 0);
  EXPECT_NE(d.err.find("--alloc is not supported through hpd yet"), std::string::npos) << d.err;
}

}  // namespace
