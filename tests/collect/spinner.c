/* Test target for the recorder: burns CPU in spin_work(), optionally starting a second thread late.
 * Usage: hpd_collect_spinner [--wait-stdin] [--nap-ms NAP_MS] SPIN_MS [LATE_THREAD_DELAY_MS]
 * Times are CPU time of the spinning thread, not wall time, so a loaded machine stretches the run
 * but does not change how much work is done: the main thread burns SPIN_MS; after LATE_THREAD_DELAY_MS
 * of it a thread "late-worker" starts and burns SPIN_MS - LATE_THREAD_DELAY_MS. With --nap-ms, the
 * main thread then sleeps NAP_MS in nap() before it exits: a blocked interval of known length. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

__attribute__((noinline)) uint64_t spin_work(uint64_t n) {
  uint64_t x = 0;
  for (uint64_t i = 0; i < n; ++i) x = x * 6364136223846793005ULL + i;
  sink = x;
  return x;
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t late_budget_ms;

__attribute__((noinline)) static void spin_until(uint64_t deadline) {
  while (now_ms() < deadline) spin_work(200000);
}

static void* late_thread(void* arg) {
  (void)arg;
  prctl(PR_SET_NAME, "late-worker");
  spin_until(now_ms() + late_budget_ms);
  return NULL;
}

__attribute__((noinline)) static void nap(uint64_t ms) {
  struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

int main(int argc, char** argv) {
  int arg = 1;
  if (arg < argc && strcmp(argv[arg], "--wait-stdin") == 0) {
    char c;
    if (read(0, &c, 1) != 1) return 2;
    ++arg;
  }
  uint64_t nap_ms = 0;
  if (arg + 1 < argc && strcmp(argv[arg], "--nap-ms") == 0) {
    nap_ms = strtoull(argv[arg + 1], NULL, 10);
    arg += 2;
  }
  if (arg >= argc) {
    fprintf(stderr, "usage: %s [--wait-stdin] [--nap-ms NAP_MS] SPIN_MS [LATE_THREAD_DELAY_MS]\n", argv[0]);
    return 2;
  }
  const uint64_t start = now_ms();
  const uint64_t spin_ms = strtoull(argv[arg], NULL, 10);
  const uint64_t end_ms = start + spin_ms;
  if (arg + 1 < argc) {
    const uint64_t delay_ms = strtoull(argv[arg + 1], NULL, 10);
    late_budget_ms = spin_ms > delay_ms ? spin_ms - delay_ms : 0;
    spin_until(start + delay_ms);
    pthread_t thread;
    if (pthread_create(&thread, NULL, late_thread, NULL) != 0) return 3;
    spin_until(end_ms);
    pthread_join(thread, NULL);
  } else {
    spin_until(end_ms);
  }
  if (nap_ms != 0) nap(nap_ms);
  return 7; /* a distinctive exit code for the test */
}
