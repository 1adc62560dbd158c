// Latency fixture: functions that spin or sleep for known durations, timed by the program itself.
// `calls_latency OUT`: spin_for() 180 x 1 ms and 20 x 5 ms (a known tail: the 95th percentile is in
// it), sleep_for() 100 x 2 ms, and rec() recursing 10 deep 20 times around a 1 ms spin of its own. Writes one
// line per function to OUT: "name calls avg_ns p95_ns outer_ns", each call measured around the call site.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

volatile unsigned long spins;

NOINLINE void spin_for(long us) {
  const long long end = now_ns() + us * 1000LL;
  while (now_ns() < end) ++spins;
}

NOINLINE void sleep_for(long us) {
  struct timespec t = {0, us * 1000L};
  nanosleep(&t, NULL);
}

// Spins 1 ms at the bottom itself, so that spin_for's calls are only main's.
NOINLINE void rec(int depth) {
  if (depth == 0) {
    const long long end = now_ns() + 1000000LL;
    while (now_ns() < end) ++spins;
  } else {
    rec(depth - 1);
  }
  __asm__ volatile("" ::: "memory");
}

static int by_value(const void* a, const void* b) {
  const long long x = *(const long long*)a, y = *(const long long*)b;
  return x < y ? -1 : x > y;
}

// "name calls avg p95 total" of n measured durations (p95: the smallest value >= 95% of them).
static void report(FILE* out, const char* name, long long* d, int n) {
  long long sum = 0;
  for (int i = 0; i < n; ++i) sum += d[i];
  qsort(d, (size_t)n, sizeof *d, by_value);
  const int rank = (95 * n + 99) / 100;
  fprintf(out, "%s %d %lld %lld %lld\n", name, n, sum / n, d[rank - 1], sum);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  static long long spin[200], sleep[100], recs[20];
  for (int i = 0; i < 200; ++i) {
    const long long t0 = now_ns();
    spin_for(i % 10 == 9 ? 5000 : 1000);
    spin[i] = now_ns() - t0;
  }
  for (int i = 0; i < 100; ++i) {
    const long long t0 = now_ns();
    sleep_for(2000);
    sleep[i] = now_ns() - t0;
  }
  for (int i = 0; i < 20; ++i) {
    const long long t0 = now_ns();
    rec(9);
    recs[i] = now_ns() - t0;
  }
  FILE* out = fopen(argv[1], "w");
  if (out == NULL) return 2;
  report(out, "spin_for", spin, 200);
  report(out, "sleep_for", sleep, 100);
  report(out, "rec", recs, 20);
  return fclose(out) == 0 ? 0 : 2;
}
