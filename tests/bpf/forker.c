/* Test target for following children: forks a child that execs ARGS, spins a little itself while
 * the child runs, waits for it, and exits with the child's exit code.
 * Usage: hpd_bpf_forker PROGRAM ARGS... */
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile uint64_t sink;

__attribute__((noinline)) void forker_spin(void) {
  uint64_t x = sink;
  for (long i = 0; i < 50000000; ++i) {
    x = x * 6364136223846793005ULL + 1;
    __asm__ volatile("" : "+r"(x));
  }
  sink = x;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PROGRAM ARGS...\n", argv[0]);
    return 2;
  }
  const pid_t child = fork();
  if (child < 0) return 3;
  if (child == 0) {
    execv(argv[1], argv + 1);
    _exit(127);
  }
  forker_spin();
  int status = 0;
  if (waitpid(child, &status, 0) != child) return 4;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 5;
}
