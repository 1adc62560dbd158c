// The allocation tests' shared checks (alloc_truth.h).
#include "alloc_truth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>
#include <utility>

#include "cpu_clock.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace hpd::test {

std::map<std::string, AllocTruth> read_alloc_truth(const std::string& path) {
  std::map<std::string, AllocTruth> out;
  std::ifstream in(path);
  std::string name;
  AllocTruth t;
  while (in >> name >> t.blocks >> t.size >> t.leaked) out[name] = t;
  return out;
}

double alloc_variance(double blocks, double size, double mean) {
  const double p = -std::expm1(-size / mean);
  return blocks * size * size * (1.0 - p) / p;
}

double alloc_allowed_error(double blocks, double size, double mean) {
  return 5.0 * std::sqrt(alloc_variance(blocks, size, mean)) + 1.0;
}

double alloc_share_allowed_error(const std::map<std::string, AllocTruth>& truth, const std::string& name,
                                 double mean) {
  double all_bytes = 0, own_variance = 0, others_variance = 0;
  for (const auto& [function, t] : truth) {
    all_bytes += t.blocks * t.size;
    (function == name ? own_variance : others_variance) += alloc_variance(t.blocks, t.size, mean);
  }
  const AllocTruth& own = truth.at(name);
  const double share = own.blocks * own.size / all_bytes;
  const double variance =
      ((1 - share) * (1 - share) * own_variance + share * share * others_variance) / (all_bytes * all_bytes);
  return 5.0 * 100.0 * std::sqrt(variance);
}

uint64_t check_alloc_estimates(const nlohmann::json& doc, const std::map<std::string, AllocTruth>& truth,
                               double mean) {
  double truth_bytes = 0;
  std::string leaker;
  for (const auto& [name, t] : truth) {
    truth_bytes += t.blocks * t.size;
    if (t.leaked != 0) leaker = name;
  }
  const double all_bytes = doc["allocations"]["bytes"].get<double>();
  std::string top_live;
  double top_live_bytes = -1;
  for (const nlohmann::json& row : doc["allocations"]["rows"]) {
    if (row["live_self_bytes"].get<double>() > top_live_bytes) {
      top_live_bytes = row["live_self_bytes"].get<double>();
      top_live = row["name"].get<std::string>();
    }
  }
  uint64_t freed_samples = 0;
  for (const auto& [name, t] : truth) {
    SCOPED_TRACE(name);
    const nlohmann::json* row = alloc_row(doc, name);
    EXPECT_NE(row, nullptr) << doc.dump();
    if (row == nullptr) continue;
    const double self = (*row)["self_bytes"].get<double>();
    EXPECT_NEAR(self, t.blocks * t.size, alloc_allowed_error(t.blocks, t.size, mean));
    EXPECT_LE(alloc_share_allowed_error(truth, name, mean), 3.0);
    EXPECT_NEAR(100.0 * self / all_bytes, 100.0 * t.blocks * t.size / truth_bytes, 3.0);
    const double live = (*row)["live_self_bytes"].get<double>();
    std::printf("%-13s %5.2f%% of the bytes (truth %5.2f%%, 5 sd %.2f points), live %.0f (truth %.0f)\n",
                name.c_str(), 100.0 * self / all_bytes, 100.0 * t.blocks * t.size / truth_bytes,
                alloc_share_allowed_error(truth, name, mean), live, t.leaked * t.size);
    if (t.leaked == 0) {
      EXPECT_EQ(live, 0.0);
      freed_samples += (*row)["samples"].get<uint64_t>();
    } else {
      EXPECT_NEAR(live, t.leaked * t.size, alloc_allowed_error(t.leaked, t.size, mean));
    }
  }
  EXPECT_EQ(top_live, leaker) << doc.dump();
  return freed_samples;
}

const nlohmann::json* alloc_row(const nlohmann::json& doc, const std::string& name) {
  for (const nlohmann::json& row : doc["allocations"]["rows"])
    if (row["name"] == name) return &row;
  return nullptr;
}

double heaptrack_bytes(const std::string& text, double* rounding) {
  static const std::regex size(R"(([0-9]+)(\.([0-9]+))?([BKMGT]))");
  std::smatch m;
  if (!std::regex_match(text, m, size)) return -1;
  const double unit = std::pow(1000.0, std::string("BKMGT").find(m[4].str()[0]));
  if (rounding != nullptr) *rounding = 0.5 * unit * std::pow(10.0, -static_cast<double>(m[3].length()));
  return std::stod(m[1].str() + (m[2].matched ? m[2].str() : "")) * unit;
}

namespace {

// The function each of heaptrack's allocation records ("a SIZE TRACE", in the order given) was called
// from, and the bytes of the allocations ("+ INDEX") summed per function. Strings ("s LEN TEXT"),
// instruction pointers ("i IP MODULE [FUNCTION FILE LINE]...", innermost frame first) and traces
// ("t IP PARENT") are numbered from 1; numbers are hexadecimal.
std::string sum_heaptrack_allocations(const std::string& data, HeaptrackTotals& totals) {
  std::vector<std::string> strings = {""};
  std::vector<std::string> ip_function = {""};
  std::vector<size_t> trace_ip = {0};
  std::vector<std::pair<double, std::string>> infos;  // size, function
  const auto hex = [](const std::string& word) { return std::stoull(word, nullptr, 16); };
  std::istringstream in(data);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() < 2 || line[1] != ' ') continue;
    std::istringstream words(line.substr(2));
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (line[0] == 's') {
      const size_t text = line.find(' ', 2);
      strings.push_back(text == std::string::npos ? "" : line.substr(text + 1));
    } else if (line[0] == 'i' && w.size() >= 2) {
      ip_function.push_back(w.size() >= 3 && hex(w[2]) < strings.size() ? strings[hex(w[2])] : "0x" + w[0]);
    } else if (line[0] == 't' && w.size() == 2) {
      trace_ip.push_back(hex(w[0]));
    } else if (line[0] == 'a' && w.size() == 2) {
      const size_t trace = hex(w[1]);
      if (trace >= trace_ip.size() || trace_ip[trace] >= ip_function.size()) return "bad trace: " + line;
      infos.emplace_back(static_cast<double>(hex(w[0])), ip_function[trace_ip[trace]]);
    } else if (line[0] == '+' && w.size() == 1) {
      const size_t info = hex(w[0]);
      if (info >= infos.size()) return "bad allocation: " + line;
      totals.functions[infos[info].second].allocated_bytes += infos[info].first;
    }
  }
  return infos.empty() ? "no allocation records" : "";
}

// heaptrack_print's text: "N calls to allocation functions with X peak consumption from" and
// "X leaked over N calls from", each followed by the function's name (the lines that end in "from:"
// are the stacks under it), and the totals at the end.
void read_heaptrack_print(const std::string& text, HeaptrackTotals& totals) {
  static const std::regex calls_from(
      R"(([0-9]+) calls to allocation functions with \S+ peak consumption from)");
  static const std::regex leaked_from(R"((\S+) leaked over ([0-9]+) calls from)");
  static const std::regex calls_total(R"(calls to allocation functions: ([0-9]+) .*)");
  static const std::regex leaked_total(R"(total memory leaked: (\S+))");
  std::istringstream in(text);
  std::string line, name;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, calls_from) && std::getline(in, name)) {
      totals.functions[name].calls += std::stod(m[1]);
    } else if (std::regex_match(line, m, leaked_from) && std::getline(in, name)) {
      HeaptrackFunction& f = totals.functions[name];
      double rounding = 0;
      f.leaked_bytes += heaptrack_bytes(m[1], &rounding);
      f.leaked_rounding += rounding;
      f.leaked_calls += std::stod(m[2]);
    } else if (std::regex_match(line, m, calls_total)) {
      totals.calls = std::stod(m[1]);
    } else if (std::regex_match(line, m, leaked_total)) {
      totals.leaked_bytes = heaptrack_bytes(m[1], &totals.leaked_rounding);
    }
  }
}

}  // namespace

HeaptrackTotals read_heaptrack(const std::string& data_file) {
  HeaptrackTotals totals;
  // Every allocating function and every leak (-n: no limit of 10), not the peaks nor the temporary.
  const RunResult print = run(
      {"heaptrack_print", "-f", data_file, "-a", "1", "-l", "1", "-p", "0", "-T", "0", "-n", "100000"}, 300);
  if (print.exit_code != 0) {
    totals.error = "heaptrack_print failed: " + print.err;
    return totals;
  }
  read_heaptrack_print(print.out, totals);
  const bool zstd = data_file.size() > 4 && data_file.compare(data_file.size() - 4, 4, ".zst") == 0;
  const RunResult raw = run({zstd ? "zstd" : "gzip", "-dc", data_file}, 300);
  if (raw.exit_code != 0) {
    totals.error = "decompressing " + data_file + " failed: " + raw.err;
    return totals;
  }
  totals.error = sum_heaptrack_allocations(raw.out, totals);
  if (totals.error.empty() && totals.calls == 0)
    totals.error = "no totals in heaptrack_print's text:\n" + print.out;
  return totals;
}

bool wait_for_file(const std::string& path, double timeout_s, pid_t alive) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (std::filesystem::exists(path)) return true;
    if (alive != 0 && !process_running(alive)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void check_alloc_pid_attach(const AllocPidAttach& how) {
  const double mean = how.mean != 0 ? how.mean : 512 * 1024;
  const testing::TempDir dir("hpd-alloc-pid");
  if (!how.as_user.empty()) {
    ASSERT_EQ(::chown(dir.path().c_str(), how.uid, how.gid), 0) << dir.path();
  }
  std::vector<std::string> target_argv = how.as_user;
  if (!how.target_env.empty()) {
    target_argv.push_back("env");
    target_argv.insert(target_argv.end(), how.target_env.begin(), how.target_env.end());
  }
  target_argv.insert(target_argv.end(), {how.fixture, dir.path()});
  if (!how.mode.empty()) target_argv.push_back(how.mode);
  Background target(target_argv);
  ASSERT_TRUE(wait_for_file(dir.file("ready"), 60, target.pid()));
  const pid_t target_pid = target.pid();
  const std::string out = dir.file("pid.hpr");
  const std::string err = dir.file("hpctl.err");
  BackgroundOptions recorder_options;
  recorder_options.stdout_path = dir.file("hpctl.out");
  std::vector<std::string> argv = how.as_user;
  argv.insert(argv.end(), {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>'" + err + "'", how.hpctl});
  if (how.daemon_socket.empty())
    argv.push_back("--local");
  else
    argv.insert(argv.end(), {"--socket", how.daemon_socket, "--daemon"});
  argv.insert(argv.end(), {"record", "--alloc"});
  if (how.mean != 0)
    argv.insert(argv.end(), {"--alloc-mean", std::to_string(static_cast<uint64_t>(how.mean))});
  argv.insert(argv.end(), {"--no-report", "-o", out, "--pid", std::to_string(target_pid), "-d", "600"});
  Background recorder(argv, recorder_options);
  ASSERT_TRUE(wait_for_file(dir.file("done"), 180, recorder.pid())) << read_text_file(err);
  ASSERT_EQ(recorder.terminate(120), 0) << read_text_file(err);
  const std::string summary = read_text_file(err);
  // Detached: the fixture saw its functions' code restored, its memory intact, and allocated again.
  ASSERT_EQ(target.wait(), 0) << summary;
  if (!how.daemon_socket.empty()) {
    EXPECT_NE(summary.find("recorded by hpd"), std::string::npos) << summary;
  }
  EXPECT_NE(summary.find("allocations (uprobes on pid " + std::to_string(target_pid)), std::string::npos)
      << summary;
  for (const std::string& words : how.said) {
    EXPECT_NE(summary.find(words), std::string::npos) << words << "\n" << summary;
  }
  for (const std::string& words : how.not_said) {
    EXPECT_EQ(summary.find(words), std::string::npos) << words << "\n" << summary;
  }
  // The 1,000 frees of blocks allocated before the attach, and most frees of the small blocks (not
  // sampled), are counted as frees of unsampled addresses; the 1,000 free(NULL) apart.
  const std::regex frees(R"(allocations: (\d+) free\(NULL\), (\d+) frees? of addresses not sampled)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(summary, m, frees)) << summary;
  EXPECT_EQ(std::stoull(m[1]), 1000u) << summary;
  EXPECT_GE(std::stoull(m[2]), 1000u) << summary;
  // The process's CPU samples while its allocator was probed, most of them taken while the kernel
  // stepped a probed instruction out of line (its pc in the [uprobes] page): complete from the probed
  // function to the thread's first frame (19% were, the rest failed in that page, before the walk
  // started from the probed address).
  const std::regex complete(R"(complete stacks: on-CPU ([0-9.]+)% of (\d+) samples)");
  ASSERT_TRUE(std::regex_search(summary, m, complete)) << summary;
  EXPECT_GT(std::stoull(m[2]), 0u) << summary;
  EXPECT_GE(std::stod(m[1]), 95.0) << summary;

  const std::map<std::string, AllocTruth> truth = read_alloc_truth(dir.file("truth"));
  ASSERT_EQ(truth.size(), 3u);
  const RunResult rep = run({how.hpctl, "report", "--json", "--limit", "0", out});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const nlohmann::json doc = nlohmann::json::parse(rep.out);
  ASSERT_TRUE(doc.contains("allocations")) << rep.out;
  EXPECT_EQ(doc["allocations"]["mean_bytes"], mean);
  // The leaf frame is the function that called the allocator (the uretprobe's return address).
  const uint64_t freed_samples = check_alloc_estimates(doc, truth, mean);
  EXPECT_EQ(doc["allocations"]["frees_matched"].get<uint64_t>(), freed_samples);
}

}  // namespace hpd::test
