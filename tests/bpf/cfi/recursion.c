/* cfi fixture: a 200-deep recursion (no frame pointers) whose innermost call spins for argv[1] seconds of its
 * CPU time. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU seconds: as many samples on a loaded machine */
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void spin_at_bottom(double until) {
  while (cpu_seconds() < until)
    for (int i = 0; i < 10000; ++i) sink += (unsigned long)i * 3;
}

__attribute__((noinline)) void descend(int depth, double until) {
  if (depth == 0)
    spin_at_bottom(until);
  else
    descend(depth - 1, until);
  sink += (unsigned long)depth; /* not a tail call */
}

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? atof(argv[1]) : 2.0;
  descend(200, cpu_seconds() + seconds);
  printf("%lu\n", sink);
  return 0;
}
