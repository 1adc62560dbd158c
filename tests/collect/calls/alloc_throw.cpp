// For `hpctl record --alloc -- CMD` with an allocator that defines its own operator new (linked with
// jemalloc): three operator new calls that throw std::bad_alloc (1 << 62 bytes) through the runtime's
// operator new, then 4,096 blocks of 4 KiB by operator new[], never freed (16 MiB), in leak_after().
// Prints "caught N" and exits 0 when every throw was caught.
#include <cstdio>
#include <cstdlib>
#include <new>

static void* volatile sink;

__attribute__((noinline)) static int throws() {
  int caught = 0;
  for (int i = 0; i < 3; ++i) {
    try {
      sink = new char[size_t{1} << 62];
    } catch (const std::bad_alloc&) {
      ++caught;
    }
  }
  return caught;
}

extern "C" __attribute__((noinline)) void leak_after() {
  for (int i = 0; i < 4096; ++i) sink = new char[4096];
}

int main() {
  const int caught = throws();
  leak_after();
  std::printf("caught %d\n", caught);
  return caught == 3 ? 0 : 1;
}
