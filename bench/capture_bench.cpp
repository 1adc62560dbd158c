// Measures the capture file: bytes and write CPU per sample while streaming a 4999 Hz-like
// recording, and `hpctl convert` of 1,000,000 samples (read, symbolize, write) to each format.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "hpd/capture/capture.h"
#include "hpd/export/collapsed.h"
#include "hpd/export/firefox.h"
#include "hpd/export/pprof.h"
#include "hpd/export/report.h"
#include "hpd/symbolizer/convert.h"
#include "hpd/symbolizer/symbolizer.h"

namespace {

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct ExecMapping {
  uint64_t start, end, offset;
  std::string path;
};

// Executable file mappings of this process (the bench binary, libc, libstdc++...): real code that
// the symbolizer resolves, as it would a recorded program's.
std::vector<ExecMapping> exec_mappings() {
  std::ifstream maps("/proc/self/maps");
  std::vector<ExecMapping> out;
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, path;
    in >> range >> perms >> offset >> dev >> inode >> path;
    if (perms.size() < 3 || perms[2] != 'x' || path.empty() || path[0] != '/') continue;
    const size_t dash = range.find('-');
    out.push_back({std::stoull(range.substr(0, dash), nullptr, 16),
                   std::stoull(range.substr(dash + 1), nullptr, 16), std::stoull(offset, nullptr, 16), path});
  }
  return out;
}

// A recording of `threads` threads at 4999 Hz: 3000 distinct stacks of depth 12..40 built from
// shared call-tree prefixes over real code addresses; leaves drawn with a hot-spot skew; time and
// CPU deltas with jitter as real ones have; 2% off-CPU samples.
class Stream {
 public:
  explicit Stream(int threads) : rng_(42), threads_(threads) {
    const auto maps = exec_mappings();
    profile_.info.start_mono_ns = 1'000'000'000;
    profile_.info.start_unix_ns = 1'767'225'600'000'000'000ull;
    profile_.info.interval_ns = 200'040;
    profile_.info.frequency_hz = 4999;
    profile_.info.backend = "perf";
    profile_.info.event = "task-clock";
    profile_.info.target = "bench";
    hpd::RawProcess& process = profile_.process(4242);
    process.name = "bench";
    for (const ExecMapping& m : maps) {
      const uint32_t module = profile_.intern_module(m.path, "");
      process.mappings.push_back(hpd::RawMapping{m.start, m.end, m.offset, module, 0, 0});
    }
    for (int t = 0; t < threads; ++t) profile_.thread(4242, 4242 + t).name = "worker-" + std::to_string(t);
    std::vector<uint64_t> pool;  // 4000 code addresses: the functions a program spends time in
    for (int i = 0; i < 4000; ++i) {
      const ExecMapping& m = maps[static_cast<size_t>(i) % maps.size()];
      pool.push_back(m.start + rng_() % (m.end - m.start));
    }
    std::vector<std::vector<uint64_t>> prefixes(60);
    for (auto& p : prefixes) {
      const size_t depth = 10 + rng_() % 20;
      for (size_t d = 0; d < depth; ++d) p.push_back(pool[rng_() % pool.size()]);
    }
    for (int s = 0; s < 3000; ++s) {
      std::vector<uint64_t> user;  // leaf first
      const size_t extra = 2 + rng_() % 10;
      for (size_t d = 0; d < extra; ++d) user.push_back(pool[rng_() % pool.size()]);
      const auto& prefix = prefixes[static_cast<size_t>(s) % prefixes.size()];
      user.insert(user.end(), prefix.begin(), prefix.end());
      stacks_.push_back(profile_.stacks.intern({}, user));
    }
  }

  // Appends `n` samples round-robin over the threads.
  void produce(size_t n) {
    std::geometric_distribution<size_t> hot(0.002);
    for (size_t i = 0; i < n; ++i) {
      hpd::RawSample s;
      const int t = static_cast<int>(count_ % static_cast<uint64_t>(threads_));
      s.pid = 4242;
      s.tid = 4242 + t;
      time_ += 200'040 / static_cast<uint64_t>(threads_) + rng_() % 2000;
      s.time_ns = time_;
      s.stack = stacks_[std::min(hot(rng_), stacks_.size() - 1)];
      s.cpu_delta_ns = 195'000 + rng_() % 10'000;
      s.cpu = static_cast<uint16_t>(rng_() % 2);
      s.stack_end = hpd::StackEnd::kComplete;
      if (rng_() % 50 == 0) {
        s.kind = hpd::SampleKind::kOffCpu;
        s.cpu_delta_ns = 0;
        s.off_cpu_ns = 1'000'000 + rng_() % 5'000'000;
      }
      profile_.samples.push_back(s);
      ++count_;
    }
  }
  hpd::RawProfile& profile() { return profile_; }

 private:
  std::mt19937_64 rng_;
  int threads_;
  hpd::RawProfile profile_;
  std::vector<uint32_t> stacks_;
  uint64_t time_ = 1'000'000'000;
  uint64_t count_ = 0;
};

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("hpd-capture-bench-" + std::to_string(getpid()) + "-" + name))
      .string();
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const std::string hpr = temp_path("run.hpr");

  // 1. Streaming while recording: 2 threads at 4999 Hz for 60 s = 600k samples, flushed every
  //    250 ms of recording (2500 new samples per flush), as hpctl record -o run.hpr does.
  {
    const int threads = 2;
    const size_t per_flush = 4999 * threads / 4;
    const size_t flushes = 240;
    std::vector<double> ns_per_sample, bytes_per_sample;
    for (int r = 0; r < runs; ++r) {
      Stream stream(threads);
      double cpu = 0;
      hpd::CaptureWriter writer(hpr);
      for (size_t f = 0; f < flushes; ++f) {
        stream.produce(per_flush);
        const double t0 = thread_cpu_s();
        writer.flush(stream.profile());
        cpu += thread_cpu_s() - t0;
      }
      const double t0 = thread_cpu_s();
      writer.finish(stream.profile());
      cpu += thread_cpu_s() - t0;
      const double n = static_cast<double>(stream.profile().samples.size());
      ns_per_sample.push_back(cpu * 1e9 / n);
      bytes_per_sample.push_back(static_cast<double>(std::filesystem::file_size(hpr)) / n);
    }
    std::printf("stream: %zu samples (2 threads x 4999 Hz x 60 s), %zu flushes, runs %d\n",
                per_flush * flushes, flushes, runs);
    std::printf(
        "stream: median %.2f bytes/sample, %.0f ns write CPU/sample (%.2f%% of one CPU at 9998 samples/s)\n",
        median(bytes_per_sample), median(ns_per_sample), median(ns_per_sample) * 9998 / 1e9 * 100);
  }

  // 2. Convert 1,000,000 samples: read the capture, symbolize, write each format.
  {
    Stream stream(4);
    stream.produce(1'000'000);
    hpd::write_capture_file(stream.profile(), hpr);
    std::printf("convert: 1000000 samples, %zu stacks, capture %.1f MiB\n", stream.profile().stacks.size(),
                static_cast<double>(std::filesystem::file_size(hpr)) / 1048576.0);
    std::vector<double> read_s, symbolize_s;
    std::vector<std::pair<std::string, std::vector<double>>> formats = {
        {"firefox (.json.gz)", {}}, {"pprof (.pb.gz)", {}}, {"collapsed", {}}, {"report", {}}};
    const std::string out = temp_path("out");
    for (int r = 0; r < runs; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      hpd::CaptureContents capture = hpd::read_capture_file(hpr);
      auto t1 = std::chrono::steady_clock::now();
      hpd::Symbolizer symbolizer;
      const hpd::Profile profile = hpd::symbolize_profile(capture.profile, symbolizer, {});
      auto t2 = std::chrono::steady_clock::now();
      read_s.push_back(std::chrono::duration<double>(t1 - t0).count());
      symbolize_s.push_back(std::chrono::duration<double>(t2 - t1).count());
      const std::vector<std::function<void()>> writers = {
          [&] { hpd::write_firefox_file(profile, out + ".json.gz"); },
          [&] { hpd::write_pprof_file(profile, out + ".pb.gz"); },
          [&] { hpd::write_collapsed_file(profile, out + ".collapsed"); },
          [&] {
            std::ostringstream text;
            hpd::ReportOptions options;
            hpd::print_report(hpd::compute_report(profile, options), text, options);
          }};
      for (size_t f = 0; f < writers.size(); ++f) {
        const auto w0 = std::chrono::steady_clock::now();
        writers[f]();
        formats[f].second.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
      }
    }
    const double base = median(read_s) + median(symbolize_s);
    std::printf("convert: median read %.3f s, symbolize %.3f s\n", median(read_s), median(symbolize_s));
    for (const auto& [name, times] : formats) {
      std::printf("convert: %-20s write %.3f s, total (read+symbolize+write) %.3f s\n", name.c_str(),
                  median(times), base + median(times));
    }
    for (const char* ext : {".json.gz", ".pb.gz", ".collapsed"}) std::filesystem::remove(out + ext);
  }
  std::filesystem::remove(hpr);
  return 0;
}
