/* cfi fixture library, linked by early_start (and, built again under another name, dlopen()ed by it);
 * no frame pointers. Spins for a given CPU time. */
#include <time.h>

static volatile unsigned long sink;

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU seconds: as many samples on a loaded machine */
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void early_inner(double until) {
  while (cpu_seconds() < until)
    for (int i = 0; i < 2000; ++i) sink += (unsigned long)i * 7;
}

/* Spins for `seconds` of this thread's CPU time; returns the CPU seconds it measured. */
__attribute__((noinline)) double early_work(double seconds) {
  const double from = cpu_seconds();
  early_inner(from + seconds);
  return cpu_seconds() - from;
}
