/* Layout shared by calls.bpf.c and the daemon's call counter: the edge key, probe modes, counters. */
#ifndef HPD_BPF_CALLS_EVENT_H
#define HPD_BPF_CALLS_EVENT_H

#ifndef __bpf__
#include <linux/types.h>
#endif

/* How a probe point reads caller and callee; carried as the attach cookie of each site. */
enum hpd_calls_mode {
  /* At a function's first instruction (a nop5 __fentry__ site, a patchable entry): the callee is
   * the probed address, the caller the return address at [sp]. */
  HPD_CALLS_AT_ENTRY = 0,
  /* Inside the function after its frame is set up (a nop'd mcount site): the callee is the probed
   * address, the caller the return address at [rbp + 8]. */
  HPD_CALLS_AFTER_PROLOGUE = 1,
  /* The `call __mcount_internal` inside glibc's _mcount or __fentry__: rdi = frompc (in the
   * caller), rsi = selfpc (in the callee). */
  HPD_CALLS_MCOUNT_INTERNAL = 2,
};

struct hpd_call_edge_key {
  __s32 pid; /* tgid */
  __u32 pad;
  __u64 caller; /* a return address in the caller */
  __u64 callee; /* an address in the callee */
};

/* The mapping an edge's address lay in, recorded when the edge is first seen: a process that exits
 * before user space reads its /proc/PID/maps can still be symbolized. Keyed by (tgid, vm_start). */
struct hpd_call_vma_key {
  __s32 pid;
  __u32 pad;
  __u64 start;
};
struct hpd_call_vma {
  __u64 end;
  __u64 pgoff;      /* in pages */
  __u64 ino;        /* 0 = anonymous */
  __u32 dev_major;  /* of the file's super block */
  __u32 dev_minor;
};

/* The latency of the calls of one function of one process (the session program, at the function's
 * entry and its return): per CPU, summed by user space. */
struct hpd_call_fn_key {
  __s32 pid; /* tgid */
  __u32 pad;
  __u64 callee; /* the probed address: the function's entry (after endbr64) */
};
struct hpd_call_latency {
  __u64 calls;    /* calls that returned through the return probe */
  __u64 sum_ns;   /* all of them, recursion included */
  __u64 outer_ns; /* outermost activations only (per thread): recursion counted once */
  __u64 max_ns;
};
/* One bucket of a function's latency histogram (in ns, the layout of hpd/calls/preload_abi.h). */
struct hpd_call_hist_key {
  __s32 pid;
  __u32 bucket;
  __u64 callee;
};
/* The depth of a function's activations on one thread, for outer_ns. */
struct hpd_call_depth_key {
  __u32 tid;
  __u32 pad;
  __u64 callee;
};

/* A site's attach cookie: the mode in bits 0-7, the kind of instruction probed (its hit counter,
 * hpd::calls::SiteKind: 0 nop5, 1 nop1, 2 call) in bits 8-15. */
#define HPD_CALLS_COOKIE(mode, kind) ((__u64)(mode) | ((__u64)(kind) << 8))

enum hpd_calls_counter {
  HPD_CALLS_HITS_NOP5 = 0,     /* probe hits of target processes, by kind of site ... */
  HPD_CALLS_HITS_NOP1 = 1,
  HPD_CALLS_HITS_CALL = 2,
  HPD_CALLS_OTHER_HITS = 3,    /* probe hits of other processes running the same files */
  HPD_CALLS_MAP_FULL = 4,      /* calls not counted: the edge map was full */
  HPD_CALLS_READ_FAILED = 5,   /* calls not counted: the caller could not be read from the stack */
  /* Hits of sites probed in session mode (entry and return, timed), by kind of site (nop5, nop1);
   * counted here instead of in HPD_CALLS_HITS_NOP5/NOP1 (a timed hit costs more). */
  HPD_CALLS_HITS_NOP5_TIMED = 6,
  HPD_CALLS_HITS_NOP1_TIMED = 7,
  HPD_CALLS_NOT_TIMED = 8,     /* timed sites' calls whose latency was lost: a map was full */
  HPD_CALLS_COUNTER_COUNT = 9,
};

#endif
