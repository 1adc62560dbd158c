// Tail-call fixture: mid() and other() each end in a tail call to leaf() (gcc -O2 compiles the
// `return leaf(...)` into a jmp). `calls_tail A B` calls mid() A times and other() B times from
// main(), so the source has A calls mid->leaf and B calls other->leaf.
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;

NOINLINE unsigned long leaf(unsigned long i) {
  sink += i;
  __asm__ volatile("" ::: "memory");
  return sink;
}

NOINLINE unsigned long mid(unsigned long i) {
  sink ^= i;
  return leaf(i + 1);  // a tail call: mid's frame is gone when leaf runs
}

NOINLINE unsigned long other(unsigned long i) {
  sink -= i;
  return leaf(i * 2);  // a tail call too
}

int main(int argc, char** argv) {
  const unsigned long a = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000;
  const unsigned long b = argc > 2 ? strtoul(argv[2], NULL, 10) : 250;
  unsigned long total = 0;
  for (unsigned long i = 0; i < a; ++i) total += mid(i);
  for (unsigned long i = 0; i < b; ++i) total += other(i);
  printf("%lu\n", total);
  return 0;
}
