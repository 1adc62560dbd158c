// Fork and exec under call counting: `calls_fork_exec PROGRAM P C` calls callee() P times from
// parent_work(), forks a child that calls it C times from child_work() and exits, then forks a child
// that execs `PROGRAM 1000 250` (the call-count fixture). Exits 0 when both children exited 0.
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;

NOINLINE void callee(unsigned long i) {
  sink += i;
  __asm__ volatile("" ::: "memory");
}

NOINLINE void parent_work(unsigned long n) {
  for (unsigned long i = 0; i < n; ++i) callee(i);
  __asm__ volatile("" ::: "memory");
}

NOINLINE void child_work(unsigned long n) {
  for (unsigned long i = 0; i < n; ++i) callee(i);
  __asm__ volatile("" ::: "memory");
}

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  parent_work(strtoul(argv[2], NULL, 10));
  const pid_t worker = fork();
  if (worker == 0) {
    child_work(strtoul(argv[3], NULL, 10));
    _exit(0);
  }
  const pid_t execer = fork();
  if (execer == 0) {
    char* args[] = {argv[1], "1000", "250", NULL};
    execv(argv[1], args);
    _exit(127);
  }
  int s1 = 0, s2 = 0;
  if (worker < 0 || execer < 0 || waitpid(worker, &s1, 0) != worker || waitpid(execer, &s2, 0) != execer)
    return 3;
  return WIFEXITED(s1) && WEXITSTATUS(s1) == 0 && WIFEXITED(s2) && WEXITSTATUS(s2) == 0 ? 0 : 1;
}
