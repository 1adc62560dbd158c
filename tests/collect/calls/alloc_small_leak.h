/* How alloc_fixture.c and alloc_pid_fixture.c allocate their small blocks and the blocks they leak:
 * malloc, free and posix_memalign; or, built with -DHPD_CXX_NEW against an allocator that defines
 * C++'s operator new and delete (jemalloc, tcmalloc), operator new and sized delete, and the aligned
 * operator new, called as C++ code calls them. */
#ifndef HPD_TESTS_ALLOC_SMALL_LEAK_H
#define HPD_TESTS_ALLOC_SMALL_LEAK_H

#include <stddef.h>
#include <stdlib.h>

#ifdef HPD_CXX_NEW
void* _Znwm(size_t size);
void _ZdlPvm(void* p, size_t size);
void* _ZnwmSt11align_val_t(size_t size, size_t alignment);
#define SMALL_ALLOC(n) _Znwm(n)
#define SMALL_FREE(p, n) _ZdlPvm(p, n)
#define LEAK_ALLOC(out, alignment, n) ((*(out) = _ZnwmSt11align_val_t(n, alignment)) == NULL)
#else
#define SMALL_ALLOC(n) malloc(n)
#define SMALL_FREE(p, n) free(p)
#define LEAK_ALLOC(out, alignment, n) (posix_memalign(out, alignment, n) != 0)
#endif

#endif
