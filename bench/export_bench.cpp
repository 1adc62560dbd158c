// Measures the Firefox export of a large synthetic Profile: write time and size per sample
// (gzip and plain), and for reference the reader and the report on the same data
// (--report-runs N: the report N more times, in thread CPU time).
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "hpd/export/firefox.h"
#include "hpd/export/firefox_reader.h"
#include "hpd/export/report.h"

namespace {

struct Shape {
  size_t samples = 1000000;
  size_t stacks = 10000;  // distinct sampled (leaf) stacks
  size_t funcs = 3000;
  size_t threads = 8;
};

// 1M samples over `stacks` leaf stacks of depth 15..25, whose outer halves are shared by groups of
// stacks as real call trees are; leaves drawn with a skewed (hot-spot) distribution; 1% off-CPU.
hpd::Profile make_profile(const Shape& shape) {
  std::mt19937_64 rng(42);
  hpd::Profile p;
  p.meta.product = "export_bench";
  auto& info = p.meta.recording;
  info.start_unix_ns = 1767225600000000000ull;
  info.start_mono_ns = 5000000000ull;
  info.interval_ns = 1000000;
  info.frequency_hz = 1000;

  std::vector<uint32_t> libs;
  for (int i = 0; i < 6; ++i) {
    hpd::Lib lib;
    lib.name = "libbench" + std::to_string(i) + ".so";
    lib.path = "/usr/lib/" + lib.name;
    lib.build_id = "0123456789abcdef0123456789abcdef0123456" + std::to_string(i);
    libs.push_back(p.intern_lib(lib));
  }
  // A few variants (call sites) per function, as frames.
  std::vector<uint32_t> frames;
  for (size_t f = 0; f < shape.funcs; ++f) {
    const uint32_t lib = libs[f % libs.size()];
    const std::string name = "bench::module" + std::to_string(f % 97) + "::Component" + std::to_string(f) +
                             "::process(std::vector<int, std::allocator<int> > const&, unsigned long)";
    const uint32_t func = p.intern_func(name, "/src/module" + std::to_string(f % 97) + ".cpp", lib);
    const uint32_t symbol = p.intern_native_symbol(lib, 0x1000 + f * 0x100, 0x100, name);
    for (int v = 0; v < 4; ++v) {
      hpd::Frame fr;
      fr.func = func;
      fr.native_symbol = symbol;
      fr.lib = lib;
      fr.address = static_cast<int64_t>(0x1000 + f * 0x100 + 0x10 * v + 7);
      fr.line = static_cast<uint32_t>(10 + v);
      frames.push_back(p.intern_frame(fr));
    }
  }
  std::vector<uint32_t> leaves;
  const size_t groups = shape.stacks / 10;
  for (size_t k = 0; k < shape.stacks; ++k) {
    std::mt19937_64 group_rng(k % groups);  // same outer frames within a group
    const size_t depth = 15 + rng() % 11;
    uint32_t stack = hpd::kNoIndex;
    for (size_t j = 0; j < depth; ++j) {
      auto& r = j < depth / 2 ? group_rng : rng;
      stack = p.intern_stack(stack, frames[r() % frames.size()]);
    }
    leaves.push_back(stack);
  }
  std::vector<uint64_t> last_time(shape.threads, info.start_mono_ns);
  for (size_t t = 0; t < shape.threads; ++t) {
    hpd::Thread th;
    th.pid = 1000;
    th.tid = static_cast<int32_t>(1000 + t);
    th.name = t == 0 ? "bench" : "worker-" + std::to_string(t);
    th.process_name = "bench";
    th.is_main = t == 0;
    p.threads.push_back(std::move(th));
  }
  std::geometric_distribution<size_t> hot(0.002);
  for (size_t i = 0; i < shape.samples; ++i) {
    const size_t t = i % shape.threads;
    hpd::Sample s;
    last_time[t] += 1000000 + rng() % 2000;
    s.time_ns = last_time[t];
    s.stack = leaves[hot(rng) % leaves.size()];
    if (rng() % 100 == 0) {
      s.kind = hpd::SampleKind::kOffCpu;
      s.off_cpu_ns = 100000 + rng() % 5000000;
    } else {
      s.cpu_delta_ns = 900000 + rng() % 200000;
    }
    p.threads[t].samples.push_back(s);
  }
  info.end_mono_ns = *std::max_element(last_time.begin(), last_time.end()) + 1000000;
  return p;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// This thread's CPU time: on a shared machine the wall time of a step of a few milliseconds is
// mostly waiting for a CPU.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  Shape shape;
  std::string dir = std::filesystem::temp_directory_path().string();
  bool keep = false;       // --keep: leave the written files for inspection
  size_t report_runs = 0;  // --report-runs N: also time the report N more times in thread CPU time
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--keep") == 0) keep = true;
    if (i + 1 >= argc) continue;
    if (std::strcmp(argv[i], "--samples") == 0)
      shape.samples = std::stoul(argv[++i]);
    else if (std::strcmp(argv[i], "--dir") == 0)
      dir = argv[++i];
    else if (std::strcmp(argv[i], "--report-runs") == 0)
      report_runs = std::stoul(argv[++i]);
  }
  auto start = std::chrono::steady_clock::now();
  const hpd::Profile profile = make_profile(shape);
  const double build_s = seconds_since(start);
  const std::string gz = dir + "/export_bench-" + std::to_string(getpid()) + ".json.gz";
  const std::string plain = dir + "/export_bench-" + std::to_string(getpid()) + ".json";

  try {
    start = std::chrono::steady_clock::now();
    hpd::write_firefox_file(profile, gz);
    const double gz_s = seconds_since(start);
    const auto gz_bytes = std::filesystem::file_size(gz);

    start = std::chrono::steady_clock::now();
    hpd::write_firefox_file(profile, plain);
    const double plain_s = seconds_since(start);
    const auto plain_bytes = std::filesystem::file_size(plain);

    start = std::chrono::steady_clock::now();
    const hpd::Profile read = hpd::read_firefox_file(gz);
    const double read_s = seconds_since(start);

    start = std::chrono::steady_clock::now();
    const hpd::Report report = hpd::compute_report(read, hpd::ReportOptions{});
    const double report_s = seconds_since(start);

    const double n = static_cast<double>(shape.samples);
    std::printf(
        "export_bench: %zu samples, %zu sampled stacks (%zu stack nodes), %zu funcs, %zu frames, %zu threads "
        "(built in %.2f s)\n",
        shape.samples, shape.stacks, profile.stacks.size(), profile.funcs.size(), profile.frames.size(),
        shape.threads, build_s);
    std::printf("write .json.gz: %.3f s, %llu bytes, %.2f bytes/sample\n", gz_s,
                static_cast<unsigned long long>(gz_bytes), static_cast<double>(gz_bytes) / n);
    std::printf("write .json:    %.3f s, %llu bytes, %.2f bytes/sample\n", plain_s,
                static_cast<unsigned long long>(plain_bytes), static_cast<double>(plain_bytes) / n);
    std::printf("read .json.gz:  %.3f s; report: %.3f s (%zu functions)\n", read_s, report_s,
                report.rows.size());
    if (report_runs > 0) {
      std::vector<double> cpu_ms;
      for (size_t k = 0; k < report_runs; ++k) {
        const double before = thread_cpu_seconds();
        const hpd::Report again = hpd::compute_report(read, hpd::ReportOptions{});
        cpu_ms.push_back((thread_cpu_seconds() - before) * 1e3);
      }
      std::sort(cpu_ms.begin(), cpu_ms.end());
      std::printf("report x %zu:     thread CPU min %.1f ms, median %.1f ms\n", report_runs, cpu_ms.front(),
                  cpu_ms[cpu_ms.size() / 2]);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "export_bench: %s\n", e.what());
    std::filesystem::remove(gz);
    std::filesystem::remove(plain);
    return 1;
  }
  if (keep) {
    std::printf("kept %s and %s\n", gz.c_str(), plain.c_str());
  } else {
    std::filesystem::remove(gz);
    std::filesystem::remove(plain);
  }
  return 0;
}
