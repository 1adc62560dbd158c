// Benchmark target: THREADS threads that stay on the CPU for SECONDS, each alternating between two
// functions, so that a recording of it has many samples over few distinct stacks.
// Usage: busy_threads SECONDS [THREADS]
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile uint64_t sink;
static double g_end;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static uint64_t mix(uint64_t x, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    x = x * 6364136223846793005ULL + 1;
    __asm__ volatile("" : "+r"(x));
  }
  return x;
}

__attribute__((noinline)) static uint64_t hash_block(uint64_t x) {
  return mix(x ^ 0x9E3779B97F4A7C15ULL, 7000);
}

__attribute__((noinline)) static uint64_t scramble_block(uint64_t x) {
  return mix(x + 1, 3000);
}

static void* worker(void* arg) {
  uint64_t x = (uintptr_t)arg;
  while (now_s() < g_end) x = scramble_block(hash_block(x));
  sink = x;
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: busy_threads SECONDS [THREADS]\n");
    return 2;
  }
  const int threads = argc > 2 ? atoi(argv[2]) : 4;
  if (threads < 1 || threads > 256) {
    fprintf(stderr, "busy_threads: THREADS must be 1..256\n");
    return 2;
  }
  g_end = now_s() + atof(argv[1]);
  pthread_t ids[256];
  for (int i = 1; i < threads; ++i) pthread_create(&ids[i], NULL, worker, (void*)(uintptr_t)i);
  worker(0);
  for (int i = 1; i < threads; ++i) pthread_join(ids[i], NULL);
  return 0;
}
