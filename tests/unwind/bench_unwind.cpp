// bench_unwind: captures real samples (64 KiB stack copies) of three workloads, then unwinds them
// with the copies cut to 4..64 KiB: µs per sample (cold and warm caches), complete-stack share,
// bytes per sample; and perf's own dwarf post-processing time for comparison. Needs root.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "hpd/unwind/unwinder.h"
#include "perf_script.h"
#include "subprocess.h"
#include "unwind_test_support.h"
#include "word_text.h"

using namespace hpd;
using namespace hpd::unwind_test;

namespace {

struct Workload {
  std::string name;
  std::vector<std::string> argv;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void bench(const Workload& w) {
  test::Background child(w.argv);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::vector<RawModule> modules;
  const RawProcess process = process_from_maps(child.pid(), modules);
  CaptureOptions opts;
  opts.stack_bytes = 65528;  // the largest the kernel accepts (the record size is a u16)
  opts.seconds = 2.0;
  const CaptureResult cap = capture(child.pid(), opts);
  if (!cap.error.empty() || cap.samples.empty()) {
    std::printf("%s: capture failed: %s\n", w.name.c_str(), cap.error.c_str());
    return;
  }
  uint64_t used_max = 0;
  uint64_t used_sum = 0;
  for (const auto& s : cap.samples) {
    used_sum += s.stack.size();
    used_max = std::max<uint64_t>(used_max, s.stack.size());
  }
  const uint64_t fixed = cap.bytes / cap.samples.size() - cap.samples[0].stack_requested;
  std::printf(
      "\n%s: %zu samples, %zu lost; stack copy valid bytes (dyn_size) mean %.0f max %llu; record bytes "
      "without the stack copy: %llu\n",
      w.name.c_str(), cap.samples.size(), static_cast<size_t>(cap.lost),
      static_cast<double>(used_sum) / static_cast<double>(cap.samples.size()),
      static_cast<unsigned long long>(used_max), static_cast<unsigned long long>(fixed));
  std::printf("  %-8s %-10s %-9s %-9s %-9s %-11s %-11s %-8s\n", "copy", "bytes/smp", "complete", "truncated",
              "failed", "cold us/smp", "warm us/smp", "frames");
  for (const uint32_t kib : {4u, 8u, 16u, 32u, 64u}) {
    const uint64_t size = std::min<uint64_t>(kib * 1024ull, 65528);
    Unwinder unwinder;
    std::vector<uint64_t> out;
    size_t counts[4] = {};
    auto pass = [&](bool count) {
      for (const auto& s : cap.samples) {
        StackCopy copy = s.stack_copy();
        copy.bytes = copy.bytes.first(std::min<uint64_t>(size, copy.bytes.size()));
        copy.requested_size = std::min<uint64_t>(size, s.stack_requested);
        const StackEnd end = unwinder.unwind(UnwindContext{&process, &modules, s.time_ns}, s.regs, copy, out);
        if (count) ++counts[static_cast<int>(end)];
      }
    };
    auto t0 = std::chrono::steady_clock::now();
    pass(true);
    const double cold = seconds_since(t0);
    const int reps = 5;
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) pass(false);
    const double warm = seconds_since(t0) / reps;
    const double n = static_cast<double>(cap.samples.size());
    std::printf("  %-8s %-10llu %-9.1f %-9.1f %-9.1f %-11.2f %-11.2f %-8.1f\n",
                (std::to_string(kib) + "K").c_str(), static_cast<unsigned long long>(fixed + size),
                100 * counts[1] / n, 100 * counts[2] / n, 100 * counts[3] / n, 1e6 * cold / n, 1e6 * warm / n,
                static_cast<double>(unwinder.stats().frames) / (n * (1 + reps)));
  }
}

// perf record --call-graph dwarf + perf script: perf's user-space unwinding (and printing) time.
void bench_perf(const std::string& fixture) {
  const std::string dir = "/tmp/bench_unwind_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string data = dir + "/perf.data";
  const std::string rec = std::string(HPD_PERF) +
                          " record -q -e task-clock -c 1000000 --call-graph dwarf,16384 -o " + data + " -- " +
                          fixture + " 2 >/dev/null 2>&1";
  if (std::system(rec.c_str()) != 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string script =
      std::string(HPD_PERF) + " script -i " + data + " -F ip,sym > " + dir + "/out.txt 2>/dev/null";
  if (std::system(script.c_str()) != 0) return;
  const double secs = seconds_since(t0);
  const size_t samples = hpd::test::read_perf_script(dir + "/out.txt").size();
  std::printf(
      "\nperf script (dwarf, 16K) on %s: %zu samples in %.3f s = %.1f us/sample (unwinding + symbolizing + "
      "printing); perf.data %llu bytes = %.0f bytes/sample\n",
      fixture.c_str(), samples, secs, samples ? 1e6 * secs / static_cast<double>(samples) : 0.0,
      static_cast<unsigned long long>(std::filesystem::file_size(data)),
      samples ? static_cast<double>(std::filesystem::file_size(data)) / static_cast<double>(samples) : 0.0);
  std::filesystem::remove_all(dir);
}

}  // namespace

int main() {
  const std::string fixtures = HPD_UNWIND_FIXTURE_DIR;
  const std::string input = "/tmp/bench_unwind_xz_input.txt";
  hpd::test::write_word_text(input, 6'000'000, 8);
  std::vector<Workload> workloads = {
      {"chain_gcc (C, -O2 -fomit-frame-pointer)", {fixtures + "/chain_gcc", "4"}},
      {"xz -6 (stripped Debian binary + liblzma)", {HPD_XZ, "-T1", "-6", "-c", input}}};
  if (std::filesystem::exists(fixtures + "/moves_loop")) {
    workloads.push_back({"moves_loop (Rust, 16 KiB structs on the stack)", {fixtures + "/moves_loop", "4"}});
  }
  for (const auto& w : workloads) bench(w);
  if (!std::string(HPD_PERF).empty()) bench_perf(fixtures + "/chain_gcc");
  std::filesystem::remove(input);
  return 0;
}
