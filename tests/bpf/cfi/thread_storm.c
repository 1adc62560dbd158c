// Fixture: the main thread creates THREADS short threads, BATCH at a time (each burns about
// WORK_US of its CPU, then returns; the batch is joined before the next one), so that for the
// whole run threads are being created, and more are runnable than there are CPUs. A new thread
// starts in glibc's __clone3, on the child's side of its syscall; preempted or sampled before its
// first return to user mode, that frame is its whole stack. The main thread is the only one that
// creates threads (a sample of it in __clone3 is on the parent's side, on its way back).
// Usage: thread_storm THREADS BATCH WORK_US
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile uint64_t sink;
static long work_ns;

static long thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

__attribute__((noinline)) static void storm_work(void) {
  uint64_t x = sink;
  const long end = thread_cpu_ns() + work_ns;
  while (thread_cpu_ns() < end) {
    for (int i = 0; i < 1000; ++i) {
      x = x * 6364136223846793005ULL + 1;
      __asm__ volatile("" : "+r"(x));
    }
  }
  sink = x;
}

static void* storm_thread(void* arg) {
  (void)arg;
  storm_work();
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: thread_storm THREADS BATCH WORK_US\n");
    return 2;
  }
  const long threads = atol(argv[1]);
  const long batch = atol(argv[2]);
  work_ns = atol(argv[3]) * 1000L;
  if (threads <= 0 || batch <= 0 || batch > 1024 || work_ns < 0) return 2;
  pthread_t ids[1024];
  for (long made = 0; made < threads;) {
    long n = 0;
    for (; n < batch && made < threads; ++n, ++made) {
      if (pthread_create(&ids[n], NULL, storm_thread, NULL) != 0) {
        fprintf(stderr, "pthread_create failed after %ld threads\n", made);
        return 3;
      }
    }
    for (long i = 0; i < n; ++i) pthread_join(ids[i], NULL);
  }
  printf("%ld threads\n", threads);
  return 0;
}
