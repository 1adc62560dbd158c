/* Layout shared by alloc.bpf.c and hpd's allocation probes (`hpctl record --alloc --pid`,
 * collect/src/calls/alloc_probes.cpp): the probed functions, the records of the ring, the counters,
 * and the exponential draw the sampling decision makes in the kernel. */
#ifndef HPD_BPF_ALLOC_EVENT_H
#define HPD_BPF_ALLOC_EVENT_H

#ifndef __bpf__
#include <linux/types.h>
#endif

/* The allocator's entry points; each probe's attach cookie names its function. */
enum hpd_alloc_fn {
  HPD_ALLOC_FN_MALLOC = 0,         /* malloc(size) */
  HPD_ALLOC_FN_CALLOC = 1,         /* calloc(n, size) */
  HPD_ALLOC_FN_REALLOC = 2,        /* realloc(ptr, size): a free of ptr and an allocation */
  HPD_ALLOC_FN_FREE = 3,           /* free(ptr) */
  HPD_ALLOC_FN_POSIX_MEMALIGN = 4, /* posix_memalign(&ptr, align, size): 0 and *ptr */
  HPD_ALLOC_FN_ALIGNED_ALLOC = 5,  /* aligned_alloc(align, size) */
  HPD_ALLOC_FN_MEMALIGN = 6,       /* memalign(align, size) */
  HPD_ALLOC_FN_VALLOC = 7,         /* valloc(size) */
  HPD_ALLOC_FN_PVALLOC = 8,        /* pvalloc(size) */
  HPD_ALLOC_FN_COUNT = 9,
};

/* Or'ed into a probe's cookie: the function calls another of the module's probed functions
 * (libtcmalloc's posix_memalign calls its memalign). While it runs on a thread, that thread's calls of
 * the other probed functions are its own and are not looked at; its return always runs. */
#define HPD_ALLOC_FN_WRAPS 0x100u

#define HPD_ALLOC_BPF_MAX_FRAMES 64

enum hpd_alloc_bpf_kind {
  HPD_ALLOC_BPF_ALLOC = 1,           /* a sampled allocation, its address in the live map */
  HPD_ALLOC_BPF_ALLOC_UNTRACKED = 2, /* sampled, but the live map was full: its free is not watched */
  HPD_ALLOC_BPF_FREE = 3,            /* the free of a sampled allocation */
  /* realloc(ptr, size) failed (returned NULL for a size that is not 0): ptr, whose free the record
   * of kind FREE with HPD_ALLOC_FREE_BY_REALLOC of the same thread just before said, was not freed. */
  HPD_ALLOC_BPF_REALLOC_FAILED = 4,
};

/* hpd_alloc_bpf_free.flags: the free is realloc's, told at its entry (kind FREE), which a record of
 * kind REALLOC_FAILED of the same thread may take back. */
#define HPD_ALLOC_FREE_BY_REALLOC 1u

/* A sampled allocation (kind ALLOC or ALLOC_UNTRACKED); `ips` are user return addresses, innermost
 * first (the first is where the allocator returns to), `frames` of them. */
struct hpd_alloc_bpf_sample {
  __u32 kind;
  __u32 frames;
  __s32 pid;
  __s32 tid;
  __u64 address;
  __u64 size;
  __u64 time_ns; /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
  __u64 ips[HPD_ALLOC_BPF_MAX_FRAMES];
};

/* The free of a sampled allocation (kind FREE), or realloc's failure to free it (REALLOC_FAILED). */
struct hpd_alloc_bpf_free {
  __u32 kind;
  __u32 flags;
  __s32 pid;
  __s32 tid;
  __u64 address;
  __u64 time_ns;
};

struct hpd_alloc_live_key {
  __s32 pid;
  __u32 pad;
  __u64 address;
};

enum hpd_alloc_counter {
  HPD_ALLOC_CALLS = 0,          /* calls of the allocating functions by the target (not realloc(p, 0)) */
  HPD_ALLOC_FREES = 1,          /* calls of free (and realloc's free of its pointer, when it succeeded) */
  HPD_ALLOC_FREE_NULL = 2,      /* free(NULL) */
  HPD_ALLOC_FREE_UNSAMPLED = 3, /* frees of addresses not in the live map */
  HPD_ALLOC_SAMPLED = 4,        /* allocations the entry chose to sample */
  HPD_ALLOC_FAILED = 5,         /* sampled calls that returned no memory */
  HPD_ALLOC_RING_FULL = 6,      /* samples and frees lost: the ring was full */
  HPD_ALLOC_UNTRACKED = 7,      /* samples whose address the live map had no room for */
  HPD_ALLOC_OVERFLOW = 8,       /* calloc(n, size) whose n * size overflows: not counted */
  HPD_ALLOC_NO_STATE = 9,       /* calls not looked at: no per-thread state could be made */
  HPD_ALLOC_COUNTER_COUNT = 10,
};

/* The exponential draw, in integers (no floating point in eBPF): -ln(u) in Q24 fixed point for
 * u = (r + 1) / 2^32, r uniform on 32 bits. ln(r + 1) = k ln 2 + ln(m) with k the index of the
 * leading bit and m in [1, 2); ln(m) is read from a table of ln(1 + i/64) (Q24), linearly
 * interpolated. The chord lies below ln, so the result is too large by at most (1/64)^2 / 8 =
 * 3.05e-5 (plus 1e-7 of rounding): the mean of the draws is 1 + 3e-5 at worst, against 1. u takes
 * 2^32 values, so a draw never exceeds 32 ln 2 = 22.2 means (the exponential's tail beyond that,
 * 2.3e-10, is cut). Checked against libm by alloc_draw_test. */
#define HPD_ALLOC_LN2_Q24 11629080ull
static const __u32 hpd_alloc_ln_table[65] = {
    0,        260117,   516263,   768556,   1017112,  1262040,  1503443,  1741421,  1976071,  2207485,
    2435750,  2660951,  2883169,  3102482,  3318965,  3532691,  3743728,  3952143,  4158001,  4361364,
    4562291,  4760840,  4957067,  5151025,  5342767,  5532342,  5719799,  5905184,  6088544,  6269921,
    6449358,  6626896,  6802576,  6976434,  7148510,  7318838,  7487455,  7654394,  7819688,  7983370,
    8145469,  8306018,  8465045,  8622579,  8778647,  8933277,  9086495,  9238326,  9388795,  9537927,
    9685745,  9832271,  9977530,  10121541, 10264327, 10405907, 10546303, 10685534, 10823619, 10960577,
    11096425, 11231183, 11364866, 11497493, 11629080,
};

static inline __u64 hpd_alloc_neg_ln_q24(__u32 r) {
  const __u64 y = (__u64)r + 1; /* 1 .. 2^32 */
  __u64 t = y;
  __u32 k = 0;
  if (t >= (1ull << 32)) {
    t >>= 32;
    k += 32;
  }
  if (t >= (1ull << 16)) {
    t >>= 16;
    k += 16;
  }
  if (t >= (1ull << 8)) {
    t >>= 8;
    k += 8;
  }
  if (t >= (1ull << 4)) {
    t >>= 4;
    k += 4;
  }
  if (t >= (1ull << 2)) {
    t >>= 2;
    k += 2;
  }
  if (t >= (1ull << 1)) {
    k += 1;
  }
  /* y < 2^(k+1), so the shift stays within 33 bits; the fraction of m - 1 in Q32. */
  const __u64 frac = (y << (32 - k)) & 0xffffffffull;
  const __u32 i = (__u32)(frac >> 26) & 63;
  const __u64 rest = frac & ((1ull << 26) - 1);
  const __u64 lo = hpd_alloc_ln_table[i];
  const __u64 hi = hpd_alloc_ln_table[i + 1];
  const __u64 ln_m = lo + (((hi - lo) * rest) >> 26);
  const __u64 ln_y = (__u64)k * HPD_ALLOC_LN2_Q24 + ln_m;
  const __u64 ln_max = 32 * HPD_ALLOC_LN2_Q24;
  return ln_y >= ln_max ? 0 : ln_max - ln_y;
}

/* The next sampling distance in bytes for a mean of `mean` bytes (at most 2^40): mean * -ln(u),
 * at least 1. */
static inline __u64 hpd_alloc_distance(__u64 mean, __u32 r) {
  const __u64 q = hpd_alloc_neg_ln_q24(r); /* < 2^29 */
  const __u64 d = (mean >> 24) * q + (((mean & 0xffffffull) * q) >> 24);
  return d == 0 ? 1 : d;
}

#endif
