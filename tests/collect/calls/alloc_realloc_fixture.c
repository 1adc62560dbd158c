/* A running process that knows its own allocations, for the realloc edge cases and the frees of
 * another thread under `hpctl record --alloc --pid PID`.
 *
 *   alloc_realloc_fixture DIR
 *     1. starts a consumer thread (which frees what it reads from a pipe) and lets it allocate once,
 *        so that no thread start or tcache set-up happens later; keeps the first bytes of malloc,
 *        realloc and free, and writes DIR/ready;
 *     2. waits (at most 300 s) until the three functions' first bytes changed: the probes are in;
 *     3. with N = 500 and S = 4096:
 *        realloc_null: N x realloc(NULL, S), kept (live);
 *        zero_source: N x malloc(S), each then given back by realloc_zero as realloc(p, 0);
 *        fail_source: N x malloc(S), each then passed by realloc_fail to realloc(p, huge), which
 *          fails (returns NULL): the blocks stay live;
 *        grow_source: N x malloc(S), each grown by realloc_grow to realloc(p, 2 S) (moved or not),
 *          then freed;
 *        cross_alloc: N x malloc(S) in this thread, each freed by the consumer thread (cross_free).
 *        Writes DIR/truth ("NAME BLOCKS BLOCK_SIZE LIVE" lines, with write(2)), then DIR/done;
 *     4. waits (at most 300 s) until the three functions' first bytes are back, checks that the live
 *        blocks hold what it wrote, and exits 0. Failures exit with a code naming the step (2: probes
 *        never came, 3: probes never left, 4: memory damaged, 5: an allocation or the huge realloc
 *        did not do what it must, 6: a file could not be written, 7: the thread or pipe failed). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N 500
#define S 4096

static void* volatile sink;
static volatile size_t huge_size = (size_t)PTRDIFF_MAX + 1;
static unsigned char* kept_null[N];
static unsigned char* kept_fail[N];
static void* blocks[N];
static int to_consumer[2];
static int from_consumer[2];

#define PROBE_WATCH_N 3
#include "probe_watch.h"

static void read_all(int fd, void* to, size_t len) {
  if (read(fd, to, len) != (ssize_t)len) _exit(7);
}

static void write_all(int fd, const void* from, size_t len) {
  if (write(fd, from, len) != (ssize_t)len) _exit(7);
}

/* Frees every pointer it reads until NULL, then answers with one byte; forever. */
__attribute__((noinline)) static void cross_free(void) {
  for (;;) {
    void* p = NULL;
    read_all(to_consumer[0], &p, sizeof p);
    if (p == NULL) {
      write_all(from_consumer[1], "k", 1);
      continue;
    }
    free(p);
  }
}

static void* consumer(void* arg) {
  (void)arg;
  sink = malloc(16); /* this thread's allocator state, before the probes */
  free(sink);
  write_all(from_consumer[1], "r", 1);
  cross_free();
  return NULL;
}

__attribute__((noinline)) static void realloc_null(void) {
  for (int i = 0; i < N; ++i) {
    kept_null[i] = realloc(NULL, S);
    if (kept_null[i] == NULL) _exit(5);
    memset(kept_null[i], 0x5a, S);
  }
}

__attribute__((noinline)) static void zero_source(void) {
  for (int i = 0; i < N; ++i) {
    blocks[i] = malloc(S);
    if (blocks[i] == NULL) _exit(5);
  }
}

__attribute__((noinline)) static void realloc_zero(void) {
  for (int i = 0; i < N; ++i) {
    void* p = realloc(blocks[i], 0);
    sink = p;
    if (p != NULL) free(p); /* glibc returns NULL (the block is freed); others may return a block */
  }
}

__attribute__((noinline)) static void fail_source(void) {
  for (int i = 0; i < N; ++i) {
    kept_fail[i] = malloc(S);
    if (kept_fail[i] == NULL) _exit(5);
    memset(kept_fail[i], 0xa5, S);
  }
}

__attribute__((noinline)) static void realloc_fail(void) {
  for (int i = 0; i < N; ++i) {
    void* p = realloc(kept_fail[i], huge_size);
    if (p != NULL) _exit(5);
  }
}

/* Not the same code as zero_source (which the compiler would fold into one function). */
__attribute__((noinline)) static void grow_source(void) {
  for (int i = 0; i < N; ++i) {
    blocks[i] = malloc(S);
    if (blocks[i] == NULL) _exit(5);
    memset(blocks[i], 0x33, 64);
  }
}

__attribute__((noinline)) static void realloc_grow(void) {
  for (int i = 0; i < N; ++i) {
    void* p = realloc(blocks[i], 2 * S);
    if (p == NULL) _exit(5);
    blocks[i] = p;
  }
  for (int i = 0; i < N; ++i) free(blocks[i]);
}

__attribute__((noinline)) static void cross_alloc(void) {
  for (int i = 0; i < N; ++i) {
    void* p = malloc(S);
    if (p == NULL) _exit(5);
    write_all(to_consumer[1], &p, sizeof p);
  }
  void* end = NULL;
  write_all(to_consumer[1], &end, sizeof end);
  char answer = 0;
  read_all(from_consumer[0], &answer, 1);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: alloc_realloc_fixture DIR\n");
    return 1;
  }
  const char* dir = argv[1];
  if (pipe2(to_consumer, O_CLOEXEC) != 0 || pipe2(from_consumer, O_CLOEXEC) != 0) return 7;
  pthread_t thread;
  if (pthread_create(&thread, NULL, consumer, NULL) != 0) return 7;
  char answer = 0;
  read_all(from_consumer[0], &answer, 1);
  watched[0] = (const unsigned char*)(void*)malloc;
  watched[1] = (const unsigned char*)(void*)realloc;
  watched[2] = (const unsigned char*)(void*)free;
  for (int i = 0; i < 3; ++i) memcpy(original[i], watched[i], sizeof original[i]);
  put_file(dir, "ready", "ready\n", 6);
  if (!wait_for(probes_in)) return 2;

  realloc_null();
  zero_source();
  realloc_zero();
  fail_source();
  realloc_fail();
  grow_source();
  realloc_grow();
  cross_alloc();

  char truth[512];
  const int n = snprintf(truth, sizeof truth,
                         "realloc_null %d %d %d\nzero_source %d %d 0\nfail_source %d %d %d\n"
                         "grow_source %d %d 0\nrealloc_grow %d %d 0\ncross_alloc %d %d 0\n",
                         N, S, N, N, S, N, S, N, N, S, N, 2 * S, N, S);
  put_file(dir, "truth", truth, (size_t)n);
  put_file(dir, "done", "done\n", 5);

  if (!wait_for(probes_out)) return 3;
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < S; j += 512)
      if (kept_null[i][j] != 0x5a || kept_fail[i][j] != 0xa5) return 4;
  return 0;
}
