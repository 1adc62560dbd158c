// A target that crashes: `calls_crash N` calls callee() N times from caller_a(), then dies of SIGSEGV.
#include <signal.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;
volatile int* volatile nowhere;

NOINLINE void callee(unsigned long i) {
  sink += i;
  __asm__ volatile("" ::: "memory");
}

NOINLINE void caller_a(unsigned long n) {
  for (unsigned long i = 0; i < n; ++i) callee(i);
  __asm__ volatile("" ::: "memory");
}

int main(int argc, char** argv) {
  caller_a(argc > 1 ? strtoul(argv[1], NULL, 10) : 1000);
  signal(SIGSEGV, SIG_DFL);
  *nowhere = 1;  // SIGSEGV
  return 0;
}
