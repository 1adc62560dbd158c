/* The cost per probed call of `hpctl record --calls --pid`, for bench/calls_pid_cost.sh: ROUNDS rounds
 * of N calls of an empty function timed on the thread's CPU clock (the kernel's uprobe work is
 * charged to it) before the probes are in, then the same once they are (the function's first bytes
 * changed), then prints the medians per call:
 *   unprobed_ns X probed_ns Y
 * Built twice by the script: with its NOP site at the function's first instruction (-pg -mfentry
 * -mnop-mcount: counted and timed, entry and return probes) and after the prologue (-pg -mnop-mcount:
 * counted at the entry only). Writes DIR/ready when it waits for the probes, DIR/done when it
 * measured them. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pid_cost_common.h"

__attribute__((noinline)) void leaf(void) {
  __asm__ volatile("" ::: "memory");
}

static double round_ns(long n) {
  struct timespec a, b;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  for (long i = 0; i < n; ++i) leaf();
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  return ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)n;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: calls_pid_cost DIR CALLS_PER_ROUND\n");
    return 1;
  }
  const long n = atol(argv[2]);
  unsigned char before[16];
  memcpy(before, (const void*)leaf, sizeof before);
  const double plain = median(n);
  touch(argv[1], "ready");
  for (int i = 0; i < 60000 && memcmp(before, (const void*)leaf, sizeof before) == 0; ++i) usleep(10000);
  if (memcmp(before, (const void*)leaf, sizeof before) == 0) return 2;
  const double probed = median(n);
  touch(argv[1], "done");
  printf("unprobed_ns %.1f probed_ns %.1f\n", plain, probed);
  return 0;
}
