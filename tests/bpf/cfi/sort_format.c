/* cfi fixture: a program built with frame pointers that spends its time inside glibc (which has none):
 * qsort calling back into its comparator, and snprintf. Runs for argv[1] seconds of its CPU time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile unsigned long sink;

static int compare_ints(const void* a, const void* b) {
  const int x = *(const int*)a, y = *(const int*)b;
  return (x > y) - (x < y);
}

__attribute__((noinline)) static void sort_round(int* values, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) values[i] = (int)((i * 2654435761u) ^ seed);
  qsort(values, n, sizeof values[0], compare_ints);
  sink += (unsigned long)values[n / 2];
}

__attribute__((noinline)) static void format_round(unsigned seed) {
  char buf[256];
  for (int i = 0; i < 3000; ++i) {
    const int len =
        snprintf(buf, sizeof buf, "%d %.6f %s %x", i, seed * 1.25 + i, "format", seed ^ (unsigned)i);
    sink += (unsigned long)len;
  }
}

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU seconds: as many samples on a loaded machine */
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? atof(argv[1]) : 2.0;
  static int values[20000];
  const double end = cpu_seconds() + seconds;
  for (unsigned seed = 1; cpu_seconds() < end; ++seed) {
    sort_round(values, sizeof values / sizeof values[0], seed);
    format_round(seed);
  }
  printf("%lu\n", sink);
  return 0;
}
