/* An allocation-heavy program for bench/alloc_bench.sh: N rounds of malloc/free of mixed sizes (16 B to
 * 4 KiB, a few live at a time, as a parser or a request handler does), then prints the CPU time it
 * used itself (CLOCK_PROCESS_CPUTIME_ID) and the bytes it allocated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LIVE 64

int main(int argc, char** argv) {
  const long rounds = argc > 1 ? atol(argv[1]) : 20000000;
  void* live[LIVE] = {0};
  unsigned long long x = 88172645463325252ull, bytes = 0;
  struct timespec a, b;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
  for (long i = 0; i < rounds; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const size_t size = 16u << (x % 9); /* 16 B .. 4 KiB */
    const unsigned slot = (unsigned)(x >> 32) % LIVE;
    free(live[slot]);
    live[slot] = malloc(size);
    ((char*)live[slot])[0] = (char)i;
    bytes += size;
  }
  for (int i = 0; i < LIVE; ++i) free(live[i]);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
  const double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
  printf("cpu_ms %.1f allocations %ld bytes %llu ns_per_allocation %.2f\n", ns / 1e6, rounds, bytes,
         ns / rounds);
  return 0;
}
