// hpd's allocation sampling of a running process (`hpctl record --alloc --pid PID`): one program
// attached in session mode (uprobe_multi links with BPF_TRACE_UPROBE_SESSION, Linux 6.13+) to the
// allocator's entry points of the target, each site's attach cookie naming its function
// (enum hpd_alloc_fn). At entry it decides, by bytes, whether the call is sampled; only a sampled
// call asks the kernel to run it again at the return, where the returned address and the user stack
// are written to the ring and the address kept in the live map; free looks its pointer up there.
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "alloc_event.h"
#include "client_creds.bpf.h"

char LICENSE[] SEC("license") = "GPL";

extern bool bpf_session_is_return(void) __ksym;
extern __u64* bpf_session_cookie(void) __ksym;

const volatile __s32 target_tgid = 0;
const volatile __u64 mean_bytes = 512 * 1024;
// For a client who may trace only processes running with their own credentials (a user's session
// through hpd; hpd_alloc_exec is attached only then): the ids the target must keep across an exec.
const volatile __u32 client_uid = 0;
const volatile __u32 client_gid = 0;

// Set by hpd_alloc_exec when the target executed a program with other credentials (a set-user-ID
// one): from then on the probes look at nothing, and user space takes them out of the program.
__u32 left_at_exec = 0;

// Per thread: the bytes left until the next sample, posix_memalign's out-pointer of a sampled call
// until it returns, and while realloc runs, its pointer and what its entry did with it
// (kInRealloc...): the allocator's own calls of malloc or free inside realloc (glibc's realloc(p, 0)
// calls free) are realloc's, not the program's, and are not looked at.
struct alloc_thread {
  __s64 remaining;
  __u64 memptr;
  __u64 realloc_ptr;
  __u32 started;
  __u32 in_realloc;
  __u32 in_wrapper;  // a function with HPD_ALLOC_FN_WRAPS runs on this thread
  __u32 pad;
};

#define kInRealloc 1u        // realloc runs on this thread
#define kReallocUnlisted 2u  // its pointer was a sampled block, taken out of the live map
#define kReallocFreeSaid 4u  // and a record of its free is in the ring

// The session cookie: the size asked for, and whether the call was sampled.
#define kCookieSampled (1ull << 63)

struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct alloc_thread);
} alloc_threads SEC(".maps");

// Sampled blocks not freed yet, by (tgid, address). Bounded: a sample it has no room for is untracked.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __uint(max_entries, 1 << 18);
  __type(key, struct hpd_alloc_live_key);
  __type(value, __u64);
} alloc_live SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 16 << 20);
} alloc_ring SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, HPD_ALLOC_COUNTER_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} alloc_counters SEC(".maps");

static __always_inline void count(__u32 which) {
  __u64* v = bpf_map_lookup_elem(&alloc_counters, &which);
  if (v) *v += 1;
}

static __always_inline __s64 next_distance(void) {
  return (__s64)hpd_alloc_distance(mean_bytes, bpf_get_prandom_u32());
}

// A record of kind FREE or REALLOC_FAILED; whether it is in the ring.
static __always_inline int say_free(__u32 kind, __u32 flags, __u64 ptr, __s32 tgid, __s32 tid) {
  struct hpd_alloc_bpf_free* rec = bpf_ringbuf_reserve(&alloc_ring, sizeof *rec, 0);
  if (!rec) {
    count(HPD_ALLOC_RING_FULL);
    return 0;
  }
  rec->kind = kind;
  rec->flags = flags;
  rec->pid = tgid;
  rec->tid = tid;
  rec->address = ptr;
  rec->time_ns = bpf_ktime_get_ns();
  bpf_ringbuf_submit(rec, 0);
  return 1;
}

static __always_inline void on_free(__u64 ptr, __s32 tgid, __s32 tid) {
  count(HPD_ALLOC_FREES);
  if (ptr == 0) {
    count(HPD_ALLOC_FREE_NULL);
    return;
  }
  struct hpd_alloc_live_key key = {.pid = tgid, .address = ptr};
  if (bpf_map_delete_elem(&alloc_live, &key) != 0) {
    count(HPD_ALLOC_FREE_UNSAMPLED);
    return;
  }
  say_free(HPD_ALLOC_BPF_FREE, 0, ptr, tgid, tid);
}

// realloc's return: its pointer was freed unless it failed (NULL for a size that is not 0; glibc's
// realloc(p, 0) frees p and returns NULL). A failed realloc's block was taken out of the live map at
// the entry (where the record of its free had to be reserved, before any other thread could be given
// the address): it goes back, and the reader is told to take the free back.
static __always_inline void on_realloc_return(struct pt_regs* ctx, __u64 size, __s32 tgid, __s32 tid) {
  struct alloc_thread* t = bpf_task_storage_get(&alloc_threads, bpf_get_current_task_btf(), 0, 0);
  if (!t || !(t->in_realloc & kInRealloc)) return;
  const __u32 state = t->in_realloc;
  const __u64 ptr = t->realloc_ptr;
  t->in_realloc = 0;
  t->realloc_ptr = 0;
  if (ptr == 0) return;
  if (PT_REGS_RC(ctx) != 0 || size == 0) {
    count(HPD_ALLOC_FREES);
    if (!(state & kReallocUnlisted)) count(HPD_ALLOC_FREE_UNSAMPLED);
    return;
  }
  if (state & kReallocUnlisted) {
    struct hpd_alloc_live_key key = {.pid = tgid, .address = ptr};
    const __u64 one = 1;
    bpf_map_update_elem(&alloc_live, &key, &one, BPF_ANY);
  }
  if (state & kReallocFreeSaid) say_free(HPD_ALLOC_BPF_REALLOC_FAILED, 0, ptr, tgid, tid);
}

static __always_inline void on_return(struct pt_regs* ctx, __u32 fn, __u32 wraps, __s32 tgid, __s32 tid) {
  if (wraps) {
    struct alloc_thread* w = bpf_task_storage_get(&alloc_threads, bpf_get_current_task_btf(), 0, 0);
    if (w) w->in_wrapper = 0;
  }
  __u64* cookie = bpf_session_cookie();
  if (!cookie) return;
  const __u64 size = *cookie & ~kCookieSampled;
  if (fn == HPD_ALLOC_FN_REALLOC) on_realloc_return(ctx, size, tgid, tid);
  if (!(*cookie & kCookieSampled)) return;
  __u64 address = PT_REGS_RC(ctx);
  if (fn == HPD_ALLOC_FN_POSIX_MEMALIGN) {
    struct alloc_thread* t = bpf_task_storage_get(&alloc_threads, bpf_get_current_task_btf(), 0, 0);
    if ((int)address != 0 || !t || t->memptr == 0 ||
        bpf_probe_read_user(&address, sizeof address, (const void*)t->memptr) != 0)
      address = 0;
  }
  if (address == 0) {
    count(HPD_ALLOC_FAILED);
    return;
  }
  // Reserved before the address is published in the live map: a free of it in another thread
  // reserves its record after this one, so the reader sees the allocation first.
  struct hpd_alloc_bpf_sample* rec = bpf_ringbuf_reserve(&alloc_ring, sizeof *rec, 0);
  if (!rec) {
    count(HPD_ALLOC_RING_FULL);
    return;
  }
  rec->pid = tgid;
  rec->tid = tid;
  rec->address = address;
  rec->size = size;
  rec->time_ns = bpf_ktime_get_ns();
  const long n = bpf_get_stack(ctx, rec->ips, sizeof rec->ips, BPF_F_USER_STACK);
  rec->frames = n > 0 ? (__u32)((__u64)n >> 3) : 0;
  struct hpd_alloc_live_key key = {.pid = tgid, .address = address};
  const __u64 one = 1;
  if (bpf_map_update_elem(&alloc_live, &key, &one, BPF_ANY) == 0) {
    rec->kind = HPD_ALLOC_BPF_ALLOC;
  } else {
    rec->kind = HPD_ALLOC_BPF_ALLOC_UNTRACKED;
    count(HPD_ALLOC_UNTRACKED);
  }
  bpf_ringbuf_submit(rec, 0);
}

// A function that wraps others (HPD_ALLOC_FN_WRAPS), not sampled: the thread's calls of the others are
// its own until its return, which runs to say so.
static __always_inline int enter_wrapper(struct alloc_thread* t, __u64 size) {
  __u64* cookie = bpf_session_cookie();
  if (!cookie || !t) return 1;
  *cookie = size;
  t->in_wrapper = 1;
  return 0;
}

// Loaded with expected_attach_type BPF_TRACE_UPROBE_SESSION by user space (libbpf 1.1 knows neither
// the section name nor the attach type). Returns 0 to have the kernel run it again at the return.
SEC("uprobe")
int hpd_alloc_call(struct pt_regs* ctx) {
  const __u64 id = bpf_get_current_pid_tgid();
  const __s32 tgid = (__s32)(id >> 32);
  const __s32 tid = (__s32)id;
  if (tgid != target_tgid || left_at_exec) return 1;
  const __u64 attach_cookie = bpf_get_attach_cookie(ctx);
  const __u32 fn = (__u32)(attach_cookie & 0xff);
  const __u32 wraps = (attach_cookie & HPD_ALLOC_FN_WRAPS) != 0;
  if (bpf_session_is_return()) {
    on_return(ctx, fn, wraps, tgid, tid);
    return 0;
  }
  __u64 size = 0;
  __u64 memptr = 0;
  struct alloc_thread* t = 0;
  if (fn == HPD_ALLOC_FN_REALLOC) {
    t = bpf_task_storage_get(&alloc_threads, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
    if (!t) {
      count(HPD_ALLOC_NO_STATE);
      return 1;
    }
  } else {
    // Inside realloc, or inside a function that wraps another: the allocator's own call.
    t = bpf_task_storage_get(&alloc_threads, bpf_get_current_task_btf(), 0,
                             wraps ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
    if (t && ((t->in_realloc & kInRealloc) || t->in_wrapper)) return 1;
    if (wraps && !t) {
      count(HPD_ALLOC_NO_STATE);
      return 1;
    }
  }
  switch (fn) {
    case HPD_ALLOC_FN_FREE:
      on_free(PT_REGS_PARM1(ctx), tgid, tid);
      return wraps ? enter_wrapper(t, 0) : 1;
    case HPD_ALLOC_FN_MALLOC:
    case HPD_ALLOC_FN_VALLOC:
    case HPD_ALLOC_FN_PVALLOC: size = PT_REGS_PARM1(ctx); break;
    case HPD_ALLOC_FN_CALLOC: {
      const __u64 n = PT_REGS_PARM1(ctx);
      const __u64 each = PT_REGS_PARM2(ctx);
      if (((n | each) >> 31) != 0 && each != 0) {
        // Kept a division: clang would make `n > max / each` a 128-bit multiply, which BPF lacks.
        __u64 limit = (1ull << 62) / each;
        asm volatile("" : "+r"(limit));
        if (n > limit) {
          count(HPD_ALLOC_OVERFLOW);
          return 1;
        }
      }
      size = n * each;
      break;
    }
    case HPD_ALLOC_FN_REALLOC: {
      // Its pointer's free is said now, while no other thread can be given the address, and taken
      // back at the return if realloc failed; frees are counted there. The return always runs.
      __u64* cookie = bpf_session_cookie();
      if (!cookie || !t) return 1;
      const __u64 ptr = PT_REGS_PARM1(ctx);
      __u32 state = kInRealloc;
      if (ptr != 0) {
        struct hpd_alloc_live_key key = {.pid = tgid, .address = ptr};
        if (bpf_map_delete_elem(&alloc_live, &key) == 0) {
          state |= kReallocUnlisted;
          if (say_free(HPD_ALLOC_BPF_FREE, HPD_ALLOC_FREE_BY_REALLOC, ptr, tgid, tid))
            state |= kReallocFreeSaid;
        }
      }
      t->in_realloc = state;
      t->realloc_ptr = ptr;
      size = PT_REGS_PARM2(ctx);
      if (size > (1ull << 62)) size = 1ull << 62;  // fails anyway; keeps the countdown's sign
      *cookie = size;
      if (size == 0) return 0;  // realloc(p, 0) frees p, allocates nothing
      count(HPD_ALLOC_CALLS);
      if (!t->started) {
        t->remaining = next_distance();
        t->started = 1;
      }
      t->remaining -= (__s64)size;
      if (t->remaining <= 0) {
        t->remaining = next_distance();
        *cookie = size | kCookieSampled;
        count(HPD_ALLOC_SAMPLED);
      }
      return 0;
    }
    case HPD_ALLOC_FN_POSIX_MEMALIGN:
      memptr = PT_REGS_PARM1(ctx);
      size = PT_REGS_PARM3(ctx);
      break;
    case HPD_ALLOC_FN_ALIGNED_ALLOC:
    case HPD_ALLOC_FN_MEMALIGN: size = PT_REGS_PARM2(ctx); break;
    default: return 1;
  }
  count(HPD_ALLOC_CALLS);
  if (size == 0) return wraps ? enter_wrapper(t, 0) : 1;
  if (size > (1ull << 62)) size = 1ull << 62;  // fails anyway; keeps the countdown's sign
  if (!t)
    t = bpf_task_storage_get(&alloc_threads, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
  if (!t) {
    count(HPD_ALLOC_NO_STATE);
    return 1;
  }
  if (!t->started) {
    t->remaining = next_distance();
    t->started = 1;
  }
  t->remaining -= (__s64)size;
  if (t->remaining > 0) return wraps ? enter_wrapper(t, size) : 1;
  // Sampled: a fresh distance (the exponential is memoryless, so each call of `size` bytes is
  // sampled with probability 1 - exp(-size/mean) whatever came before).
  t->remaining = next_distance();
  __u64* cookie = bpf_session_cookie();
  if (!cookie) return 1;
  *cookie = size | kCookieSampled;
  t->memptr = memptr;
  if (wraps) t->in_wrapper = 1;
  count(HPD_ALLOC_SAMPLED);
  return 0;
}

// tp_btf/sched_process_exec(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm), attached
// only for such a client: the new credentials are committed before it fires. The uprobes follow the
// pid into the new program (they are on its allocator's file, which the new program maps too).
SEC("tp_btf/sched_process_exec")
int hpd_alloc_exec(__u64* ctx) {
  if ((__s32)(bpf_get_current_pid_tgid() >> 32) != target_tgid) return 0;
  if (!hpd_runs_as_client((struct task_struct*)ctx[0], client_uid, client_gid)) left_at_exec = 1;
  return 0;
}
