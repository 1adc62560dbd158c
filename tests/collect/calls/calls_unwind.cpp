// Control flow that bypasses returns, under call counting: C++ exceptions thrown through instrumented
// frames and caught (and caught, rethrown and caught again), longjmp out of instrumented frames, then
// ordinary calls again. `calls_unwind N` does each N times and exits 0 when every result was right.
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

#include <stdexcept>

#define NOINLINE __attribute__((noinline))

static jmp_buf jump_back;
volatile unsigned long sink;

NOINLINE void leaf(unsigned long i) {
  sink += i;
  __asm__ volatile("" ::: "memory");
}

NOINLINE void thrower(unsigned long i) {
  leaf(i);
  if (i % 2 == 0) throw std::runtime_error("even");
}

NOINLINE int middle(unsigned long i) {
  thrower(i);
  return 1;
}

// Catches and rethrows (`throw;` unwinds again from the catch block).
NOINLINE int rethrower(unsigned long i) {
  try {
    thrower(i);
  } catch (...) {
    throw;
  }
  return 1;
}

NOINLINE void jumper(unsigned long i) {
  leaf(i);
  longjmp(jump_back, 1);
}

NOINLINE void jump_middle(unsigned long i) {
  jumper(i);
  leaf(i);  // never reached
}

NOINLINE unsigned long after(unsigned long n) {
  unsigned long s = 0;
  for (unsigned long i = 0; i < n; ++i) {
    leaf(i);
    s += i;
  }
  return s;
}

int main(int argc, char** argv) {
  const unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 100;
  unsigned long caught = 0, returned = 0, jumped = 0, rethrown = 0;
  for (unsigned long i = 0; i < n; ++i) {
    try {
      returned += middle(i);
    } catch (const std::runtime_error&) {
      ++caught;
    }
    try {
      returned += rethrower(i);
    } catch (const std::runtime_error&) {
      ++rethrown;
    }
  }
  for (volatile unsigned long i = 0; i < n; ++i) {
    if (setjmp(jump_back) == 0)
      jump_middle(i);
    else
      ++jumped;
  }
  const unsigned long s = after(n);
  const bool ok = caught == (n + 1) / 2 && rethrown == (n + 1) / 2 && returned == 2 * (n / 2) &&
                  jumped == n && s == n * (n - 1) / 2;
  printf("caught %lu rethrown %lu returned %lu jumped %lu sum %lu\n", caught, rethrown, returned, jumped, s);
  return ok ? 0 : 1;
}
