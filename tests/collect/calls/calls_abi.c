// What the hooks must preserve: `calls_abi N` calls functions that take their arguments in every
// argument register (6 integers, 8 doubles), a variadic one (al = vector registers used), one
// returning a long double (x87) and a struct in rax:rdx, and a GCC nested function (static chain in
// r10; gcc only), N times each, while a 2 kHz timer's signal handler calls instrumented functions.
// Exits 0 when every result was right.
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

#define NOINLINE __attribute__((noinline))

NOINLINE long ints(long a, long b, long c, long d, long e, long f) {
  return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f;
}

NOINLINE double doubles(double a, double b, double c, double d, double e, double f, double g, double h) {
  return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h;
}

NOINLINE double variadic(int n, ...) {
  va_list ap;
  va_start(ap, n);
  double s = 0;
  for (int i = 0; i < n; ++i) s += va_arg(ap, double);
  va_end(ap);
  return s;
}

NOINLINE long double extended(long double x) {
  return x * 3;
}

struct pair {
  long first, second;
};

NOINLINE struct pair two(long a) {
  struct pair p = {a, -a};
  return p;
}

volatile unsigned long handled;

NOINLINE void in_handler(unsigned long i) {
  handled += i;
}

static void on_alarm(int sig) {
  (void)sig;
  in_handler(1);
}

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 100000;
  struct sigaction sa = {0};
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval every = {{0, 500}, {0, 500}};
  setitimer(ITIMER_REAL, &every, NULL);
  long bad = 0;
  long base = 1;
#ifndef __clang__
  // A nested function reads `base` through the static chain (r10); gcc saves r10 around __fentry__.
  NOINLINE long nested(long x) {
    return x + base;
  }
#else
#define nested(x) ((x) + base)  // clang has no nested functions
#endif
  for (long i = 0; i < n; ++i) {
    base = i;
    if (ints(i, 1, 2, 3, 4, 5) != i + 2 + 6 + 12 + 20 + 30) ++bad;
    if (doubles(i, 1.5, 2, 3, 4, 5, 6, 7.25) != i + 3 + 6 + 12 + 20 + 30 + 42 + 58) ++bad;
    if (variadic(3, 0.5, 1.5, (double)i) != 2.0 + i) ++bad;
    if (extended((long double)i + 0.25L) != ((long double)i + 0.25L) * 3) ++bad;
    const struct pair p = two(i);
    if (p.first != i || p.second != -i) ++bad;
    if (nested(7) != 7 + i) ++bad;
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  printf("bad %ld handled %lu\n", bad, handled);
  return bad == 0 ? 0 : 1;
}
