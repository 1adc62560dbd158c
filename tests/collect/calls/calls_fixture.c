// Call-count fixture: callee() is called exactly A times from caller_a() and B times from caller_b(),
// each caller once from main(): `calls_fixture A B [ROUNDS]` repeats that ROUNDS times (default 1).
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;

NOINLINE void callee(unsigned long i) {
  sink += i;
  __asm__ volatile("" ::: "memory");
}

NOINLINE void caller_a(unsigned long n) {
  for (unsigned long i = 0; i < n; ++i) callee(i);
  __asm__ volatile("" ::: "memory");
}

NOINLINE void caller_b(unsigned long n) {
  for (unsigned long i = 0; i < n; ++i) callee(i * 3);
  __asm__ volatile("" ::: "memory");
}

int main(int argc, char** argv) {
  const unsigned long a = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000;
  const unsigned long b = argc > 2 ? strtoul(argv[2], NULL, 10) : 250;
  const unsigned long rounds = argc > 3 ? strtoul(argv[3], NULL, 10) : 1;
  struct timespec t0, t1, c0, c1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (unsigned long r = 0; r < rounds; ++r) {
    caller_a(a);
    caller_b(b);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
  printf("%lu\n", sink);
  // The thread's CPU time of the calls (probe hits included: the kernel charges them to the thread).
  const char* cpu_file = getenv("HPD_CALLS_CPU_FILE");
  if (cpu_file != NULL) {
    FILE* f = fopen(cpu_file, "w");
    if (f == NULL) return 2;
    fprintf(f, "%lld\n", (long long)(c1.tv_sec - c0.tv_sec) * 1000000000LL + (c1.tv_nsec - c0.tv_nsec));
    fclose(f);
  }
  // For bench/calls_bench.sh: the time of the calls alone, without start-up and exit.
  if (getenv("HPD_CALLS_TIME") != NULL)
    fprintf(stderr, "calls_ns %lld\n",
            (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
  return 0;
}
