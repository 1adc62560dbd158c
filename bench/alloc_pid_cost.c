/* The cost per allocator call of `hpctl record --alloc --pid` (uprobes on the allocator), for
 * bench/alloc_pid_cost.sh: ROUNDS rounds of N malloc(64)/free pairs timed on the thread's CPU clock
 * (the kernel's uprobe work is charged to it) before the probes are in, then the same once they are
 * (malloc's first bytes changed), then prints the medians per call (a pair is two calls):
 *   unprobed_ns X probed_ns Y
 * Writes DIR/ready when it waits for the probes, DIR/done when it measured them. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pid_cost_common.h"
static void* volatile sink;

static double round_ns(long n) {
  struct timespec a, b;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  for (long i = 0; i < n; ++i) {
    void* p = malloc(64);
    sink = p;
    free(p);
  }
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  return ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (2.0 * (double)n);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: alloc_pid_cost DIR CALLS_PER_ROUND\n");
    return 1;
  }
  const long n = atol(argv[2]);
  unsigned char before[8];
  memcpy(before, (const void*)malloc, sizeof before);
  const double plain = median(n);
  touch(argv[1], "ready");
  for (int i = 0; i < 60000 && memcmp(before, (const void*)malloc, sizeof before) == 0; ++i) usleep(10000);
  if (memcmp(before, (const void*)malloc, sizeof before) == 0) return 2;
  usleep(200000); /* free's probe is attached in the same link */
  const double probed = median(n);
  touch(argv[1], "done");
  printf("unprobed_ns %.1f probed_ns %.1f\n", plain, probed);
  return 0;
}
