// Nested timed calls: main -> outer -> middle -> leaf_spin, every function instrumented, leaf_spin
// spinning without calls of its own. `calls_nested OUT MS`: outer() spins MS milliseconds of thread
// CPU time in 10 calls of middle(); writes "outer_cpu_ns N" to OUT, measured around the call.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static long long thread_cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

volatile unsigned long sink;

// Spins until the thread has used `ns` of CPU time; the clock is read every 100,000 iterations.
NOINLINE void leaf_spin(long long ns) {
  const long long end = thread_cpu_ns() + ns;
  unsigned long x = sink;
  do {
    for (int i = 0; i < 100000; ++i) {
      x = x * 6364136223846793005UL + 1442695040888963407UL;
      __asm__ volatile("" : "+r"(x));
    }
  } while (thread_cpu_ns() < end);
  sink = x;
}

NOINLINE void middle(long long ns) {
  leaf_spin(ns);
  __asm__ volatile("" ::: "memory");
}

NOINLINE void outer(long long ns) {
  for (int i = 0; i < 10; ++i) middle(ns / 10);
  __asm__ volatile("" ::: "memory");
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const long long ms = atoll(argv[2]);
  const long long start = thread_cpu_ns();
  outer(ms * 1000000LL);
  const long long used = thread_cpu_ns() - start;
  FILE* out = fopen(argv[1], "w");
  if (!out) return 1;
  fprintf(out, "outer_cpu_ns %lld\n", used);
  return fclose(out) == 0 ? 0 : 1;
}
