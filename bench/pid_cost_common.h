/* Shared by the programs of bench/calls_pid_cost.sh and bench/alloc_pid_cost.sh: the median of ROUNDS
 * rounds of round_ns(n) (the includer defines round_ns), and the marker files the scripts wait on. */
#pragma once

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define ROUNDS 11

static double round_ns(long n);

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double median(long n) {
  double v[ROUNDS];
  for (int r = 0; r < ROUNDS; ++r) v[r] = round_ns(n);
  qsort(v, ROUNDS, sizeof v[0], cmp);
  return v[ROUNDS / 2];
}

/* Creates DIR/NAME (empty): the script's signal. */
static void touch(const char* dir, const char* name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) close(fd);
}
