/* cfi fixture (no frame pointers): a loop interrupted every 10 ms by SIGALRM, whose handler spins
 * about 4 ms: the handler's samples are unwound through the kernel's signal frame (__restore_rt) into
 * the interrupted loop and on to main. Runs for argv[1] seconds. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static volatile unsigned long sink;

static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void spin_in_signal_handler(void) {
  const double until = mono() + 0.004;
  while (mono() < until)
    for (int i = 0; i < 1000; ++i) sink += (unsigned long)i * 5;
}

static void on_alarm(int sig) {
  (void)sig;
  spin_in_signal_handler();
  sink += 1; /* not a tail call */
}

__attribute__((noinline)) void interrupted_loop(double until) {
  while (mono() < until)
    for (int i = 0; i < 10000; ++i) sink += (unsigned long)i * 3;
}

int main(int argc, char** argv) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, NULL);
  const struct itimerval every = {{0, 10000}, {0, 10000}};
  setitimer(ITIMER_REAL, &every, NULL);
  interrupted_loop(mono() + (argc > 1 ? atof(argv[1]) : 2.0));
  const struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  printf("%lu\n", sink);
  return 0;
}
