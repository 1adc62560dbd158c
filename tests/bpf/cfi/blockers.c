/* cfi fixture: one thread per way of blocking, each inside its own wrapper function around the libc
 * call (pthread_mutex_lock, read on a pipe, poll, pthread_cond_wait, nanosleep, pthread_join), for
 * argv[1] seconds, after argv[2] milliseconds of start-up (default 100). Threads are named after their
 * wrapper. Built with and without frame pointers. */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile long sink;
static double seconds = 2.0;
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int cond_done;
static int pipe_read_fds[2];
static int pipe_poll_fds[2];

__attribute__((noinline)) void wait_in_mutex_lock(void) {
  sink += pthread_mutex_lock(&held);
  pthread_mutex_unlock(&held);
  sink += 1;
}
__attribute__((noinline)) void wait_in_pipe_read(void) {
  char c;
  sink += read(pipe_read_fds[0], &c, 1);
  sink += 1;
}
__attribute__((noinline)) void wait_in_poll(void) {
  struct pollfd p = {.fd = pipe_poll_fds[0], .events = POLLIN};
  sink += poll(&p, 1, -1);
  sink += 1;
}
__attribute__((noinline)) void wait_in_cond_wait(void) {
  pthread_mutex_lock(&cond_lock);
  while (!cond_done) sink += pthread_cond_wait(&cond, &cond_lock);
  pthread_mutex_unlock(&cond_lock);
  sink += 1;
}
__attribute__((noinline)) void wait_in_nanosleep(double until) {
  struct timespec now;
  do {
    struct timespec step = {0, 50 * 1000 * 1000};
    sink += nanosleep(&step, NULL);
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while (now.tv_sec + now.tv_nsec / 1e9 < until);
  sink += 1;
}

static void* sleeper(void* arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "joined"); /* not "join", the name it inherited */
  usleep((useconds_t)(seconds * 1e6));
  return NULL;
}
__attribute__((noinline)) void wait_in_join(pthread_t t) {
  sink += pthread_join(t, NULL);
  sink += 1;
}

static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void* run(void* arg) {
  const long which = (long)arg;
  static const char* const names[] = {"mutex_lock", "pipe_read", "poll", "cond_wait", "nanosleep", "join"};
  pthread_setname_np(pthread_self(), names[which]);
  switch (which) {
    case 0: wait_in_mutex_lock(); break;
    case 1: wait_in_pipe_read(); break;
    case 2: wait_in_poll(); break;
    case 3: wait_in_cond_wait(); break;
    case 4: wait_in_nanosleep(mono() + seconds); break;
    case 5: {
      pthread_t t;
      pthread_create(&t, NULL, sleeper, NULL);
      wait_in_join(t);
      break;
    }
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc > 1) seconds = atof(argv[1]);
  const double startup_ms = argc > 2 ? atof(argv[2]) : 100;
  if (pipe(pipe_read_fds) != 0 || pipe(pipe_poll_fds) != 0) return 1;
  pthread_mutex_lock(&held);
  /* Start-up work before the threads block: a thread that blocks within the first milliseconds of
   * its process may do so before the recorder has published the process's tables (on a loaded
   * machine the recorder can take that long to run), and that interval's stack is then walked by
   * frame pointer first (counted as tables pending), and walked again once they are published while
   * the thread still waits. argv[2] = 0 blocks at once, to test that second walk. */
  usleep((useconds_t)(startup_ms * 1000));
  pthread_t threads[6];
  for (long i = 0; i < 6; ++i) pthread_create(&threads[i], NULL, run, (void*)i);
  usleep((useconds_t)(seconds * 1e6));
  pthread_mutex_unlock(&held);
  if (write(pipe_read_fds[1], "x", 1) != 1 || write(pipe_poll_fds[1], "x", 1) != 1) return 1;
  pthread_mutex_lock(&cond_lock);
  cond_done = 1;
  pthread_cond_broadcast(&cond);
  pthread_mutex_unlock(&cond_lock);
  for (int i = 0; i < 6; ++i) pthread_join(threads[i], NULL);
  printf("%ld\n", sink);
  return 0;
}
