/* cfi fixture: spends argv[1] seconds of its CPU time calling clock_gettime(CLOCK_MONOTONIC), which glibc
 * answers in the vDSO, from its own function (no frame pointers). CPU time, not wall time: as many
 * samples on a loaded machine. The CPU clock itself is a system call: it is read once every 1024 calls. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double seconds_of(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) long read_clock_until(double seconds) {
  const double end = seconds_of(CLOCK_THREAD_CPUTIME_ID) + seconds;
  struct timespec ts;
  long calls = 0;
  do {
    for (int i = 0; i < 1024; ++i) {
      clock_gettime(CLOCK_MONOTONIC, &ts);
      ++calls;
    }
  } while (seconds_of(CLOCK_THREAD_CPUTIME_ID) < end);
  return calls;
}

int main(int argc, char** argv) {
  const long calls = read_clock_until(argc > 1 ? atof(argv[1]) : 2.0);
  printf("%ld\n", calls);
  return 0;
}
