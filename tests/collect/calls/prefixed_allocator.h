/* An allocator linked into the program under other names, as Rust's tikv-jemallocator links jemalloc
 * (_rjem_malloc, _rjem_free, ...): included first (-include) into a fixture that knows its own
 * allocations, it defines _rjem_* functions and turns the fixture's malloc, calloc, realloc, free,
 * posix_memalign, aligned_alloc, memalign and valloc into calls of them. The C library's allocator is
 * not called: its memory comes from one mmap'd arena, in blocks of power-of-two sizes reused through a
 * free list per size. The functions are global (in the program's .symtab, not its .dynsym) and noipa
 * (neither inlined nor cloned): each call of the fixture reaches the entry point by its name, as a
 * call of a library's function does. */
#ifndef HPD_TEST_PREFIXED_ALLOCATOR_H
#define HPD_TEST_PREFIXED_ALLOCATOR_H

#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PA_ARENA (8ull << 30)
#define PA_CLASSES 40

struct pa_header {
  uintptr_t chunk; /* start of the chunk the block is in */
  uint32_t cls;    /* its size: 1 << cls */
  uint32_t usable; /* bytes from the block to the chunk's end */
};

static pthread_mutex_t pa_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t pa_next, pa_end;
static void* pa_free_list[PA_CLASSES];

/* A block of `size` bytes aligned to `align` (a power of two), or NULL. */
static void* pa_alloc(size_t size, size_t align) {
  if (align < 16) align = 16;
  if (size > (1ull << 34) || align > (1ull << 20)) return NULL;
  const size_t need = size + align + sizeof(struct pa_header);
  uint32_t cls = 6;
  while ((1ull << cls) < need) ++cls;
  pthread_mutex_lock(&pa_lock);
  uintptr_t chunk = (uintptr_t)pa_free_list[cls];
  if (chunk != 0) {
    pa_free_list[cls] = *(void**)chunk;
  } else {
    if (pa_next == 0) {
      void* arena =
          mmap(NULL, PA_ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (arena != MAP_FAILED) {
        pa_next = (uintptr_t)arena;
        pa_end = pa_next + PA_ARENA;
      }
    }
    if (pa_next != 0 && pa_end - pa_next >= (1ull << cls)) {
      chunk = pa_next;
      pa_next += 1ull << cls;
    }
  }
  pthread_mutex_unlock(&pa_lock);
  if (chunk == 0) return NULL;
  const uintptr_t block = (chunk + sizeof(struct pa_header) + align - 1) & ~(uintptr_t)(align - 1);
  struct pa_header* h = (struct pa_header*)block - 1;
  h->chunk = chunk;
  h->cls = cls;
  h->usable = (uint32_t)(chunk + (1ull << cls) - block);
  return (void*)block;
}

__attribute__((noipa, used)) void _rjem_free(void* p) {
  if (p == NULL) return;
  struct pa_header* h = (struct pa_header*)p - 1;
  const uintptr_t chunk = h->chunk;
  const uint32_t cls = h->cls;
  pthread_mutex_lock(&pa_lock);
  *(void**)chunk = pa_free_list[cls];
  pa_free_list[cls] = (void*)chunk;
  pthread_mutex_unlock(&pa_lock);
}

__attribute__((noipa, used)) void* _rjem_malloc(size_t size) {
  return pa_alloc(size, 16);
}

__attribute__((noipa, used)) void* _rjem_calloc(size_t n, size_t size) {
  if (size != 0 && n > SIZE_MAX / size) return NULL;
  void* p = pa_alloc(n * size, 16);
  if (p != NULL) memset(p, 0, n * size);
  return p;
}

__attribute__((noipa, used)) void* _rjem_realloc(void* p, size_t size) {
  if (p == NULL) return pa_alloc(size, 16);
  if (size == 0) {
    _rjem_free(p);
    return NULL;
  }
  void* q = pa_alloc(size, 16);
  if (q == NULL) return NULL;
  const size_t old = ((struct pa_header*)p - 1)->usable;
  memcpy(q, p, old < size ? old : size);
  _rjem_free(p);
  return q;
}

__attribute__((noipa, used)) int _rjem_posix_memalign(void** out, size_t align, size_t size) {
  void* p = pa_alloc(size, align);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

__attribute__((noipa, used)) void* _rjem_aligned_alloc(size_t align, size_t size) {
  return pa_alloc(size, align);
}

__attribute__((noipa, used)) void* _rjem_memalign(size_t align, size_t size) {
  return pa_alloc(size, align);
}

__attribute__((noipa, used)) void* _rjem_valloc(size_t size) {
  return pa_alloc(size, 4096);
}

#define malloc _rjem_malloc
#define calloc _rjem_calloc
#define realloc _rjem_realloc
#define free _rjem_free
#define posix_memalign _rjem_posix_memalign
#define aligned_alloc _rjem_aligned_alloc
#define memalign _rjem_memalign
#define valloc _rjem_valloc

#endif
