/* A running process whose functions know their own latency, for `hpctl record --calls --pid PID`.
 *
 *   calls_pid_latency DIR
 *     1. writes DIR/ready, then waits (at most 300 s) until the first bytes of its three timed
 *        functions changed: the probes are in (a uprobe puts a breakpoint or a call there), so every
 *        call below is made under them; then writes DIR/probed;
 *     2. sleep_for: 100 calls sleeping 2 ms; spin_cpu: 90 calls spinning 1 ms of thread CPU and 10
 *        spinning 4 ms (a known tail); rec: 20 outer calls recursing 10 deep, the innermost spinning
 *        1 ms of thread CPU;
 *     3. writes DIR/truth, then DIR/done, and waits (at most 300 s) until the bytes are back (the
 *        probes are gone), then exits 0 (2: the probes never came, 3: never left, 6: a file).
 *
 * Every call is measured twice on CLOCK_MONOTONIC (the clock of the kernel's bpf_ktime_get_ns):
 * around the call site ("outer") and from the first to the last statement of the body ("inner").
 * A probe's entry and return fall between the two, so for each call inner <= what hpd measures <=
 * outer, whatever the machine's speed or load. DIR/truth has one line per function:
 *   NAME CALLS INNER_SUM OUTER_SUM INNER_P95 OUTER_P95 INNER_MAX OUTER_MAX INNER_TOP OUTER_TOP
 * sums in ns over all calls (every recursion level), p95 the 95th smallest (rank ceil(0.95 n)),
 * and *_TOP the sums over the outermost activations only (what hpd's total counts once).
 *
 * Each call also keeps its return address: DIR/returns says how many of the calls returned through
 * the kernel's return-probe trampoline (an address in the process's [uprobes] mapping) and of how many,
 * "PROBED CALLS": every call when the functions are timed (a return probe each), none when they are
 * only counted.
 *
 * When the probes are gone it copies the kernel's [uprobes-trampoline] page, if the kernel mapped one (Linux
 * 6.18 turns a nop5 probe into a call there), to DIR/trampoline, and the start of its [uprobes] page (where
 * the return probes' trampoline is) to DIR/uprobes: the pages cannot be read from outside the process, and
 * the test checks that their code is the one hpd's CFI rows describe.
 *
 *   calls_pid_latency DIR churn
 *     the same, then (before DIR/truth) `churn`: calls of the short `tick` for CHURN_CPU_NS of thread CPU
 *     (about half of it in the probes' work, as in a program calling a small timed function in a loop), and
 *     writes DIR/cpu: "CHURN_NS TOTAL_NS", the thread CPU spent in churn() and from the probes' arrival
 *     to the end of the work (the kernel's work for the probes is charged to the thread's clock). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define SLEEP_N 100
#define SPIN_N 100
#define REC_N 20
#define REC_DEPTH 10

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static long long cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

volatile unsigned long spins;
#define CALLS_N (SLEEP_N + SPIN_N + REC_N * REC_DEPTH)
static unsigned long returns_to[CALLS_N];  // each call's return address, as the function saw it
static int returns_next;
#define KEEP_RETURN_ADDRESS() \
  (returns_to[returns_next++ % CALLS_N] = (unsigned long)__builtin_return_address(0))
static long long inner_last;  // the inner duration of the call that just returned

static void spin_cpu_ns(long long ns) {
  const long long end = cpu_ns() + ns;
  while (cpu_ns() < end) ++spins;
}

NOINLINE void sleep_for(long us) {
  KEEP_RETURN_ADDRESS();
  const long long t0 = now_ns();
  struct timespec t = {0, us * 1000L};
  nanosleep(&t, NULL);
  inner_last = now_ns() - t0;
}

NOINLINE void spin_cpu(long us) {
  KEEP_RETURN_ADDRESS();
  const long long t0 = now_ns();
  spin_cpu_ns(us * 1000LL);
  inner_last = now_ns() - t0;
}

static long long rec_inner[REC_N * REC_DEPTH], rec_outer[REC_N * REC_DEPTH];
static int rec_next;

NOINLINE void rec(int depth) {
  KEEP_RETURN_ADDRESS();
  const long long t0 = now_ns();
  if (depth == 0) {
    spin_cpu_ns(1000000LL);
  } else {
    const int slot = rec_next++;
    const long long c0 = now_ns();
    rec(depth - 1);
    rec_outer[slot] = now_ns() - c0;
    rec_inner[slot] = inner_last;
  }
  __asm__ volatile("" ::: "memory");
  inner_last = now_ns() - t0;
}

// A short timed function called in a loop: about half of each call is the probes' work, part of it
// in the return probe's trampoline (the [uprobes] page), where a sampled stack must still reach main.
#define CHURN_CPU_NS 1000000000LL
NOINLINE void tick(void) {
  for (int i = 0; i < 1000; ++i) ++spins;
}

NOINLINE void churn(void) {
  const long long end = cpu_ns() + CHURN_CPU_NS;
  while (cpu_ns() < end)
    for (int i = 0; i < 100; ++i) tick();
}

#define PROBE_WATCH_N 3
#include "probe_watch.h"

// Copies the first `n` bytes of the mapping named `name` (if the process has one) to DIR/FILE.
static void copy_mapping(const char* dir, const char* name, const char* file, size_t n) {
  FILE* maps = fopen("/proc/self/maps", "r");
  char map_line[512];
  while (maps != NULL && fgets(map_line, sizeof map_line, maps) != NULL) {
    unsigned long start = 0, end = 0;
    if (strstr(map_line, name) == NULL || sscanf(map_line, "%lx-%lx", &start, &end) != 2) continue;
    put_file(dir, file, (const char*)start, n);
    break;
  }
  if (maps != NULL) fclose(maps);
}

// How many kept return addresses lie in the [uprobes] mapping (where the kernel's return probes send
// the function's return); -1 when the maps cannot be read.
static int returns_probed(void) {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (maps == NULL) return -1;
  char text[512];
  unsigned long lo = 0, hi = 0;
  while (fgets(text, sizeof text, maps) != NULL)
    if (strstr(text, "[uprobes]") != NULL) sscanf(text, "%lx-%lx", &lo, &hi);
  fclose(maps);
  int n = 0;
  for (int i = 0; i < returns_next && i < CALLS_N; ++i) n += returns_to[i] >= lo && returns_to[i] < hi;
  return n;
}

static int by_value(const void* a, const void* b) {
  const long long x = *(const long long*)a, y = *(const long long*)b;
  return x < y ? -1 : x > y;
}

static long long sum_of(const long long* d, int n) {
  long long s = 0;
  for (int i = 0; i < n; ++i) s += d[i];
  return s;
}

// The 95th smallest of n (rank ceil(0.95 n)); sorts d.
static long long p95_of(long long* d, int n) {
  qsort(d, (size_t)n, sizeof *d, by_value);
  return d[(95 * n + 99) / 100 - 1];
}

static int line(char* buf, size_t size, const char* name, long long* inner, long long* outer, int n,
                long long inner_top, long long outer_top) {
  const long long is = sum_of(inner, n), os = sum_of(outer, n);
  const long long ip = p95_of(inner, n), op = p95_of(outer, n);
  return snprintf(buf, size, "%s %d %lld %lld %lld %lld %lld %lld %lld %lld\n", name, n, is, os, ip, op,
                  inner[n - 1], outer[n - 1], inner_top, outer_top);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  watched[0] = (const unsigned char*)&sleep_for;
  watched[1] = (const unsigned char*)&spin_cpu;
  watched[2] = (const unsigned char*)&rec;
  for (int i = 0; i < 3; ++i) memcpy(original[i], watched[i], sizeof original[i]);
  const int with_churn = argc > 2 && strcmp(argv[2], "churn") == 0;
  put_file(argv[1], "ready", "", 0);
  if (!wait_for(probes_in)) return 2;
  put_file(argv[1], "probed", "", 0);
  const long long cpu_start = cpu_ns();

  static long long sleep_inner[SLEEP_N], sleep_outer[SLEEP_N], spin_inner[SPIN_N], spin_outer[SPIN_N];
  static long long top_inner[REC_N], top_outer[REC_N];
  long long sleep_top_i = 0, sleep_top_o = 0, spin_top_i = 0, spin_top_o = 0;
  for (int i = 0; i < SLEEP_N; ++i) {
    const long long t0 = now_ns();
    sleep_for(2000);
    sleep_outer[i] = now_ns() - t0;
    sleep_inner[i] = inner_last;
    sleep_top_i += sleep_inner[i];
    sleep_top_o += sleep_outer[i];
  }
  for (int i = 0; i < SPIN_N; ++i) {
    const long long t0 = now_ns();
    spin_cpu(i % 10 == 9 ? 4000 : 1000);
    spin_outer[i] = now_ns() - t0;
    spin_inner[i] = inner_last;
    spin_top_i += spin_inner[i];
    spin_top_o += spin_outer[i];
  }
  for (int i = 0; i < REC_N; ++i) {
    const int slot = rec_next++;
    const long long t0 = now_ns();
    rec(REC_DEPTH - 1);
    rec_outer[slot] = top_outer[i] = now_ns() - t0;
    rec_inner[slot] = top_inner[i] = inner_last;
  }

  if (with_churn) {
    const long long c0 = cpu_ns();
    churn();
    const long long c1 = cpu_ns();
    char cpu[64];
    const int clen = snprintf(cpu, sizeof cpu, "%lld %lld\n", c1 - c0, c1 - cpu_start);
    put_file(argv[1], "cpu", cpu, (size_t)clen);
  }

  char text[1024];
  int len = line(text, sizeof text, "sleep_for", sleep_inner, sleep_outer, SLEEP_N, sleep_top_i, sleep_top_o);
  len += line(text + len, sizeof text - (size_t)len, "spin_cpu", spin_inner, spin_outer, SPIN_N, spin_top_i,
              spin_top_o);
  len += line(text + len, sizeof text - (size_t)len, "rec", rec_inner, rec_outer, REC_N * REC_DEPTH,
              sum_of(top_inner, REC_N), sum_of(top_outer, REC_N));
  char returns[64];
  const int rlen = snprintf(returns, sizeof returns, "%d %d\n", returns_probed(), returns_next);
  put_file(argv[1], "returns", returns, (size_t)rlen);
  put_file(argv[1], "truth", text, (size_t)len);
  put_file(argv[1], "done", "", 0);
  if (!wait_for(probes_out)) return 3;
  copy_mapping(argv[1], "[uprobes-trampoline]", "trampoline", 64);
  copy_mapping(argv[1], "[uprobes]", "uprobes", 64);
  return 0;
}
