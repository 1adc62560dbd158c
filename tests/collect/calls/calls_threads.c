// Threaded call-count fixture: THREADS threads each call callee() exactly N times from worker():
// `calls_threads THREADS N`. The threads start together (a barrier), so several run at once.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

static volatile unsigned long sink;
static pthread_barrier_t start;
static unsigned long per_thread;

NOINLINE void callee(unsigned long i) {
  __atomic_fetch_add(&sink, i & 1, __ATOMIC_RELAXED);
}

NOINLINE void* worker(void* arg) {
  (void)arg;
  pthread_barrier_wait(&start);
  for (unsigned long i = 0; i < per_thread; ++i) callee(i);
  return NULL;
}

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 4;
  per_thread = argc > 2 ? strtoul(argv[2], NULL, 10) : 10000;
  if (threads <= 0 || threads > 256) return 2;
  pthread_t ids[256];
  pthread_barrier_init(&start, NULL, (unsigned)threads);
  for (int t = 0; t < threads; ++t) pthread_create(&ids[t], NULL, worker, NULL);
  for (int t = 0; t < threads; ++t) pthread_join(ids[t], NULL);
  printf("%lu\n", sink);
  return 0;
}
