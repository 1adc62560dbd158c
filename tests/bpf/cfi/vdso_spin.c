/* cfi fixture: spends argv[1] seconds calling clock_gettime, which glibc answers in the vDSO, from its
 * own function (no frame pointers). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) long read_clock_until(double seconds) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const double end = ts.tv_sec + ts.tv_nsec / 1e9 + seconds;
  long calls = 0;
  do {
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ++calls;
  } while (ts.tv_sec + ts.tv_nsec / 1e9 < end);
  return calls;
}

int main(int argc, char** argv) {
  const long calls = read_clock_until(argc > 1 ? atof(argv[1]) : 2.0);
  printf("%ld\n", calls);
  return 0;
}
