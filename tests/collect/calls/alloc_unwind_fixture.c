/* Stacks of many shapes for the allocation runtime's unwinder (alloc_unwind_test.cpp), which runs
 * it beside libgcc's on every sample and counts the samples whose frames differ. Built -O2 without
 * frame pointers by gcc and clang; also built as a library (-DUNWIND_LIB) that the program dlopens.
 *
 *   chain:      recursion 1 .. 40 deep, a malloc of a varying size at the bottom
 *   vla:        frames with a variable-length array (their CFA is rbp + 16), chain inside
 *   deep:       300 frames (more than the 128 a record keeps)
 *   qsort:      allocations in a comparison function, under glibc's qsort
 *   noreturn:   a call to a noreturn function that allocates and longjmps out, the last instruction
 *               of its caller (the return address is past the caller's end: its rule is the one at
 *               the return address - 1)
 *   many:       2,048 functions of different frame sizes, each allocating: more return addresses
 *               than the rule cache can hold without two sharing a slot
 *   thread:     chain and vla in a second thread
 *   library:    a dlopened library's frames (vla among them) between the program's, dlclosed and
 *               dlopened again (its rules must not outlive it)
 * Exits 0 when all ran. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef UNWIND_LIB

typedef void (*leaf_fn)(unsigned);

__attribute__((noinline)) static unsigned lib_vla(unsigned n, leaf_fn leaf, unsigned depth) {
  volatile char buf[n + 8];
  buf[n] = (char)depth;
  if (depth > 0) return lib_vla(n + 24, leaf, depth - 1) + buf[n];
  leaf(n);
  return buf[n];
}

__attribute__((noinline)) static unsigned lib_chain(unsigned depth, leaf_fn leaf) {
  if (depth == 0) return lib_vla(8, leaf, 3);
  return lib_chain(depth - 1, leaf) + 1;
}

unsigned alloc_unwind_lib_entry(leaf_fn leaf, unsigned rounds) {
  unsigned sum = 0;
  for (unsigned i = 0; i < rounds; ++i) sum += lib_chain(i % 7, leaf);
  return sum;
}

#else

#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>

static void* volatile sink;
static unsigned g_seed = 12345;

static unsigned next_size(void) {
  g_seed = g_seed * 1103515245u + 12345u;
  return 16u + (g_seed >> 8) % 4096u;
}

__attribute__((noinline)) static void leaf_alloc(unsigned salt) {
  void* p = malloc(next_size() + (salt & 63u));
  memset(p, 1, 16);
  sink = p;
  free(p);
}

__attribute__((noinline)) static unsigned chain(unsigned depth) {
  if (depth == 0) {
    leaf_alloc(depth);
    return 1;
  }
  return chain(depth - 1) + depth;
}

__attribute__((noinline)) static unsigned vla(unsigned n, unsigned depth) {
  volatile char buf[n + 16];
  buf[n] = (char)depth;
  if (depth > 0) return vla(n * 3 + 8, depth - 1) + buf[n];
  return chain(n % 9) + buf[n];
}

__attribute__((noinline)) static unsigned deep(unsigned depth) {
  if (depth == 0) {
    leaf_alloc(7);
    return 0;
  }
  return deep(depth - 1) + 1;
}

static int compare(const void* a, const void* b) {
  leaf_alloc(3);
  const unsigned x = *(const unsigned*)a, y = *(const unsigned*)b;
  return x < y ? -1 : x > y;
}

static void run_qsort(void) {
  unsigned values[512];
  for (unsigned i = 0; i < 512; ++i) values[i] = (i * 2654435761u) >> 7;
  qsort(values, 512, sizeof values[0], compare);
}

/* MANY_FUNCTIONS(m): m(name) for 2,048 names; each function's frame is 8 * (k % 29) + 8 bytes more. */
#define MANY_8(m, p) m(p##0) m(p##1) m(p##2) m(p##3) m(p##4) m(p##5) m(p##6) m(p##7)
#define MANY_64(m, p) MANY_8(m, p##0) MANY_8(m, p##1) MANY_8(m, p##2) MANY_8(m, p##3) MANY_8(m, p##4) \
  MANY_8(m, p##5) MANY_8(m, p##6) MANY_8(m, p##7)
#define MANY_512(m, p) MANY_64(m, p##0) MANY_64(m, p##1) MANY_64(m, p##2) MANY_64(m, p##3) \
  MANY_64(m, p##4) MANY_64(m, p##5) MANY_64(m, p##6) MANY_64(m, p##7)
#define MANY_FUNCTIONS(m) MANY_512(m, a) MANY_512(m, b) MANY_512(m, c) MANY_512(m, d)
#define MANY_DEFINE(name)                                           \
  __attribute__((noinline)) static unsigned many_##name(unsigned n) { \
    volatile char pad[8 * (__COUNTER__ % 29) + 8];                  \
    pad[0] = (char)n;                                               \
    leaf_alloc(n);                                                  \
    return pad[0];                                                  \
  }
#define MANY_POINTER(name) many_##name,
MANY_FUNCTIONS(MANY_DEFINE)
static unsigned (*const g_many[])(unsigned) = {MANY_FUNCTIONS(MANY_POINTER)};

static void run_many(unsigned rounds) {
  unsigned sum = 0;
  for (unsigned r = 0; r < rounds; ++r)
    for (unsigned i = 0; i < sizeof g_many / sizeof g_many[0]; ++i) sum += g_many[i](i + r);
  sink = (void*)(uintptr_t)sum;
}

static jmp_buf g_jump;

__attribute__((noinline, noreturn)) static void alloc_and_leave(unsigned n) {
  leaf_alloc(n);
  longjmp(g_jump, 1);
}

__attribute__((noinline)) static void ends_in_noreturn(unsigned n) {
  volatile unsigned twice = n * 2;
  alloc_and_leave(twice);
}

static void run_noreturn(unsigned times) {
  for (volatile unsigned i = 0; i < times; ++i)
    if (setjmp(g_jump) == 0) ends_in_noreturn(i);
}

static void* thread_main(void* arg) {
  (void)arg;
  unsigned sum = 0;
  for (unsigned i = 0; i < 3000; ++i) sum += chain(i % 40) + vla(i % 64, i % 4);
  sink = (void*)(uintptr_t)sum;
  return NULL;
}

static void library_leaf(unsigned n) {
  chain(n % 5);
}

static int run_library(const char* path) {
  for (int round = 0; round < 2; ++round) {
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
      fprintf(stderr, "alloc_unwind_fixture: %s\n", dlerror());
      return 1;
    }
    unsigned (*entry)(void (*)(unsigned), unsigned) =
        (unsigned (*)(void (*)(unsigned), unsigned))dlsym(lib, "alloc_unwind_lib_entry");
    if (entry == NULL) return 1;
    sink = (void*)(uintptr_t)entry(library_leaf, 3000);
    dlclose(lib);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: alloc_unwind_fixture LIBRARY\n");
    return 2;
  }
  pthread_t thread;
  if (pthread_create(&thread, NULL, thread_main, NULL) != 0) return 1;
  unsigned sum = 0;
  for (unsigned i = 0; i < 4000; ++i) sum += chain(i % 40);
  for (unsigned i = 0; i < 3000; ++i) sum += vla(i % 100, i % 5);
  for (unsigned i = 0; i < 300; ++i) sum += deep(300);
  for (unsigned i = 0; i < 4; ++i) run_qsort();
  run_noreturn(20000);
  run_many(10);
  sink = (void*)(uintptr_t)sum;
  if (pthread_join(thread, NULL) != 0) return 1;
  return run_library(argv[1]);
}

#endif
