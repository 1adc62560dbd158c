/* libhpdcalls.so, the allocation side (`hpctl record --alloc -- CMD`): interposes malloc, calloc,
 * realloc, free, posix_memalign, aligned_alloc, memalign, valloc and pvalloc (C++ new and delete reach
 * malloc and free through libstdc++) and samples them by bytes, as tcmalloc does: the bytes between
 * two samples are drawn from an exponential distribution (a Poisson process over the bytes allocated),
 * so an allocation of `size` bytes is sampled with probability 1 - exp(-size/mean). The path that does
 * not sample subtracts from a thread-local countdown and returns: no lock, no system call. A sampled
 * allocation is unwound (_Unwind_Backtrace: the CFI unwinder, so stacks are whole without frame
 * pointers) and appended to the log hpd reads (alloc_abi.h); its address goes into a lock-free set,
 * so that its free is logged too and what is still live at the end is known per stack. Without
 * HPD_ALLOC_LOG in the environment everything passes straight through.
 *
 * Unlike runtime.c this file is not built with -mgeneral-regs-only: nothing here runs inside the
 * mcount hooks, and the exponential draw needs log(). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <unwind.h>

#include "alloc_unwind.h"
#include "hpd/calls/alloc_abi.h"

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

typedef void* (*malloc_fn)(size_t);
typedef void (*free_fn)(void*);
typedef void* (*calloc_fn)(size_t, size_t);
typedef void* (*realloc_fn)(void*, size_t);
typedef int (*posix_memalign_fn)(void**, size_t, size_t);
typedef void* (*memalign_fn)(size_t, size_t);
typedef void* (*valloc_fn)(size_t);

static malloc_fn real_malloc;
static free_fn real_free;
static calloc_fn real_calloc;
static realloc_fn real_realloc;
static posix_memalign_fn real_posix_memalign;
static memalign_fn real_aligned_alloc;
static memalign_fn real_memalign;
static valloc_fn real_valloc;
static valloc_fn real_pvalloc;

/* ---- bootstrap: dlsym itself may call calloc/malloc before the real ones are known ---- */

#define BOOT_ARENA 65536u
static unsigned char g_boot[BOOT_ARENA] __attribute__((aligned(64)));
static size_t g_boot_used;
static int g_resolving;

static int in_boot_arena(const void* p) {
  return (const unsigned char*)p >= g_boot && (const unsigned char*)p < g_boot + BOOT_ARENA;
}

/* 16 bytes of header (the size) before each block, zeroed memory (calloc's promise). */
static void* boot_alloc(size_t n) {
  const size_t need = (n + 15u) / 16u * 16u + 16u;
  size_t at = __atomic_fetch_add(&g_boot_used, need, __ATOMIC_RELAXED);
  if (at + need > BOOT_ARENA) return NULL;
  memcpy(g_boot + at, &n, sizeof n);
  return g_boot + at + 16;
}

static size_t boot_size(const void* p) {
  size_t n;
  memcpy(&n, (const unsigned char*)p - 16, sizeof n);
  return n;
}

static void resolve(void) {
  if (real_malloc != NULL) return;
  g_resolving = 1;
  real_calloc = (calloc_fn)dlsym(RTLD_NEXT, "calloc");
  real_free = (free_fn)dlsym(RTLD_NEXT, "free");
  real_realloc = (realloc_fn)dlsym(RTLD_NEXT, "realloc");
  real_posix_memalign = (posix_memalign_fn)dlsym(RTLD_NEXT, "posix_memalign");
  real_aligned_alloc = (memalign_fn)dlsym(RTLD_NEXT, "aligned_alloc");
  real_memalign = (memalign_fn)dlsym(RTLD_NEXT, "memalign");
  real_valloc = (valloc_fn)dlsym(RTLD_NEXT, "valloc");
  real_pvalloc = (valloc_fn)dlsym(RTLD_NEXT, "pvalloc");
  malloc_fn m = (malloc_fn)dlsym(RTLD_NEXT, "malloc");
  g_resolving = 0;
  __atomic_store_n(&real_malloc, m, __ATOMIC_RELEASE);
}

/* ---- the log and the set of sampled addresses still live ---- */

static struct hpd_alloc_header* g_log;
static int g_on; /* 1: sampling into g_log */
static double g_mean = (double)HPD_ALLOC_DEFAULT_MEAN;
static int32_t g_pid;
static uintptr_t g_self_low, g_self_high; /* this library's text: its frames are not the program's */

/* Open addressing over addresses: 0 empty, 1 a removed entry. Lookups stop at an empty slot or after
 * LIVE_PROBES slots; inserts take the first empty or removed slot. */
#define LIVE_SLOTS (1u << 18)
#define LIVE_PROBES 64u
static uint64_t* g_live;
/* The set, the filter's bits, the filter's counts (below), the unwinder's rules. */
#define LIVE_MAP_SIZE \
  (LIVE_SLOTS * sizeof(uint64_t) + FILTER_BUCKETS / 8 + FILTER_BUCKETS + ALLOC_UNWIND_CACHE_BYTES)
/* In front of the set, for the frees: one bit per hash bucket (4 KiB: 64 cache lines and one page,
 * small enough to stay cached in a program that allocates a lot), set while the bucket holds a live
 * sampled address, so that almost every free sees a 0 there and never touches the 2 MiB set. Beside
 * it, touched only when a sampled address comes or goes, the count of live sampled addresses per
 * bucket. A count that reached FILTER_STUCK stays there (its bit stays set). The bit is cleared only
 * while the count holds FILTER_CLEARING, which an add waits out: an add's bit is set after its count
 * went up and before malloc returns, and no clear can come between. (Before, the frees read a 64 KiB
 * array of counts: a cache miss on many frees, 3 points of bench/alloc_bench.sh's malloc/free loop.) */
#define FILTER_BUCKETS (1u << 15)
#define FILTER_STUCK 0x7fu
#define FILTER_CLEARING 0x80u
static uint64_t* g_filter_bits; /* FILTER_BUCKETS / 64 words */
static uint8_t* g_filter_counts;

static inline uint32_t filter_index(uint64_t p) {
  return (uint32_t)(((p >> 4) * 0xff51afd7ed558ccdull) >> 49);
}

static inline int filter_maybe(uint64_t p) {
  const uint32_t i = filter_index(p);
  return (int)((__atomic_load_n(&g_filter_bits[i >> 6], __ATOMIC_ACQUIRE) >> (i & 63u)) & 1u);
}

static void filter_add(uint64_t p) {
  const uint32_t i = filter_index(p);
  uint8_t* c = &g_filter_counts[i];
  uint8_t v = __atomic_load_n(c, __ATOMIC_ACQUIRE);
  for (;;) {
    if (v == FILTER_CLEARING) { /* another thread is clearing the bit of its last address: wait */
      sched_yield();
      v = __atomic_load_n(c, __ATOMIC_ACQUIRE);
      continue;
    }
    if (v == FILTER_STUCK ||
        __atomic_compare_exchange_n(c, &v, (uint8_t)(v + 1), 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      break;
  }
  __atomic_fetch_or(&g_filter_bits[i >> 6], 1ull << (i & 63u), __ATOMIC_SEQ_CST);
}

static void filter_drop(uint64_t p) {
  const uint32_t i = filter_index(p);
  uint8_t* c = &g_filter_counts[i];
  uint8_t v = __atomic_load_n(c, __ATOMIC_ACQUIRE);
  for (;;) {
    if (v == FILTER_STUCK || v == 0 || v == FILTER_CLEARING) return;
    if (v == 1) {
      if (__atomic_compare_exchange_n(c, &v, FILTER_CLEARING, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        __atomic_fetch_and(&g_filter_bits[i >> 6], ~(1ull << (i & 63u)), __ATOMIC_SEQ_CST);
        __atomic_store_n(c, 0, __ATOMIC_RELEASE);
        return;
      }
    } else if (__atomic_compare_exchange_n(c, &v, (uint8_t)(v - 1), 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      return;
    }
  }
}

static inline uint32_t live_hash(uint64_t p) {
  return (uint32_t)(((p >> 4) * 0x9e3779b97f4a7c15ull) >> 46) & (LIVE_SLOTS - 1u);
}

static int live_insert(uint64_t p) {
  uint32_t i = live_hash(p);
  /* Counted before the address is in the set: a free of it (after malloc returned) sees the count. */
  filter_add(p);
  for (uint32_t n = 0; n < LIVE_PROBES; ++n, i = (i + 1) & (LIVE_SLOTS - 1u)) {
    uint64_t v = __atomic_load_n(&g_live[i], __ATOMIC_RELAXED);
    if (v == p) { /* freed unseen (e.g. inside libc) and handed out again: counted once */
      filter_drop(p);
      return 1;
    }
    if ((v == 0 || v == 1) &&
        __atomic_compare_exchange_n(&g_live[i], &v, p, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
      return 1;
  }
  filter_drop(p);
  return 0;
}

static inline int live_remove(uint64_t p) {
  if (LIKELY(!filter_maybe(p))) return 0;
  uint32_t i = live_hash(p);
  for (uint32_t n = 0; n < LIVE_PROBES; ++n, i = (i + 1) & (LIVE_SLOTS - 1u)) {
    uint64_t v = __atomic_load_n(&g_live[i], __ATOMIC_RELAXED);
    if (v == 0) return 0;
    if (v == p && __atomic_compare_exchange_n(&g_live[i], &v, 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      filter_drop(p);
      return 1;
    }
  }
  return 0;
}

static struct hpd_alloc_record* reserve(uint32_t frames) {
  const uint64_t size = hpd_alloc_record_size(frames);
  const uint64_t at = __atomic_fetch_add(&g_log->cursor, size, __ATOMIC_RELAXED);
  if (at + size > HPD_ALLOC_FILE_SIZE - sizeof(struct hpd_alloc_header)) {
    __atomic_fetch_add(&g_log->dropped, 1, __ATOMIC_RELAXED);
    return NULL;
  }
  return (struct hpd_alloc_record*)((char*)g_log + sizeof(struct hpd_alloc_header) + at);
}

/* The clock the recording times its samples with (the vDSO's: no system call). */
static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- per thread: the countdown, the generator, a guard against reentry, and the id ---- */

static __thread int64_t t_countdown __attribute__((tls_model("initial-exec")));
static __thread uint64_t t_rng __attribute__((tls_model("initial-exec")));
static __thread int t_busy __attribute__((tls_model("initial-exec")));
static __thread int32_t t_tid __attribute__((tls_model("initial-exec"))); /* 0: not asked yet */

/* The thread's id, asked of the kernel once per thread (reset in a forked child). */
static int32_t thread_id(void) {
  if (UNLIKELY(t_tid == 0)) t_tid = (int32_t)syscall(SYS_gettid);
  return t_tid;
}

static uint64_t next_random(void) {
  if (UNLIKELY(t_rng == 0)) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t_rng = ((uint64_t)(uint32_t)thread_id() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
            (uint64_t)(uintptr_t)&t_rng;
    if (t_rng == 0) t_rng = 0x2545f4914f6cdd1dull;
  }
  /* xorshift64* */
  t_rng ^= t_rng >> 12;
  t_rng ^= t_rng << 25;
  t_rng ^= t_rng >> 27;
  return t_rng * 0x2545f4914f6cdd1dull;
}

/* Bytes until the next sample: exponential with mean g_mean, at least 1. */
static int64_t draw_distance(void) {
  const double u = (double)((next_random() >> 11) + 1) * (1.0 / 9007199254740992.0); /* (0, 1] */
  const double d = -log(u) * g_mean;
  if (d < 1.0) return 1;
  if (d > 4.0e18) return INT64_C(4000000000000000000);
  return (int64_t)d;
}

static void log_free(void* p) {
  struct hpd_alloc_record* r = reserve(0);
  if (r == NULL) return;
  r->frames = 0;
  r->pid = g_pid;
  r->tid = thread_id();
  r->address = (uint64_t)(uintptr_t)p;
  r->size = 0;
  r->time_ns = now_ns();
  __atomic_store_n(&r->kind, HPD_ALLOC_RECORD_FREE, __ATOMIC_RELEASE);
}

struct unwind_state {
  uint64_t* frames;
  uint32_t n;
};

static _Unwind_Reason_Code collect_frame(struct _Unwind_Context* context, void* arg) {
  struct unwind_state* s = (struct unwind_state*)arg;
  const uintptr_t ip = _Unwind_GetIP(context);
  if (ip == 0) return _URC_END_OF_STACK;
  if (s->n == 0 && ip >= g_self_low && ip < g_self_high) return _URC_NO_REASON; /* the runtime's frames */
  if (s->n == HPD_ALLOC_MAX_FRAMES) return _URC_END_OF_STACK;
  s->frames[s->n++] = ip;
  return _URC_NO_REASON;
}

/* HPD_ALLOC_UNWIND_CHECK=FILE (tests): every sample is unwound by both alloc_unwind and libgcc, the
 * record keeps libgcc's frames, and at the exit a line of counts is appended to FILE (with the first
 * few samples whose frames differ). */
#define UNWIND_CHECK_ENV "HPD_ALLOC_UNWIND_CHECK"
static int g_check_fd = -1;
static uint64_t g_checked, g_fast, g_mismatched;

static void write_frames(char* line, size_t cap, size_t* at, const char* what, const uint64_t* f, int n) {
  *at += (size_t)snprintf(line + *at, cap - *at, " %s %d:", what, n);
  for (int i = 0; i < n && *at < cap; ++i)
    *at += (size_t)snprintf(line + *at, cap - *at, " %lx", (unsigned long)f[i]);
}

static __attribute__((noinline)) void check_unwind(const uint64_t* fast, int n_fast, const uint64_t* slow,
                                                   uint32_t n_slow) {
  __atomic_fetch_add(&g_checked, 1, __ATOMIC_RELAXED);
  if (n_fast < 0) return;
  __atomic_fetch_add(&g_fast, 1, __ATOMIC_RELAXED);
  if ((uint32_t)n_fast == n_slow && memcmp(fast, slow, 8ull * n_slow) == 0) return;
  if (__atomic_fetch_add(&g_mismatched, 1, __ATOMIC_RELAXED) >= 5) return;
  char line[8192];
  size_t at = (size_t)snprintf(line, sizeof line, "mismatch pid %d:", (int)getpid());
  write_frames(line, sizeof line - 1, &at, "fast", fast, n_fast);
  write_frames(line, sizeof line - 1, &at, "libgcc", slow, (int)n_slow);
  if (at > sizeof line - 2) at = sizeof line - 2;
  line[at++] = '\n';
  ssize_t r = write(g_check_fd, line, at);
  (void)r;
}

__attribute__((destructor)) static void write_unwind_check(void) {
  if (g_check_fd < 0) return;
  char line[160];
  const int n =
      snprintf(line, sizeof line, "unwind check pid %d: samples %lu fast %lu mismatched %lu\n", (int)getpid(),
               (unsigned long)g_checked, (unsigned long)g_fast, (unsigned long)g_mismatched);
  ssize_t r = write(g_check_fd, line, (size_t)n);
  (void)r;
}

/* Inlined into countdown_expired, whose registers the walk starts from (the runtime's own frames at
 * the top are left out, as libgcc's are in collect_frame). */
static inline __attribute__((always_inline)) void record_alloc(void* p, size_t size) {
  uint64_t frames[HPD_ALLOC_MAX_FRAMES];
  uint64_t pc, sp, fp;
  ALLOC_UNWIND_HERE(pc, sp, fp);
  int n = alloc_unwind(pc, sp, fp, frames, HPD_ALLOC_MAX_FRAMES);
  if (UNLIKELY(n < 0 || g_check_fd >= 0)) {
    /* A frame the cached rules cannot express (or a check): libgcc's walk, and its frames. */
    uint64_t slow[HPD_ALLOC_MAX_FRAMES];
    struct unwind_state s = {slow, 0};
    _Unwind_Backtrace(collect_frame, &s);
    if (g_check_fd >= 0) check_unwind(frames, n, slow, s.n);
    if (n < 0) __atomic_fetch_add(&g_log->slow_unwinds, 1, __ATOMIC_RELAXED);
    memcpy(frames, slow, 8ull * s.n);
    n = (int)s.n;
  }
  uint32_t kind = HPD_ALLOC_RECORD_ALLOC;
  if (!live_insert((uint64_t)(uintptr_t)p)) {
    __atomic_fetch_add(&g_log->untracked, 1, __ATOMIC_RELAXED);
    kind = HPD_ALLOC_RECORD_ALLOC_UNTRACKED;
  }
  struct hpd_alloc_record* r = reserve((uint32_t)n);
  if (r == NULL) return;
  r->frames = (uint32_t)n;
  r->pid = g_pid;
  r->tid = thread_id();
  r->address = (uint64_t)(uintptr_t)p;
  r->size = size;
  r->time_ns = now_ns();
  memcpy(r + 1, frames, 8ull * (uint32_t)n);
  __atomic_store_n(&r->kind, kind, __ATOMIC_RELEASE);
}

/* The countdown reached zero or below: `p` (of `size` bytes) is sampled when the runtime logs. */
static __attribute__((noinline)) void countdown_expired(void* p, size_t size) {
  if (!g_on) {
    /* Before the constructor (the loader's own allocations) the countdown stays at 0; without a log it
     * never expires again. */
    if (g_pid == -1) t_countdown = INT64_MAX;
    return;
  }
  if (t_busy) return; /* the runtime's own allocations (the unwinder's), or a signal handler's */
  if (t_rng == 0) {
    /* The thread's first allocation: its distance is drawn now, this allocation counted against it. */
    t_countdown = draw_distance() - (int64_t)size;
    if (t_countdown > 0) return;
  }
  t_countdown = draw_distance();
  if (p == NULL || size == 0) return;
  t_busy = 1;
  record_alloc(p, size);
  t_busy = 0;
}

static inline void account(void* p, size_t size) {
  if (LIKELY((t_countdown -= (int64_t)(size & (SIZE_MAX >> 1))) > 0)) return;
  countdown_expired(p, size);
}

static inline void forget(void* p) {
  if (g_live != NULL && live_remove((uint64_t)(uintptr_t)p)) log_free(p);
}

/* ---- the interposed functions ---- */

void* malloc(size_t size) {
  if (UNLIKELY(__atomic_load_n(&real_malloc, __ATOMIC_ACQUIRE) == NULL)) {
    if (g_resolving) return boot_alloc(size);
    resolve();
  }
  /* Counted before the call, so that the path that does not sample jumps to the real malloc (no
   * frame of its own); the sampled one needs the block, after. */
  if (LIKELY((t_countdown -= (int64_t)(size & (SIZE_MAX >> 1))) > 0)) return real_malloc(size);
  void* p = real_malloc(size);
  countdown_expired(p, size);
  return p;
}

void* calloc(size_t n, size_t size) {
  if (UNLIKELY(__atomic_load_n(&real_malloc, __ATOMIC_ACQUIRE) == NULL)) {
    if (g_resolving) {
      if (size != 0 && n > SIZE_MAX / size) return NULL;
      return boot_alloc(n * size);
    }
    resolve();
  }
  void* p = real_calloc(n, size);
  if (size == 0 || n <= SIZE_MAX / size) account(p, n * size);
  return p;
}

void free(void* p) {
  if (p == NULL || UNLIKELY(in_boot_arena(p))) return;
  forget(p);
  if (UNLIKELY(real_free == NULL)) resolve();
  real_free(p);
}

void* realloc(void* p, size_t size) {
  if (UNLIKELY(__atomic_load_n(&real_malloc, __ATOMIC_ACQUIRE) == NULL)) {
    if (g_resolving) return NULL;
    resolve();
  }
  if (UNLIKELY(p != NULL && in_boot_arena(p))) {
    void* q = malloc(size);
    if (q != NULL) {
      const size_t old = boot_size(p);
      memcpy(q, p, old < size ? old : size);
    }
    return q;
  }
  /* A realloc is a free of the old block and an allocation of the new one (the block may move). The
   * free is logged before the old address can be handed out again. */
  if (p != NULL) forget(p);
  void* q = real_realloc(p, size);
  if (q != NULL) account(q, size);
  return q;
}

int posix_memalign(void** out, size_t alignment, size_t size) {
  if (UNLIKELY(__atomic_load_n(&real_malloc, __ATOMIC_ACQUIRE) == NULL)) resolve();
  const int r = real_posix_memalign(out, alignment, size);
  if (r == 0) account(*out, size);
  return r;
}

void* aligned_alloc(size_t alignment, size_t size) {
  if (UNLIKELY(__atomic_load_n(&real_malloc, __ATOMIC_ACQUIRE) == NULL)) resolve();
  void* p = real_aligned_alloc(alignment, size);
  account(p, size);
  return p;
}

void* memalign(size_t alignment, size_t size) {
  if (UNLIKELY(__atomic_load_n(&real_malloc, __ATOMIC_ACQUIRE) == NULL)) resolve();
  void* p = real_memalign(alignment, size);
  account(p, size);
  return p;
}

void* valloc(size_t size) {
  if (UNLIKELY(__atomic_load_n(&real_malloc, __ATOMIC_ACQUIRE) == NULL)) resolve();
  void* p = real_valloc(size);
  account(p, size);
  return p;
}

void* pvalloc(size_t size) {
  if (UNLIKELY(__atomic_load_n(&real_malloc, __ATOMIC_ACQUIRE) == NULL)) resolve();
  void* p = real_pvalloc(size);
  account(p, size);
  return p;
}

/* ---- C++'s operator new and delete ----
 * libstdc++'s operator new calls malloc, and its delete free, which are interposed above; an allocator
 * that replaces malloc (jemalloc, tcmalloc, mimalloc) defines an operator new and delete of its own,
 * which do not: without these a C++ program linked with one had its `new` unseen. All twenty are
 * interposed here and go on to the next definition (dlsym RTLD_NEXT; else libstdc++'s, for a library
 * dlopen'ed with RTLD_LOCAL). Where the next operator new is in the object the next malloc is in (the
 * allocator's own), a call is sampled here (its stack starts at its caller), the allocator's own calls
 * of the functions interposed above inside it (jemalloc's aligned operator new calls aligned_alloc)
 * are not counted again, and a delete forgets its block; else the call goes straight on and malloc or
 * free sees it, but when the next ones are libstdc++'s and the malloc, aligned_alloc and free they
 * would call are these: then they call those here directly (std_new), one interposed call in place of
 * two (or three: libstdc++'s sized delete calls its delete, which is interposed too), their stacks
 * starting at their caller as the allocator's own do. Every argument is an integer or a pointer, so each goes
 * on with three (the ABI ignores those a function does not take). */
typedef void* (*cxx_new_fn)(size_t, uintptr_t, uintptr_t);
typedef void (*cxx_delete_fn)(void*, uintptr_t, uintptr_t);

#define CXX_NEW_COUNT 8
#define CXX_DELETE_COUNT 12
static const char* const g_cxx_new_names[CXX_NEW_COUNT] = {"_Znwm",
                                                           "_Znam",
                                                           "_ZnwmRKSt9nothrow_t",
                                                           "_ZnamRKSt9nothrow_t",
                                                           "_ZnwmSt11align_val_t",
                                                           "_ZnamSt11align_val_t",
                                                           "_ZnwmSt11align_val_tRKSt9nothrow_t",
                                                           "_ZnamSt11align_val_tRKSt9nothrow_t"};
static const char* const g_cxx_delete_names[CXX_DELETE_COUNT] = {"_ZdlPv",
                                                                 "_ZdaPv",
                                                                 "_ZdlPvm",
                                                                 "_ZdaPvm",
                                                                 "_ZdlPvRKSt9nothrow_t",
                                                                 "_ZdaPvRKSt9nothrow_t",
                                                                 "_ZdlPvSt11align_val_t",
                                                                 "_ZdaPvSt11align_val_t",
                                                                 "_ZdlPvmSt11align_val_t",
                                                                 "_ZdaPvmSt11align_val_t",
                                                                 "_ZdlPvSt11align_val_tRKSt9nothrow_t",
                                                                 "_ZdaPvSt11align_val_tRKSt9nothrow_t"};
static cxx_new_fn g_cxx_new[CXX_NEW_COUNT];
static cxx_delete_fn g_cxx_delete[CXX_DELETE_COUNT];
static int g_cxx_own; /* 1: the next operator new is the allocator's own */
/* 1: the next operator new and delete are libstdc++'s, and malloc, aligned_alloc and free this file's */
static int g_cxx_std;

static void* next_definition(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f != NULL) return f;
  void* libstdcxx = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
  if (libstdcxx == NULL) return NULL;
  f = dlsym(libstdcxx, name);
  dlclose(libstdcxx);
  return f;
}

static int in_libstdcxx(void* f) {
  Dl_info info;
  if (f == NULL || dladdr(f, &info) == 0 || info.dli_fname == NULL) return 0;
  const char* base = strrchr(info.dli_fname, '/');
  return strncmp(base != NULL ? base + 1 : info.dli_fname, "libstdc++.so", 12) == 0;
}

/* Whether `f` is defined in this library. */
static int is_mine(void* f) {
  Dl_info a, b;
  return f != NULL && dladdr(f, &a) != 0 && dladdr((void*)&in_libstdcxx, &b) != 0 &&
         a.dli_fbase == b.dli_fbase;
}

/* Whether the operator new is the allocator's own is known before any of them is published. */
static void resolve_cxx(void) {
  if (__atomic_load_n(&real_malloc, __ATOMIC_ACQUIRE) == NULL) resolve();
  cxx_new_fn news[CXX_NEW_COUNT];
  cxx_delete_fn deletes[CXX_DELETE_COUNT];
  for (int i = 0; i < CXX_NEW_COUNT; ++i) news[i] = (cxx_new_fn)next_definition(g_cxx_new_names[i]);
  for (int i = 0; i < CXX_DELETE_COUNT; ++i)
    deletes[i] = (cxx_delete_fn)next_definition(g_cxx_delete_names[i]);
  Dl_info a, b;
  const int own = news[0] != NULL && dladdr((void*)news[0], &a) != 0 && dladdr((void*)real_malloc, &b) != 0 &&
                  a.dli_fbase == b.dli_fbase;
  __atomic_store_n(&g_cxx_own, own, __ATOMIC_RELEASE);
  __atomic_store_n(&g_cxx_std,
                   !own && in_libstdcxx((void*)news[0]) && in_libstdcxx((void*)deletes[0]) &&
                       is_mine(dlsym(RTLD_DEFAULT, "malloc")) && is_mine(dlsym(RTLD_DEFAULT, "free")) &&
                       is_mine(dlsym(RTLD_DEFAULT, "aligned_alloc")),
                   __ATOMIC_RELEASE);
  for (int i = 0; i < CXX_NEW_COUNT; ++i) __atomic_store_n(&g_cxx_new[i], news[i], __ATOMIC_RELEASE);
  for (int i = 0; i < CXX_DELETE_COUNT; ++i) __atomic_store_n(&g_cxx_delete[i], deletes[i], __ATOMIC_RELEASE);
}

static void restore_countdown(const int64_t* saved) {
  t_countdown = *saved;
}

/* What libstdc++'s operator new `i` asks of malloc or aligned_alloc (at least a byte; aligned, a
 * multiple of the alignment, which is a power of two), asked here; NULL where libstdc++'s must run: a
 * failure (its loop of new handlers, bad_alloc or the nothrow NULL), or an alignment it refuses. */
static inline void* std_new(int i, size_t size, uintptr_t alignment) {
  size_t n = size != 0 ? size : 1;
  void* p;
  if (i < 4) {
    p = real_malloc(n);
  } else {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || n > SIZE_MAX - alignment) return NULL;
    n = (n + alignment - 1) & ~(size_t)(alignment - 1);
    p = real_aligned_alloc(alignment, n);
  }
  if (p != NULL) account(p, n);
  return p;
}

static inline void* cxx_new(int i, size_t size, uintptr_t b, uintptr_t c) {
  cxx_new_fn real = __atomic_load_n(&g_cxx_new[i], __ATOMIC_ACQUIRE);
  if (UNLIKELY(real == NULL)) {
    resolve_cxx();
    real = g_cxx_new[i];
    if (real == NULL) { /* no operator new after this one: malloc's (no exception on failure) */
      if (i < 4) return malloc(size);
      void* p = NULL;
      return posix_memalign(&p, b, size) == 0 ? p : NULL;
    }
  }
  if (!g_cxx_own) {
    if (g_cxx_std) {
      void* p = std_new(i, size, b);
      if (LIKELY(p != NULL)) return p;
    }
    return real(size, b, c);
  }
  void* p;
  {
    /* The allocator's own calls of malloc & co. inside it count nothing; restored however it leaves
     * (an exception: bad_alloc). */
    const int64_t saved __attribute__((cleanup(restore_countdown))) = t_countdown;
    t_countdown = INT64_MAX;
    p = real(size, b, c);
  }
  account(p, size);
  return p;
}

static inline void cxx_delete(int i, void* p, uintptr_t b, uintptr_t c) {
  cxx_delete_fn real = __atomic_load_n(&g_cxx_delete[i], __ATOMIC_ACQUIRE);
  if (UNLIKELY(real == NULL)) {
    resolve_cxx();
    real = g_cxx_delete[i];
    if (real == NULL) {
      free(p);
      return;
    }
  }
  if (g_cxx_std) { /* libstdc++'s deletes all free */
    free(p);
    return;
  }
  if (g_cxx_own && p != NULL) forget(p);
  real(p, b, c);
}

#define HPD_CXX_NEW(name, i)                          \
  void* name(size_t size, uintptr_t b, uintptr_t c) { \
    return cxx_new(i, size, b, c);                    \
  }
#define HPD_CXX_DELETE(name, i)                  \
  void name(void* p, uintptr_t b, uintptr_t c) { \
    cxx_delete(i, p, b, c);                      \
  }
HPD_CXX_NEW(_Znwm, 0)
HPD_CXX_NEW(_Znam, 1)
HPD_CXX_NEW(_ZnwmRKSt9nothrow_t, 2)
HPD_CXX_NEW(_ZnamRKSt9nothrow_t, 3)
HPD_CXX_NEW(_ZnwmSt11align_val_t, 4)
HPD_CXX_NEW(_ZnamSt11align_val_t, 5)
HPD_CXX_NEW(_ZnwmSt11align_val_tRKSt9nothrow_t, 6)
HPD_CXX_NEW(_ZnamSt11align_val_tRKSt9nothrow_t, 7)
HPD_CXX_DELETE(_ZdlPv, 0)
HPD_CXX_DELETE(_ZdaPv, 1)
HPD_CXX_DELETE(_ZdlPvm, 2)
HPD_CXX_DELETE(_ZdaPvm, 3)
HPD_CXX_DELETE(_ZdlPvRKSt9nothrow_t, 4)
HPD_CXX_DELETE(_ZdaPvRKSt9nothrow_t, 5)
HPD_CXX_DELETE(_ZdlPvSt11align_val_t, 6)
HPD_CXX_DELETE(_ZdaPvSt11align_val_t, 7)
HPD_CXX_DELETE(_ZdlPvmSt11align_val_t, 8)
HPD_CXX_DELETE(_ZdaPvmSt11align_val_t, 9)
HPD_CXX_DELETE(_ZdlPvSt11align_val_tRKSt9nothrow_t, 10)
HPD_CXX_DELETE(_ZdaPvSt11align_val_tRKSt9nothrow_t, 11)

/* ---- start-up ---- */

static int find_self(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  if ((uintptr_t)info->dlpi_addr != (uintptr_t)data) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    g_self_low = info->dlpi_addr + ph->p_vaddr;
    g_self_high = g_self_low + ph->p_memsz;
  }
  return 1;
}

static void after_fork_in_child(void) {
  if (!g_on) return;
  g_pid = (int32_t)getpid();
  t_tid = 0;
  g_checked = g_fast = g_mismatched = 0;
  __atomic_fetch_add(&g_log->processes, 1, __ATOMIC_RELAXED);
}

static void write_err(const char* s) {
  ssize_t r = write(2, s, strlen(s));
  (void)r;
}

__attribute__((constructor(101))) static void hpd_alloc_constructor(void) {
  if (real_malloc == NULL) resolve();
  const char* path = getenv(HPD_ALLOC_ENV_LOG);
  if (path == NULL || path[0] == '\0') {
    g_pid = -1; /* no log: countdowns that expire are set never to expire again */
    return;
  }
  g_pid = (int32_t)getpid();
  const int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    write_err("hpd runtime: cannot open the allocation log named by " HPD_ALLOC_ENV_LOG
              "; allocations are not sampled\n");
    g_pid = -1;
    return;
  }
  struct stat st;
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && (uint64_t)st.st_size == HPD_ALLOC_FILE_SIZE)
    p = mmap(NULL, HPD_ALLOC_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  void* live =
      mmap(NULL, LIVE_MAP_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  struct hpd_alloc_header* h = (struct hpd_alloc_header*)p;
  if (p == MAP_FAILED || live == MAP_FAILED || h->magic != HPD_ALLOC_MAGIC ||
      h->version != HPD_ALLOC_VERSION || h->mean_bytes == 0) {
    write_err("hpd runtime: the allocation log is not of this hpd's layout; allocations are not sampled\n");
    if (p != MAP_FAILED) munmap(p, HPD_ALLOC_FILE_SIZE);
    if (live != MAP_FAILED) munmap(live, LIVE_MAP_SIZE);
    g_pid = -1;
    return;
  }
  Dl_info self;
  if (dladdr((void*)&hpd_alloc_constructor, &self) != 0) dl_iterate_phdr(find_self, self.dli_fbase);
  g_mean = (double)h->mean_bytes;
  g_filter_bits = (uint64_t*)((char*)live + LIVE_SLOTS * sizeof(uint64_t));
  g_filter_counts = (uint8_t*)(g_filter_bits + FILTER_BUCKETS / 64);
  g_live = (uint64_t*)live;
  alloc_unwind_init(g_filter_counts + FILTER_BUCKETS, g_self_low, g_self_high);
  const char* check = getenv(UNWIND_CHECK_ENV);
  if (check != NULL && check[0] != '\0')
    g_check_fd = open(check, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  g_log = h;
  pthread_atfork(NULL, NULL, after_fork_in_child);
  __atomic_fetch_add(&h->processes, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&g_on, 1, __ATOMIC_RELEASE);
}
