// The cost of the sampling interrupt alone, on this machine: the same fixed work is timed (its own CPU
// time) with no perf event, and with a task-clock event on the working thread that fires at the given
// rate but records nothing (no ring buffer, no eBPF program, no call chain). Whatever a sampler does
// per sample comes on top of this floor.
// Usage: timer_floor RATE_HZ ROUNDS RUNS   (prints one line per run: none_s event_s ratio)
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double work(long rounds) {
  const double start = thread_cpu_s();
  uint64_t x = sink;
  for (long r = 0; r < rounds; ++r) {
    for (int i = 0; i < 100000; ++i) {
      x = x * 6364136223846793005ULL + 1;
      __asm__ volatile("" : "+r"(x));
    }
  }
  sink = x;
  return thread_cpu_s() - start;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: timer_floor RATE_HZ ROUNDS RUNS\n");
    return 2;
  }
  const long rate = atol(argv[1]), rounds = atol(argv[2]), runs = atol(argv[3]);
  if (rate <= 0 || rounds <= 0 || runs <= 0) return 2;
  for (long run = 0; run < runs; ++run) {
    const double none = work(rounds);
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.sample_period = 1000000000ULL / (unsigned long)rate;
    const int fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
      perror("perf_event_open");
      return 1;
    }
    const double with_event = work(rounds);
    close(fd);
    printf("%.6f %.6f %.4f\n", none, with_event, with_event / none);
    fflush(stdout);
  }
  return 0;
}
