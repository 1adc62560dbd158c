/* cfi fixture: waits argv[2] seconds, then dlopen()s argv[1] (late_lib) and spins in its late_work
 * for argv[3] seconds: a module mapped while the recording runs. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  usleep((useconds_t)(atof(argv[2]) * 1e6));
  void* lib = dlopen(argv[1], RTLD_NOW);
  if (lib == NULL) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  unsigned long (*work)(double) = (unsigned long (*)(double))dlsym(lib, "late_work");
  if (work == NULL) return 1;
  printf("%lu\n", work(atof(argv[3])));
  return 0;
}
