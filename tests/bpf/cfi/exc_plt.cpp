// cfi fixture (C++, -O2 -g, no frame pointers): two phases, each measured by the thread's own CPU clock.
// Phase 1 throws through a few frames and catches, and spins inside the catch handler; phase 2 calls
// a shared library's function through the PLT, whose leaf spins, in short calls so that samples also
// land in the PLT stubs. Usage: exc_plt SECONDS_PER_PHASE TRUTH_FILE, seconds of the thread's CPU time
// (a loaded machine stretches the run, the samples stay as many). The truth file gets the CPU time of
// each phase and of the handler's spin, in ns.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

extern "C" unsigned long lib_spin(unsigned long rounds);  // libexc_spin.so, through the PLT

namespace {

volatile unsigned long sink;

long long now_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

}  // namespace

__attribute__((noinline)) void spin_in_handler(unsigned long rounds) {
  for (unsigned long i = 0; i < rounds; ++i) sink = sink + i * 7;
}

__attribute__((noinline)) void raise_from(int depth) {
  if (depth == 0) throw std::runtime_error("deep");
  raise_from(depth - 1);
  sink = sink + static_cast<unsigned long>(depth);  // not a tail call
}

// Returns the thread CPU time spent in the handler's spin.
__attribute__((noinline)) long long exception_phase(double seconds) {
  const long long end = now_ns(CLOCK_THREAD_CPUTIME_ID) + static_cast<long long>(seconds * 1e9);
  long long in_handler = 0;
  while (now_ns(CLOCK_THREAD_CPUTIME_ID) < end) {
    try {
      raise_from(6);
    } catch (const std::runtime_error& e) {
      const long long before = now_ns(CLOCK_THREAD_CPUTIME_ID);
      spin_in_handler(30000 + e.what()[0]);
      in_handler += now_ns(CLOCK_THREAD_CPUTIME_ID) - before;
    }
  }
  return in_handler;
}

__attribute__((noinline)) void plt_phase(double seconds) {
  const long long end = now_ns(CLOCK_THREAD_CPUTIME_ID) + static_cast<long long>(seconds * 1e9);
  while (now_ns(CLOCK_THREAD_CPUTIME_ID) < end) {
    for (int i = 0; i < 1000; ++i) sink = sink + lib_spin(40);
  }
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const double seconds = std::atof(argv[1]);
  const long long t0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
  const long long handler = exception_phase(seconds);
  const long long t1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
  plt_phase(seconds);
  const long long t2 = now_ns(CLOCK_THREAD_CPUTIME_ID);
  FILE* out = std::fopen(argv[2], "w");
  if (out == nullptr) return 1;
  std::fprintf(out, "%lld %lld %lld\n", t1 - t0, handler, t2 - t1);
  std::fclose(out);
  return 0;
}
