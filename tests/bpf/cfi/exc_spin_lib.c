/* cfi fixture: a shared library whose exported function, called through the PLT, spins in a leaf. */
static volatile unsigned long lib_sink;

__attribute__((noinline)) static unsigned long spin_leaf(unsigned long rounds) {
  for (unsigned long i = 0; i < rounds; ++i) lib_sink = lib_sink + i * 3;
  return lib_sink;
}

unsigned long lib_spin(unsigned long rounds) {
  return spin_leaf(rounds) + 1; /* not a tail call */
}
