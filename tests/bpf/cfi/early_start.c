/* cfi fixture: from its first instruction in main spins argv[2] CPU seconds in late_work of a library
 * it links (libearly.so, late_lib.c built under another name), then dlopen()s argv[1] (liblate.so) and
 * spins argv[3] CPU seconds in its late_work, called from call_opened. No frame pointers: the samples
 * taken before the recorder has published the process's tables (its libraries appear only after the
 * exec, the opened one at its mmap) are walked by frame pointer by the programs, and only a second
 * walk with the tables reaches main. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

unsigned long late_work(double seconds);

__attribute__((noinline)) static unsigned long call_opened(unsigned long (*work)(double), double seconds) {
  const unsigned long result = work(seconds);
  __asm__ volatile("" ::: "memory"); /* not a tail call: call_opened stays on the stack */
  return result;
}

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  const unsigned long linked = late_work(atof(argv[2]));
  void* lib = dlopen(argv[1], RTLD_NOW);
  unsigned long (*work)(double) = lib ? (unsigned long (*)(double))dlsym(lib, "late_work") : NULL;
  if (work == NULL) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  printf("%lu %lu\n", linked, call_opened(work, atof(argv[3])));
  return 0;
}
