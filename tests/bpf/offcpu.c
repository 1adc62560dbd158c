/* Test target for off-CPU samples: thread "spinner" burns CPU in spin_all_the_time(); thread "sleeper"
 * alternates sleeper_spin() (SPIN_MS of its own CPU time) and sleeper_wait() (SLEEP_MS asleep).
 * At the end it prints the share of the sleeper's wall time spent in sleeper_wait, as measured here:
 *   sleeper: waited 0.7512 of 3.0021 s
 * Usage: hpd_bpf_offcpu SECONDS [SPIN_MS SLEEP_MS]
 * The sleeper does SECONDS * 1000 / (SPIN_MS + SLEEP_MS) cycles (SECONDS on an idle machine), whatever
 * CPU it gets: a loaded machine stretches the run but not the number of spins and sleeps, so the number
 * of samples does not depend on the load. The spinner runs until the sleeper is done. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;
static long g_cycles;
static volatile int g_done;
static long g_spin_ms = 2, g_sleep_ms = 6;

static double clock_s(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void burn(void) {
  uint64_t x = sink;
  for (int i = 0; i < 20000; ++i) {
    x = x * 6364136223846793005ULL + 1;
    __asm__ volatile("" : "+r"(x));
  }
  sink = x;
}

__attribute__((noinline)) void spin_all_the_time(void) {
  while (!__atomic_load_n(&g_done, __ATOMIC_RELAXED)) burn();
}

__attribute__((noinline)) void sleeper_spin(void) {
  const double until = clock_s(CLOCK_THREAD_CPUTIME_ID) + (double)g_spin_ms / 1e3;
  while (clock_s(CLOCK_THREAD_CPUTIME_ID) < until) burn();
}

/* libc's syscall() leaves the frame pointer alone, so the walk from the kernel entry finds the
 * frames of nap() 's callers. */
__attribute__((noinline)) static void nap(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  syscall(SYS_nanosleep, &ts, NULL);
}

__attribute__((noinline)) void sleeper_wait(void) {
  nap(g_sleep_ms);
  __asm__ volatile("");
}

static void* spinner_thread(void* arg) {
  (void)arg;
  prctl(PR_SET_NAME, "spinner");
  spin_all_the_time();
  return NULL;
}

static void* sleeper_thread(void* arg) {
  (void)arg;
  prctl(PR_SET_NAME, "sleeper");
  double waited = 0, wait_cpu = 0;
  const double start = clock_s(CLOCK_MONOTONIC), start_cpu = clock_s(CLOCK_THREAD_CPUTIME_ID);
  for (long i = 0; i < g_cycles; ++i) {
    sleeper_spin();
    const double t = clock_s(CLOCK_MONOTONIC), c = clock_s(CLOCK_THREAD_CPUTIME_ID);
    sleeper_wait();
    wait_cpu += clock_s(CLOCK_THREAD_CPUTIME_ID) - c;
    waited += clock_s(CLOCK_MONOTONIC) - t;
  }
  printf("sleeper: waited %.4f of %.4f s\n", waited, clock_s(CLOCK_MONOTONIC) - start);
  /* The CPU the thread used inside sleeper_wait (entering and leaving the sleep), of all it used. */
  printf("sleeper: wait cpu %.6f of %.6f s\n", wait_cpu, clock_s(CLOCK_THREAD_CPUTIME_ID) - start_cpu);
  fflush(stdout);
  __atomic_store_n(&g_done, 1, __ATOMIC_RELAXED);
  return NULL;
}

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? atof(argv[1]) : 2.0;
  if (argc > 3) {
    g_spin_ms = atol(argv[2]);
    g_sleep_ms = atol(argv[3]);
  }
  g_cycles = (long)(seconds * 1000 / (double)(g_spin_ms + g_sleep_ms) + 0.5);
  if (g_cycles < 1) g_cycles = 1;
  pthread_t a, b;
  if (pthread_create(&a, NULL, spinner_thread, NULL) != 0) return 1;
  if (pthread_create(&b, NULL, sleeper_thread, NULL) != 0) return 1;
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  return 0;
}
