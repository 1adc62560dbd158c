/* A running process that knows its own allocations, for `hpctl record --alloc --pid PID`.
 *
 *   alloc_pid_fixture DIR
 *     1. allocates 1,000 blocks of 100 bytes (before any attach: their frees are of unsampled
 *        addresses), keeps the first bytes of malloc, calloc, posix_memalign and free, and writes
 *        DIR/ready;
 *     2. waits (at most 300 s) until all four functions' first bytes changed: the probes are in (a
 *        uprobe replaces the instruction with a breakpoint or a call), so everything below happens
 *        after the attach;
 *     3. large_blocks: 168 x calloc(1, 1 MiB), freed (70% of the two freeing functions' bytes);
 *        small_blocks: 294,912 x malloc(256), freed (30%); leak_blocks: 8,192 x
 *        posix_memalign(64, 4096), never freed while recorded (32 MiB); 1,000 x free(NULL); frees
 *        the 1,000 blocks of step 1. Writes DIR/truth ("NAME BLOCKS BLOCK_SIZE LEAKED" lines, with
 *        write(2) from a stack buffer) and then DIR/done;
 *     4. waits (at most 300 s) until the four functions' first bytes are back (the probes are gone),
 *        checks that the leaked blocks still hold what it wrote, allocates and frees again, and exits
 *        0. Any failure exits with a code naming the step (2: probes never came, 3: probes never
 *        left, 4: memory damaged, 5: allocation failed, 6: a file could not be written).
 *
 *   alloc_pid_fixture DIR default-mean
 *     As above, for a recording at the default mean (512 KiB), where one round of step 3 is too
 *     little to estimate shares within 3 points: its large and small blocks in 16 rounds, each
 *     168 x calloc(1, 1 MiB) and 18,432 x malloc(4096) (72 MiB: 30%, in 4 KiB blocks rather than
 *     256 B, so that the probes, which trap on every call, see as many calls as one round of 256 B
 *     blocks: the sampling's error depends on the bytes of small blocks, not their number), all freed;
 *     the leak as in step 3 (32 MiB, once).
 *
 *   alloc_pid_fixture DIR watch|watch-nondumpable
 *     For the refused recordings: (watch-nondumpable: makes itself not dumpable, as a process that
 *     changed its credentials is), writes DIR/ready, then allocates and frees a block and looks at the
 *     first bytes of malloc, calloc, posix_memalign and free every millisecond until DIR/stop exists
 *     (at most 300 s). Exits 0 when they never changed, 8 when a probe was seen in any of them.
 *
 *   alloc_pid_fixture DIR privileged
 *     Run set-user-ID root by a process a user records: allocates as step 3 does (large_blocks,
 *     small_blocks, leak_blocks), writes DIR/done, and waits (at most 300 s) until DIR/stop exists. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define EARLY_N 1000
#define EARLY_SIZE 100
#define LARGE_N 168
#define LARGE_SIZE (1 << 20)
#define SMALL_N 294912
#define SMALL_SIZE 256
#define DEFAULT_MEAN_ROUNDS 16
#define DEFAULT_MEAN_SMALL_N 18432
#define DEFAULT_MEAN_SMALL_SIZE 4096
#define LEAK_N 8192
#define LEAK_SIZE 4096
#define FREE_NULL_N 1000

static void* volatile sink;
static void* early[EARLY_N];
static unsigned char* leaked[LEAK_N];

#define PROBE_WATCH_N 4
#include "probe_watch.h"

#include "alloc_small_leak.h"

/* noclone: the modes' counts must not make gcc clone them under other names (.constprop). */
__attribute__((noinline, noclone)) static void large_blocks(int n) {
  for (int i = 0; i < n; ++i) {
    char* p = calloc(1, LARGE_SIZE);
    if (p == NULL) _exit(5);
    p[i] = 1;
    sink = p;
    free(p);
  }
}

__attribute__((noinline, noclone)) static void small_blocks(int n, size_t size) {
  for (int i = 0; i < n; ++i) {
    void* p = SMALL_ALLOC(size);
    if (p == NULL) _exit(5);
    memset(p, 1, size);
    sink = p;
    SMALL_FREE(p, size);
  }
}

__attribute__((noinline)) static void leak_blocks(void) {
  for (int i = 0; i < LEAK_N; ++i) {
    void* p = NULL;
    if (LEAK_ALLOC(&p, 64, LEAK_SIZE)) _exit(5);
    memset(p, (unsigned char)i, LEAK_SIZE);
    leaked[i] = p;
  }
}

__attribute__((noinline)) static void free_nulls_and_early(void) {
  for (int i = 0; i < FREE_NULL_N; ++i) free(sink == NULL ? sink : NULL);
  for (int i = 0; i < EARLY_N; ++i) free(early[i]);
}

static int any_probe(void) {
  for (int i = 0; i < 4; ++i)
    if (memcmp(watched[i], original[i], sizeof original[i]) != 0) return 1;
  return 0;
}

static int watch(const char* dir, int nondumpable) {
  if (nondumpable && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return 6;
  char stop[4096];
  snprintf(stop, sizeof stop, "%s/stop", dir);
  put_file(dir, "ready", "ready\n", 6);
  const struct timespec pause = {0, 1000 * 1000};
  int probed = 0;
  for (int i = 0; i < 300000 && access(stop, F_OK) != 0; ++i) {
    sink = malloc(EARLY_SIZE);
    free(sink);
    if (any_probe()) probed = 1;
    nanosleep(&pause, NULL);
  }
  return probed ? 8 : 0;
}

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    fprintf(stderr, "usage: alloc_pid_fixture DIR [default-mean|watch|watch-nondumpable|privileged]\n");
    return 1;
  }
  const char* dir = argv[1];
  for (int i = 0; i < EARLY_N; ++i) {
    early[i] = malloc(EARLY_SIZE);
    if (early[i] == NULL) return 5;
  }
  watched[0] = (const unsigned char*)(void*)malloc;
  watched[1] = (const unsigned char*)(void*)calloc;
  watched[2] = (const unsigned char*)(void*)posix_memalign;
  watched[3] = (const unsigned char*)(void*)free;
  for (int i = 0; i < 4; ++i) memcpy(original[i], watched[i], sizeof original[i]);
  if (argc == 3 && strcmp(argv[2], "privileged") == 0) {
    large_blocks(LARGE_N);
    small_blocks(SMALL_N, SMALL_SIZE);
    leak_blocks();
    put_file(dir, "done", "done\n", 5);
    char stop[4096];
    snprintf(stop, sizeof stop, "%s/stop", dir);
    const struct timespec pause = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 30000 && access(stop, F_OK) != 0; ++i) nanosleep(&pause, NULL);
    return 0;
  }
  int rounds = 1, small_n = SMALL_N, small_size = SMALL_SIZE;
  if (argc == 3 && strcmp(argv[2], "default-mean") == 0) {
    rounds = DEFAULT_MEAN_ROUNDS;
    small_n = DEFAULT_MEAN_SMALL_N;
    small_size = DEFAULT_MEAN_SMALL_SIZE;
  } else if (argc == 3) {
    return watch(dir, strcmp(argv[2], "watch-nondumpable") == 0);
  }
  put_file(dir, "ready", "ready\n", 6);
  if (!wait_for(probes_in)) return 2;

  for (int round = 0; round < rounds; ++round) {
    large_blocks(LARGE_N);
    small_blocks(small_n, (size_t)small_size);
  }
  leak_blocks();
  free_nulls_and_early();

  char truth[512];
  const int n =
      snprintf(truth, sizeof truth, "large_blocks %d %d 0\nsmall_blocks %d %d 0\nleak_blocks %d %d %d\n",
               LARGE_N * rounds, LARGE_SIZE, small_n * rounds, small_size, LEAK_N, LEAK_SIZE, LEAK_N);
  put_file(dir, "truth", truth, (size_t)n);
  put_file(dir, "done", "done\n", 5);

  if (!wait_for(probes_out)) return 3;
  for (int i = 0; i < LEAK_N; ++i)
    for (int j = 0; j < LEAK_SIZE; j += 512)
      if (leaked[i][j] != (unsigned char)i) return 4;
  small_blocks(SMALL_N, SMALL_SIZE);
  for (int i = 0; i < LEAK_N; ++i) free(leaked[i]);
  return 0;
}
