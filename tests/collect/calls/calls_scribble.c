// Hostile call-table fixture: makes real calls through hpd's runtime, then overwrites the shared table
// it counts into (named by HPD_CALLS_TABLE), as any program of a recording can, and leaves with
// _exit() so that no hook of its own runs after. `calls_scribble MODE [LINGER_MS]`, MODE one of:
// header (the magic and layout fields overwritten), values (every thread slot claimed, half of them
// for pid 1, every edge and function entry filled with counts and times of 2^64-1, histogram
// references out of range or to histograms whose every bucket is full), edges (every thread slot claimed for
// this process and every edge entry filled with a distinct edge: the most a table can make hpd keep),
// truncate (the file cut to one page).
// LINGER_MS: sleeps that long after scribbling (so that a recording is still running meanwhile).
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hpd/calls/preload_abi.h"

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;

NOINLINE void leaf(unsigned long i) {
  sink += i;
  __asm__ volatile("" ::: "memory");
}

NOINLINE void caller(unsigned long n) {
  for (unsigned long i = 0; i < n; ++i) leaf(i);
  __asm__ volatile("" ::: "memory");
}

// Everything below runs inside main() and calls only libc (not instrumented): the program's own slot
// is overwritten too, and a hook that ran now would count into the garbage (or, after truncate, fault).
int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const char* mode = argv[1];
  const long linger_ms = argc > 2 ? atol(argv[2]) : 0;
  caller(1000);
  const char* path = getenv(HPD_CALLS_ENV_TABLE);
  const int fd = path != NULL ? open(path, O_RDWR | O_CLOEXEC) : -1;
  if (fd < 0) {
    fprintf(stderr, "calls_scribble: no call table to scribble on\n");
    _exit(3);
  }
  const uint64_t size = hpd_calls_file_size();
  if (strcmp(mode, "truncate") == 0) {
    if (ftruncate(fd, 4096) != 0) _exit(4);
  } else {
    char* table = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (table == MAP_FAILED) _exit(5);
    struct hpd_calls_header* h = (struct hpd_calls_header*)table;
    if (strcmp(mode, "header") == 0) {
      memset(h, 0xa5, sizeof *h);
    } else if (strcmp(mode, "edges") == 0) {
      h->threads_used = HPD_CALLS_MAX_THREADS;
      struct hpd_calls_thread* slots = (struct hpd_calls_thread*)(table + hpd_calls_threads_offset());
      for (uint32_t t = 0; t < HPD_CALLS_MAX_THREADS; ++t) {
        slots[t].pid = getpid();
        slots[t].state = 1;
        struct hpd_calls_edge* e = (struct hpd_calls_edge*)(table + hpd_calls_edges_offset(t));
        for (uint32_t i = 0; i < HPD_CALLS_EDGES_PER_THREAD; ++i) {
          e[i].caller = 0x10000000ull + ((uint64_t)t << 20) + i * 16u;
          e[i].callee = 0x7f0000000000ull + ((uint64_t)t << 24) + i * 64u;
          e[i].count = 1;
        }
      }
    } else if (strcmp(mode, "values") == 0) {
      h->threads_used = 0xffffffffu;
      h->processes = UINT32_MAX;
      h->threads_refused = UINT64_MAX;
      struct hpd_calls_thread* slots = (struct hpd_calls_thread*)(table + hpd_calls_threads_offset());
      for (uint32_t t = 0; t < HPD_CALLS_MAX_THREADS; ++t) {
        slots[t].pid = t % 2 == 0 ? getpid() : 1;
        slots[t].tid = (int32_t)t;
        slots[t].state = 1;
        slots[t].calls_lost = UINT64_MAX;
        slots[t].calls_untimed = UINT64_MAX;
        slots[t].frames_abandoned = UINT64_MAX;
        struct hpd_calls_edge* e = (struct hpd_calls_edge*)(table + hpd_calls_edges_offset(t));
        struct hpd_calls_func* f = (struct hpd_calls_func*)(table + hpd_calls_funcs_offset(t));
        for (uint32_t i = 0; i < HPD_CALLS_EDGES_PER_THREAD; ++i) {
          e[i].caller = 0x10000000ull + ((uint64_t)t << 20) + i * 16u;
          e[i].callee = 0x7f0000000000ull + ((uint64_t)t << 24) + i * 64u;
          e[i].count = UINT64_MAX;
          e[i].func = 0xfffffff0u;
        }
        for (uint32_t i = 0; i < HPD_CALLS_FUNCS_PER_THREAD; ++i) {
          f[i].callee = 0x7f0000000000ull + ((uint64_t)t << 24) + i * 64u;
          f[i].timed = UINT64_MAX;
          f[i].sum_ticks = UINT64_MAX;
          f[i].outer_ticks = UINT64_MAX;
          f[i].max_ticks = UINT64_MAX;
          f[i].hist = i < 2        ? (t * 2 + i) % HPD_CALLS_HIST_BLOCKS
                      : i % 2 == 0 ? 0xfffffff0u
                                   : HPD_CALLS_NO_HIST;
        }
      }
      uint64_t* buckets = (uint64_t*)(table + hpd_calls_hist_offset(0));
      const uint64_t n = (uint64_t)HPD_CALLS_HIST_BLOCKS * HPD_CALLS_HIST_BUCKETS;
      for (uint64_t i = 0; i < n; ++i) buckets[i] = UINT64_MAX;
    } else {
      fprintf(stderr, "calls_scribble: unknown mode %s\n", mode);
      _exit(2);
    }
    msync(table, size, MS_SYNC);
  }
  if (linger_ms > 0) {
    const struct timespec t = {linger_ms / 1000, (linger_ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
  }
  printf("scribbled %s\n", mode);
  fflush(stdout);
  _exit(0);
}
