/* cfi fixture library, dlopen()ed by late_loader after the recording began; no frame pointers. */
#include <time.h>

static volatile unsigned long sink;

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU seconds: as many samples on a loaded machine */
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void late_inner(double until) {
  while (cpu_seconds() < until)
    for (int i = 0; i < 10000; ++i) sink += (unsigned long)i * 7;
}

__attribute__((noinline)) unsigned long late_work(double seconds) {
  late_inner(cpu_seconds() + seconds);
  return sink + 1;
}
