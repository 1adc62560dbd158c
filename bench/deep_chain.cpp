// A C++ call chain HPD_CHAIN_DEPTH functions deep below main (Level<DEPTH>::run ... Level<1>::run,
// each a function of its own), spinning in the innermost; runs for argv[1] seconds of its CPU time.
// For the cost of the user stack walks per sample at a known depth (bench/overhead_bpf_programs.sh
// with FIXTURE=build/bench/deep_chain_40, docs/performance.md "The eBPF programs' own cost"): built
// -O2 -g with frame pointers, so that the frame-pointer walk and the cfi walk both reach main.
// Frames of three shapes: a large local array, callee-saved registers, a plain frame.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>

#ifndef HPD_CHAIN_FRAME_BYTES
#define HPD_CHAIN_FRAME_BYTES 512  // the local array of every third function
#endif

#ifndef HPD_CHAIN_DEPTH
#define HPD_CHAIN_DEPTH 40
#endif

volatile uint64_t sink;

// noipa (gcc's): no interprocedural shortcut through the chain either.
#if defined(__clang__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE __attribute__((noinline, noipa))
#endif

template <int N>
struct Level {
  static NOINLINE uint64_t run(uint64_t n);
};

template <>
NOINLINE uint64_t Level<0>::run(uint64_t n) {
  uint64_t x = n | 1;  // xorshift64, n rounds
  for (uint64_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  sink = x;
  return x;
}

template <int N>
NOINLINE uint64_t Level<N>::run(uint64_t n) {
  if constexpr (N % 3 == 0) {
    char buf[HPD_CHAIN_FRAME_BYTES];
    memset(buf, (int)n, sizeof buf);
    sink = sink + (uint64_t)buf[n % sizeof buf];
    const uint64_t r = Level<N - 1>::run(n + (uint64_t)buf[N]);
    return r ^ (uint64_t)buf[(n * 7) % sizeof buf];
  } else if constexpr (N % 3 == 1) {
    const uint64_t a = n * N, b = n ^ (uint64_t)N, c = sink;
    const uint64_t r = Level<N - 1>::run(n);
    return r + a * b + c;
  } else {
    const uint64_t r = Level<N - 1>::run(n);
    sink = sink + r;
    return r * 3;
  }
}

// Seconds of the process's CPU time (one thread), not wall time (at most ten times as much wall time).
int main(int argc, char** argv) {
  const double seconds = argc > 1 ? atof(argv[1]) : 2.0;
  const std::clock_t cpu_end = std::clock() + static_cast<std::clock_t>(seconds * CLOCKS_PER_SEC);
  const auto wall_end = std::chrono::steady_clock::now() + std::chrono::duration<double>(10 * seconds);
  uint64_t total = 0;
  while (std::clock() < cpu_end && std::chrono::steady_clock::now() < wall_end)
    total += Level<HPD_CHAIN_DEPTH>::run(200000);
  sink = total;
  return 0;
}
