/* A program that knows its own allocations, for `hpctl record --alloc`.
 *
 *   alloc_fixture truth FILE  allocates exactly what it writes to FILE, one line per function:
 *                             "NAME BLOCKS BLOCK_SIZE LEAKED" (LEAKED: blocks never freed)
 *       small_blocks:  200000 x malloc(64), each freed
 *       large_blocks:  64 x calloc(1, 1 MiB), each freed
 *       leak_pages:    2048 x posix_memalign(64, 4096), never freed
 *     FILE is written with write(2) from a stack buffer: nothing else allocates after start-up.
 *   alloc_fixture shares FILE [ROUNDS]
 *                             the program, the same way: large_blocks 168 x calloc(1, 1 MiB)
 *                             (70% of the freed bytes), small_blocks 294,912 x malloc(256) (30%),
 *                             each repeated ROUNDS times (default 1), all freed; then leak_pages
 *                             8,192 x posix_memalign(64, 4096) never freed (32 MiB, whatever ROUNDS)
 *   alloc_fixture churn       threads allocating in one thread and freeing in another, realloc
 *                             growth, aligned_alloc/memalign/valloc, free(NULL), a fork whose child
 *                             allocates and execs /bin/true; exits 0 when all went well. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc_small_leak.h"

#define SMALL_N 200000
#define SMALL_SIZE 64
#define LARGE_N 64
#define LARGE_SIZE (1 << 20)
#define LEAK_N 2048
#define LEAK_SIZE 4096
#define SHARES_SMALL_N 294912
#define SHARES_SMALL_SIZE 256
#define SHARES_LARGE_N 168
#define SHARES_LEAK_N 8192

static void* volatile sink;
static void* leaked[SHARES_LEAK_N];

/* noclone: the two modes' counts must not make gcc clone them under other names (.constprop). */
__attribute__((noinline, noclone)) static void small_blocks(int n, size_t size) {
  for (int i = 0; i < n; ++i) {
    void* p = SMALL_ALLOC(size);
    memset(p, 1, size);
    sink = p;
    SMALL_FREE(p, size);
  }
}

__attribute__((noinline, noclone)) static void large_blocks(int n) {
  for (int i = 0; i < n; ++i) {
    char* p = calloc(1, LARGE_SIZE);
    p[i] = 1;
    sink = p;
    free(p);
  }
}

__attribute__((noinline, noclone)) static void leak_pages(int n) {
  for (int i = 0; i < n; ++i) {
    void* p = NULL;
    if (LEAK_ALLOC(&p, 64, LEAK_SIZE)) _exit(3);
    memset(p, 2, 64);
    leaked[i] = p;
  }
}

static void put_line(int fd, const char* name, long blocks, long size, long leaked_blocks) {
  char line[128];
  const int n = snprintf(line, sizeof line, "%s %ld %ld %ld\n", name, blocks, size, leaked_blocks);
  if (write(fd, line, (size_t)n) != n) _exit(4);
}

static int truth(const char* path, int small_n, size_t small_size, int large_n, int leak_n, int rounds) {
  for (int round = 0; round < rounds; ++round) {
    small_blocks(small_n, small_size);
    large_blocks(large_n);
  }
  leak_pages(leak_n);
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return 2;
  put_line(fd, "small_blocks", (long)small_n * rounds, (long)small_size, 0);
  put_line(fd, "large_blocks", (long)large_n * rounds, LARGE_SIZE, 0);
  put_line(fd, "leak_pages", leak_n, LEAK_SIZE, leak_n);
  close(fd);
  return 0;
}

/* ---- churn ---- */

#define HANDOFF 4096
static void* handoff[HANDOFF];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready = PTHREAD_COND_INITIALIZER;
static int produced;

static void* producer(void* arg) {
  (void)arg;
  for (int round = 0; round < 50; ++round) {
    pthread_mutex_lock(&lock);
    while (produced) pthread_cond_wait(&ready, &lock);
    for (int i = 0; i < HANDOFF; ++i) handoff[i] = malloc((size_t)(16 + (i % 64) * 32));
    produced = 1;
    pthread_cond_broadcast(&ready);
    pthread_mutex_unlock(&lock);
  }
  return NULL;
}

static void* consumer(void* arg) {
  (void)arg;
  for (int round = 0; round < 50; ++round) {
    pthread_mutex_lock(&lock);
    while (!produced) pthread_cond_wait(&ready, &lock);
    for (int i = 0; i < HANDOFF; ++i) free(handoff[i]);
    produced = 0;
    pthread_cond_broadcast(&ready);
    pthread_mutex_unlock(&lock);
  }
  return NULL;
}

static int churn(void) {
  pthread_t a, b;
  if (pthread_create(&a, NULL, producer, NULL) != 0 || pthread_create(&b, NULL, consumer, NULL) != 0)
    return 5;
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  char* grow = NULL;
  for (size_t n = 1; n <= (1u << 22); n *= 2) {
    char* q = realloc(grow, n);
    if (q == NULL) return 6;
    q[n - 1] = 1;
    grow = q;
  }
  free(grow);
  free(NULL);
  void* p1 = aligned_alloc(256, 4096);
  void* p2 = memalign(128, 100000);
  void* p3 = valloc(8192);
  if (p1 == NULL || p2 == NULL || p3 == NULL) return 7;
  free(p1);
  free(p2);
  free(p3);
  const pid_t child = fork();
  if (child < 0) return 8;
  if (child == 0) {
    for (int i = 0; i < 1000; ++i) free(malloc(1000));
    execl("/bin/true", "true", (char*)NULL);
    _exit(9);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 10;
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "truth") == 0)
    return truth(argv[2], SMALL_N, SMALL_SIZE, LARGE_N, LEAK_N, 1);
  if ((argc == 3 || argc == 4) && strcmp(argv[1], "shares") == 0) {
    const int rounds = argc == 4 ? atoi(argv[3]) : 1;
    if (rounds < 1 || rounds > 1000) {
      fprintf(stderr, "alloc_fixture: ROUNDS must be 1 to 1000, not %s\n", argv[3]);
      return 1;
    }
    return truth(argv[2], SHARES_SMALL_N, SHARES_SMALL_SIZE, SHARES_LARGE_N, SHARES_LEAK_N, rounds);
  }
  if (argc == 2 && strcmp(argv[1], "churn") == 0) return churn();
  fprintf(stderr, "usage: alloc_fixture truth FILE | shares FILE [ROUNDS] | churn\n");
  return 1;
}
