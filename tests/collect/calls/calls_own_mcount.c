// A program with its own __fentry__ (built -pg -mfentry): it counts its calls itself, so a preloaded
// hook never sees them. `calls_own_mcount N` calls work() N times and exits 0 when its own hook saw
// exactly main + N calls of work (the hook must keep working under hpd).
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

unsigned long own_hook_calls;

// The program's hook: counts and returns (written in assembly: no instrumentation of its own).
__asm__(
    ".text\n.globl __fentry__\n.type __fentry__, @function\n__fentry__:\n"
    "  incq own_hook_calls(%rip)\n  ret\n.size __fentry__, . - __fentry__\n");

volatile unsigned long sink;

NOINLINE void work(unsigned long i) {
  sink += i;
  __asm__ volatile("" ::: "memory");
}

int main(int argc, char** argv) {
  const unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000;
  for (unsigned long i = 0; i < n; ++i) work(i);
  printf("own hook calls %lu\n", own_hook_calls);
  return own_hook_calls == n + 1 ? 0 : 1;
}
