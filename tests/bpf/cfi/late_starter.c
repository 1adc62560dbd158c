/* cfi fixture: sleeps argv[1] seconds, then forks and execs argv[2...] and waits for it: a process
 * that starts after the recording began, whose tables are loaded from its first mmap records. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  usleep((useconds_t)(atof(argv[1]) * 1e6));
  const pid_t child = fork();
  if (child == 0) {
    execv(argv[2], argv + 2);
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
