// Fixture: the main thread starts a thread every millisecond (up to MAX_THREADS), each waiting for a
// start signal, so that threads are being created whenever a recorder attaches to the process, and
// many exist while it does. Writes "ready\n" to stdout once 16 exist; when a byte arrives on stdin it
// stops creating, lets every thread burn WORKER_CPU_MS of its own CPU time, joins them and exits.
// The threads burn as many at a time as there are CPUs: hundreds burning at once preempt each other
// every slice, and the kernel's task-clock timer, restarted at each switch-in, then fires a few
// early samples per thread, which would blur the doubled sampling the test looks for.
// Usage: churn MAX_THREADS WORKER_CPU_MS
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;
static double worker_cpu_s;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t started = PTHREAD_COND_INITIALIZER;
static int go;
static sem_t burners;

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void churn_work(void) {
  uint64_t x = sink;
  const double end = thread_cpu_s() + worker_cpu_s;
  while (thread_cpu_s() < end) {
    for (int i = 0; i < 10000; ++i) {
      x = x * 6364136223846793005ULL + 1;
      __asm__ volatile("" : "+r"(x));
    }
  }
  sink = x;
}

static void* worker(void* arg) {
  (void)arg;
  pthread_mutex_lock(&lock);
  while (!go) pthread_cond_wait(&started, &lock);
  pthread_mutex_unlock(&lock);
  while (sem_wait(&burners) != 0) {
  }
  churn_work();
  sem_post(&burners);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: churn MAX_THREADS WORKER_CPU_MS\n");
    return 2;
  }
  const long max_threads = atol(argv[1]);
  worker_cpu_s = atof(argv[2]) / 1000.0;
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (sem_init(&burners, 0, cpus > 0 ? (unsigned)cpus : 1u) != 0) return 3;
  pthread_t* threads = calloc((size_t)max_threads, sizeof *threads);
  if (threads == NULL) return 3;
  long count = 0;
  for (;;) {
    if (count < max_threads && pthread_create(&threads[count], NULL, worker, NULL) == 0 && ++count == 16) {
      printf("ready\n");
      fflush(stdout);
    }
    struct pollfd in = {.fd = 0, .events = POLLIN};
    if (poll(&in, 1, 1) > 0) break;
  }
  pthread_mutex_lock(&lock);
  go = 1;
  pthread_cond_broadcast(&started);
  pthread_mutex_unlock(&lock);
  for (long i = 0; i < count; ++i) pthread_join(threads[i], NULL);
  printf("ran %ld threads\n", count);
  free(threads);
  return 0;
}
