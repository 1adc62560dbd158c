// Times symbolize_profile on a synthetic profile: 1,000,000 samples over 10,000 unique stacks.
// Usage: symbolize_bench [module path] (default: libc). Not a test; prints timings.
#include <chrono>
#include <cstdio>
#include <random>

#include "hpd/symbolizer/convert.h"
#include "test_util.h"

using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

int main(int argc, char** argv) {
  const std::string module = argc > 1 ? argv[1] : "/lib/x86_64-linux-gnu/libc.so.6";
  const size_t kStacks = 10000, kSamples = 1000000, kDepth = 20, kAddressPool = 50000, kThreads = 8;
  const uint64_t kBase = 0x7f0000000000ull;
  const auto segments = hpd::test::load_segments(module);
  const hpd::test::Segment* text = nullptr;
  for (const auto& s : segments) {
    if (s.exec) text = &s;
  }
  if (text == nullptr) {
    std::fprintf(stderr, "%s: no executable segment\n", module.c_str());
    return 1;
  }
  // Builds a profile of `samples` samples spread over `stacks` random stacks of depth kDepth.
  auto make_profile = [&](size_t stacks, size_t samples) {
    hpd::RawProfile raw;
    const uint32_t m = raw.intern_module(module, "");
    hpd::RawProcess& p = raw.process(1000);
    p.name = "bench";
    p.end_ns = 1;
    p.mappings.push_back(hpd::RawMapping{kBase, kBase + text->filesz, text->offset, m, 0});
    for (size_t t = 0; t < kThreads; ++t) raw.thread(1000, static_cast<int32_t>(1000 + t)).name = "t";
    std::mt19937_64 rng(42);
    std::vector<uint64_t> pool(kAddressPool);
    for (auto& a : pool) a = kBase + rng() % text->filesz;
    std::vector<uint64_t> user(kDepth);
    for (size_t i = 0; i < stacks; ++i) {
      for (auto& a : user) a = pool[rng() % pool.size()];
      raw.stacks.intern({}, user);
    }
    raw.samples.reserve(samples);
    for (size_t i = 0; i < samples; ++i) {
      hpd::RawSample s;
      s.time_ns = i * 1000;
      s.pid = 1000;
      s.tid = static_cast<int32_t>(1000 + i % kThreads);
      s.stack = static_cast<uint32_t>(rng() % raw.stacks.size());
      raw.samples.push_back(s);
    }
    return raw;
  };

  struct Scenario {
    const char* what;
    size_t stacks, samples;
  };
  for (const Scenario& sc :
       {Scenario{"per-sample cost", 10, kSamples}, Scenario{"per-stack cost", kStacks, kStacks},
        Scenario{"full", kStacks, kSamples}}) {
    const hpd::RawProfile raw = make_profile(sc.stacks, sc.samples);
    for (int run = 0; run < 2; ++run) {
      hpd::Symbolizer symbolizer;
      symbolizer.module_info(hpd::test::module_ref(module));  // exclude reading the ELF file
      const auto t0 = Clock::now();
      const hpd::Profile out = hpd::symbolize_profile(raw, symbolizer);
      const double total = ms_since(t0);
      std::printf(
          "%-16s run %d: %7.1f ms; %zu raw stacks, %zu samples -> %zu profile stacks, %zu frames, %zu "
          "funcs\n",
          sc.what, run, total, raw.stacks.size(), raw.samples.size(), out.stacks.size(), out.frames.size(),
          out.funcs.size());
    }
  }
  // Symbol lookups alone: unique addresses resolved in one batch.
  std::mt19937_64 rng(7);
  std::vector<uint64_t> offsets(kAddressPool);
  for (auto& o : offsets) o = text->offset + rng() % text->filesz;
  hpd::Symbolizer symbolizer;
  symbolizer.module_info(hpd::test::module_ref(module));
  const auto t1 = Clock::now();
  const auto locs = symbolizer.resolve(hpd::test::module_ref(module), offsets);
  std::printf("resolve of %zu unique offsets: %.1f ms\n", offsets.size(), ms_since(t1));
  return 0;
}
