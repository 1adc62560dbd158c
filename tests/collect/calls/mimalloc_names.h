/* Included first (-include) into a fixture that knows its own allocations: its malloc, calloc, free,
 * posix_memalign, ... become calls of mimalloc's own entry points (mi_malloc, mi_calloc, mi_free,
 * mi_posix_memalign, ...), as a program written against mimalloc's API makes them. */
#include <malloc.h>
#include <mimalloc-override.h>
#include <stdlib.h>
