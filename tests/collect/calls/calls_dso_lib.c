// Library the dlopen fixture loads after recording started: lib_run(n) calls lib_callee() n times.
#define NOINLINE __attribute__((noinline))

volatile unsigned long lib_sink;

NOINLINE void lib_callee(unsigned long i) {
  lib_sink += i;
  __asm__ volatile("" ::: "memory");
}

NOINLINE void lib_run(unsigned long n) {
  for (unsigned long i = 0; i < n; ++i) lib_callee(i);
  __asm__ volatile("" ::: "memory");
}
