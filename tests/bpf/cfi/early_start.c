/* cfi fixture: from its first instruction in main spins argv[2] CPU seconds in early_work of a library
 * it links (libearly.so), then dlopen()s argv[1] (the same code under another name) and spins argv[3]
 * CPU seconds in its early_work, called from call_opened. No frame pointers: the samples taken before
 * the recorder has published the process's tables (its libraries appear only after the exec) are
 * walked by frame pointer by the programs, and only a second walk with the tables reaches main. Prints
 * the CPU seconds it measured in each phase. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

double early_work(double seconds);

__attribute__((noinline)) static double call_opened(double (*work)(double), double seconds) {
  const double measured = work(seconds);
  __asm__ volatile("" ::: "memory"); /* not a tail call: call_opened stays on the stack */
  return measured;
}

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  const double linked = early_work(atof(argv[2]));
  void* lib = dlopen(argv[1], RTLD_NOW);
  if (lib == NULL) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  double (*work)(double) = (double (*)(double))dlsym(lib, "early_work");
  if (work == NULL) return 1;
  const double opened = call_opened(work, atof(argv[3]));
  printf("%.6f %.6f\n", linked, opened);
  return 0;
}
