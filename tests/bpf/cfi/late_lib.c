/* cfi fixture library, dlopen()ed by late_loader after the recording began; no frame pointers. */
#include <time.h>

static volatile unsigned long sink;

static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void late_inner(double until) {
  while (mono() < until)
    for (int i = 0; i < 10000; ++i) sink += (unsigned long)i * 7;
}

__attribute__((noinline)) unsigned long late_work(double seconds) {
  late_inner(mono() + seconds);
  return sink + 1;
}
