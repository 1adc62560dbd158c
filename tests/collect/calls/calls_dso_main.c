// dlopen fixture (itself uninstrumented): `calls_dso_main LIB N` waits a moment, dlopens LIB, and
// when lib_run's entry is a NOP site waits until it is hooked (its first byte becomes the int3 of a
// uprobe, or the call hpd's runtime patches in; at most 30 s), then calls lib_run(N) once. Exits 3
// when the NOP stayed.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const unsigned long n = strtoul(argv[2], NULL, 10);
  sleep_ms(200);  // recording has started: the library is mapped later
  void* lib = dlopen(argv[1], RTLD_NOW);
  if (lib == NULL) {
    fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  void (*run)(unsigned long) = (void (*)(unsigned long))dlsym(lib, "lib_run");
  if (run == NULL) return 2;
  const volatile unsigned char* entry = (const volatile unsigned char*)run;
  int waited = 0;
  // 0x0f: nop5 (clang), 0x90: nop1 (gcc); anything else is hooked or an instrumentation call.
  while ((*entry == 0x0f || *entry == 0x90) && waited < 3000) {
    sleep_ms(10);
    ++waited;
  }
  if (*entry == 0x0f || *entry == 0x90) return 3;
  run(n);
  return 0;
}
