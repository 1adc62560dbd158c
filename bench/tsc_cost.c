// The cost of one TSC read and of one clock_gettime(CLOCK_MONOTONIC) on this machine: hpd's call
// runtime reads the TSC twice per timed call, so this is the floor of its cost per call (a VM that
// emulates rdtsc makes it the largest part). Usage: tsc_cost [N]   (prints ns per read of each)
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 1000000;
  unsigned long long sink = 0;
  double t0 = now_ns();
  for (long i = 0; i < n; ++i) sink += __rdtsc();
  const double tsc = (now_ns() - t0) / (double)n;
  t0 = now_ns();
  for (long i = 0; i < n; ++i) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    sink += (unsigned long long)t.tv_nsec;
  }
  const double clock = (now_ns() - t0) / (double)n;
  printf("rdtsc %.1f ns  clock_gettime %.1f ns  (%llu)\n", tsc, clock, sink & 1);
  return 0;
}
