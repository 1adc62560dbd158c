// The bundled example workload for the README: a small "service" that parses, hashes and sorts
// records on two threads, so that a first profile has something to show.
// Usage: example [SECONDS]
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RECORDS 4096

typedef struct {
  char key[24];
  uint64_t value;
} record_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void generate(record_t* r, unsigned* seed) {
  for (int i = 0; i < RECORDS; ++i) {
    snprintf(r[i].key, sizeof r[i].key, "k%08x", rand_r(seed));
    r[i].value = 0;
  }
}

__attribute__((noinline)) static uint64_t fnv1a(const char* s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; ++s) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ULL;
  }
  return h;
}

__attribute__((noinline)) static void hash_all(record_t* r) {
  for (int round = 0; round < 8; ++round)
    for (int i = 0; i < RECORDS; ++i) r[i].value ^= fnv1a(r[i].key) + round;
}

static int by_value(const void* a, const void* b) {
  uint64_t x = ((const record_t*)a)->value, y = ((const record_t*)b)->value;
  return x < y ? -1 : x > y;
}

__attribute__((noinline)) static void sort_all(record_t* r) { qsort(r, RECORDS, sizeof *r, by_value); }

__attribute__((noinline)) static void process_batch(record_t* r, unsigned* seed) {
  generate(r, seed);
  hash_all(r);
  sort_all(r);
}

static double g_end;

static void* worker(void* arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  record_t* r = malloc(sizeof(record_t) * RECORDS);
  if (!r) return NULL;
  while (now_s() < g_end) process_batch(r, &seed);
  free(r);
  return NULL;
}

int main(int argc, char** argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 2.0;
  g_end = now_s() + seconds;
  pthread_t t;
  pthread_create(&t, NULL, worker, (void*)(uintptr_t)7);
  pthread_setname_np(t, "example-worker");
  worker((void*)(uintptr_t)1);
  pthread_join(t, NULL);
  printf("example: done\n");
  return 0;
}
