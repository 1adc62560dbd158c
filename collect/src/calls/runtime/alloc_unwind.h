/* The allocation runtime's own unwinder (alloc_unwind.c): x86-64 stacks through the modules' CFI, one
 * rule per return address computed once and cached, for the common frames (CFA = rsp or rbp plus an
 * offset, the return address at CFA-8, rbp saved at CFA+n or unchanged). A sample with any other frame
 * is left to libgcc's _Unwind_Backtrace, which gives the same frames. Internal to libhpdcalls.so. */
#ifndef HPD_CALLS_RUNTIME_ALLOC_UNWIND_H
#define HPD_CALLS_RUNTIME_ALLOC_UNWIND_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of memory the rule cache takes (given to alloc_unwind_init, zeroed). */
#define ALLOC_UNWIND_CACHE_BYTES (8u << 14)

/* Gives the cache its memory; returns 0 when this libc or this machine has no fast unwind (every
 * sample then goes to libgcc). `self_low`..`self_high`: the runtime's text, whose frames at the top of
 * a stack are not reported (as collect_frame does for libgcc's walk). */
__attribute__((visibility("hidden"))) int alloc_unwind_init(void* cache, uintptr_t self_low,
                                                            uintptr_t self_high);

/* Called after a dlclose: rules of unloaded code must not serve code loaded at the same addresses. */
__attribute__((visibility("hidden"))) void alloc_unwind_forget_all(void);

/* The frames from `pc` (an address inside the caller's function, with `sp` and `fp` its rsp and rbp
 * there) outwards, as libgcc reports them: return addresses, the runtime's own at the top left out,
 * at most `max`. Returns their number, or -1 when some frame needs libgcc (nothing is then known). */
__attribute__((visibility("hidden"))) int alloc_unwind(uint64_t pc, uint64_t sp, uint64_t fp,
                                                       uint64_t* frames, uint32_t max);

/* The registers alloc_unwind starts from, read where this expands (an early-clobber output each, so
 * that none is written before rbp is read). */
#if defined(__x86_64__)
#define ALLOC_UNWIND_HERE(pc, sp, fp) \
  __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2" : "=&r"(pc), "=&r"(sp), "=&r"(fp))
#else
#define ALLOC_UNWIND_HERE(pc, sp, fp) ((pc) = 0, (sp) = 0, (fp) = 0)
#endif

#endif
