/* The shared-memory table of hpd's in-process call counter (libhpdcalls.so), read by hpd from outside.
 * Plain C: the runtime (C and assembly) and hpd (C++) both include it. */
#ifndef HPD_CALLS_PRELOAD_ABI_H
#define HPD_CALLS_PRELOAD_ABI_H

#include <stdint.h>

/* The environment variable that names the table (a file under /dev/shm) for the runtime. */
#define HPD_CALLS_ENV_TABLE "HPD_CALLS_TABLE"

#define HPD_CALLS_MAGIC 0x3153454c4c414348ull /* "HCALLES1" */
#define HPD_CALLS_VERSION 1u

/* Sizes. The file is sparse: only the pages a thread touches take memory. */
#define HPD_CALLS_MAX_THREADS 512u       /* thread slots, shared by every process of the recording */
#define HPD_CALLS_EDGES_PER_THREAD 4096u /* a power of two */
#define HPD_CALLS_FUNCS_PER_THREAD 4096u /* a power of two */
#define HPD_CALLS_HIST_BLOCKS 16384u     /* latency histograms, handed out to (thread, function) */

/* Log-linear latency histogram in TSC ticks: values below 16 have a bucket each; above, each power of
 * two is split into 16 equal sub-buckets (each at most 1/16 = 6.25% wide relative to its start).
 * Values of 2^48 ticks and more land in the last bucket. */
#define HPD_CALLS_HIST_SUB_BITS 4u
#define HPD_CALLS_HIST_SUB (1u << HPD_CALLS_HIST_SUB_BITS)
#define HPD_CALLS_HIST_MAX_EXP 47u
#define HPD_CALLS_HIST_BUCKETS ((HPD_CALLS_HIST_MAX_EXP - HPD_CALLS_HIST_SUB_BITS + 2u) * HPD_CALLS_HIST_SUB)

#define HPD_CALLS_NO_FUNC 0xffffffffu
#define HPD_CALLS_NO_HIST 0xffffffffu

static inline uint32_t hpd_calls_hist_bucket(uint64_t v) {
  if (v < HPD_CALLS_HIST_SUB) return (uint32_t)v;
  uint32_t e = 63u - (uint32_t)__builtin_clzll(v);
  if (e > HPD_CALLS_HIST_MAX_EXP) return HPD_CALLS_HIST_BUCKETS - 1u;
  const uint32_t sub = (uint32_t)(v >> (e - HPD_CALLS_HIST_SUB_BITS)) & (HPD_CALLS_HIST_SUB - 1u);
  return (e - HPD_CALLS_HIST_SUB_BITS + 1u) * HPD_CALLS_HIST_SUB + sub;
}

/* The smallest value of bucket `b` (its values are [low(b), low(b + 1))). */
static inline uint64_t hpd_calls_hist_low(uint32_t b) {
  if (b < HPD_CALLS_HIST_SUB) return b;
  const uint32_t e = b / HPD_CALLS_HIST_SUB + HPD_CALLS_HIST_SUB_BITS - 1u;
  const uint64_t sub = b % HPD_CALLS_HIST_SUB;
  return (1ull << e) + (sub << (e - HPD_CALLS_HIST_SUB_BITS));
}

/* The file: header, then the thread slots, then per slot its edge table, then per slot its function
 * table, then the histogram blocks. Every count is written by one thread only (its slot) with plain
 * aligned 64-bit stores, which the reader may see at any moment; an entry's key word is written last. */
struct hpd_calls_header {
  uint64_t magic;
  uint32_t version;
  uint32_t header_size;
  uint64_t file_size;
  uint32_t max_threads;
  uint32_t edges_per_thread;
  uint32_t funcs_per_thread;
  uint32_t hist_blocks;
  uint32_t hist_buckets;
  uint32_t threads_used;    /* slots handed out (atomic) */
  uint32_t hist_used;       /* histogram blocks handed out (atomic) */
  uint32_t processes;       /* runtimes that attached to the table (atomic) */
  uint64_t threads_refused; /* threads that found no free slot: their calls are not counted (atomic) */
  uint64_t sites_patched;   /* NOP sites turned into calls (atomic) */
  uint64_t sites_unpatched; /* NOP sites that could not be patched (atomic) */
  uint64_t clock_tsc;       /* a (TSC, CLOCK_MONOTONIC) pair taken by hpd when it made the table */
  uint64_t clock_mono_ns;
};

struct hpd_calls_thread {
  int32_t pid;
  int32_t tid;
  uint32_t state; /* 0 unused, 1 owned by a live thread, 2 its thread exited (reusable by the same pid) */
  uint32_t pad;
  uint64_t calls_lost;       /* calls not counted: edge table full, or a call inside the hook (signal) */
  uint64_t calls_untimed;    /* counted but not timed: shadow stack or function table full, tail calls */
  uint64_t frames_abandoned; /* timed calls that never returned through the hook (longjmp, exceptions) */
  uint64_t reserved[3];
};

struct hpd_calls_edge {
  uint64_t caller; /* return address in the caller */
  uint64_t callee; /* an address in the callee (after its mcount call, or its entry); 0 = free */
  uint64_t count;
  uint32_t func; /* into the slot's function table, or HPD_CALLS_NO_FUNC */
  uint32_t pad;
};

struct hpd_calls_func {
  uint64_t callee;      /* as in hpd_calls_edge; 0 = free */
  uint64_t timed;       /* calls that returned through the hook */
  uint64_t sum_ticks;   /* inclusive time of every timed call */
  uint64_t outer_ticks; /* inclusive time of the outermost activations only (recursion counted once) */
  uint64_t max_ticks;
  uint32_t hist;   /* histogram block, or HPD_CALLS_NO_HIST */
  uint32_t active; /* activations on the thread's stack now (the runtime's own bookkeeping) */
};

/* Unwinding through hooked frames. While a call is timed, its return address on the stack is the
 * runtime's return hook; the original is on the thread's shadow stack. Each process that counts calls
 * HPD_CALLS_ANNOUNCE_SYMBOL(trampoline, tls_state_offset) once (and again in each forked child): hpd's
 * eBPF programs take a uprobe there and, walking a stack of that process, replace the hook's address
 * by the original found on the shadow stack. The shadow stack is reached from the thread pointer (the
 * FS base): at thread pointer + tls_state_offset is a pointer to the thread's state, which holds the
 * shadow frames' address and how many are in use at the offsets below. */
#define HPD_CALLS_ANNOUNCE_SYMBOL "hpd_calls_announce"
#define HPD_CALLS_STATE_SHADOW_OFFSET 24u /* struct thread_state: struct hpd_calls_shadow_frame* */
#define HPD_CALLS_STATE_DEPTH_OFFSET 32u  /* struct thread_state: uint32_t frames in use */
struct hpd_calls_shadow_frame {
  uint64_t slot;     /* where the return address lives on the stack */
  uint64_t original; /* the return address the hook replaced */
  uint64_t start;    /* TSC at entry */
  uint32_t func;     /* HPD_CALLS_NO_FUNC: only the return address is kept (e.g. after fork) */
  uint32_t restored; /* the original return address was put back (an exception unwinds through it) */
};

static inline uint64_t hpd_calls_threads_offset(void) {
  return (sizeof(struct hpd_calls_header) + 63u) & ~63ull;
}
static inline uint64_t hpd_calls_edges_offset(uint32_t slot) {
  return hpd_calls_threads_offset() + (uint64_t)HPD_CALLS_MAX_THREADS * sizeof(struct hpd_calls_thread) +
         (uint64_t)slot * HPD_CALLS_EDGES_PER_THREAD * sizeof(struct hpd_calls_edge);
}
static inline uint64_t hpd_calls_funcs_offset(uint32_t slot) {
  return hpd_calls_edges_offset(HPD_CALLS_MAX_THREADS) +
         (uint64_t)slot * HPD_CALLS_FUNCS_PER_THREAD * sizeof(struct hpd_calls_func);
}
static inline uint64_t hpd_calls_hist_offset(uint32_t block) {
  return hpd_calls_funcs_offset(HPD_CALLS_MAX_THREADS) + (uint64_t)block * HPD_CALLS_HIST_BUCKETS * 8u;
}
static inline uint64_t hpd_calls_file_size(void) {
  return hpd_calls_hist_offset(HPD_CALLS_HIST_BLOCKS);
}

#endif
