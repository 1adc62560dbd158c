// hpd's sampling programs: on-CPU samples with per-thread CPU deltas, off-CPU intervals with the
// stack a thread blocked at, and the fork/exec/exit events that keep the user-space view current.
// Filtering happens here, so that non-target tasks cost one map lookup and no ring-buffer traffic.
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "client_creds.bpf.h"
#include "profile_event.h"

char LICENSE[] SEC("license") = "GPL";

#define PF_EXITING 0x00000004
#define TASK_DEAD 0x00000080  // the state of a thread's last switch-out, after which it never runs
#define EEXIST 17  // errno: the key is in the map already (BPF_NOEXIST)

// Configuration, fixed by user space before the programs are loaded.
const volatile __u32 filter_mode = HPD_FILTER_PIDS;
const volatile __s32 self_pid = 0;
const volatile __u32 follow_children = 1;
const volatile __u32 capture_kernel = 1;
const volatile __u64 off_cpu_min_ns = 0;
const volatile __u64 sample_period_ns = 1001001;
// Consumers are woken only when this much data waits; otherwise they poll on a timer, which saves a
// wakeup per sample.
const volatile __u64 wakeup_bytes = 1 << 20;
// User state of on-CPU samples: registers plus this many bytes of user stack (a multiple of 8, at
// most HPD_MAX_STACK_COPY; 0 = neither). fp mode asks for a few hundred bytes (the frameless leaf's
// return address), dwarf mode for the unwinder's copy.
const volatile __u32 stack_copy_bytes = 0;
// dwarf mode: user space unwinds on-CPU user stacks from the copy; no frame-pointer walk here.
const volatile __u32 user_stack_from_copy = 0;
// dwarf mode with off-CPU samples: hpd_sched_switch also copies the registers and stack_copy_bytes of
// user stack of a target thread it switches out (HPD_EVENT_SWITCH_STACK), for user space to unwind its
// off-CPU record's user stack as it unwinds the on-CPU ones. Only the switch-out can: the thread is
// current there, and its stack cannot be read from another task by a non-sleepable program.
const volatile __u32 switch_stack_copy = 0;
// cfi mode: an on-CPU sample whose walk met a module whose table is not published yet
// (HPD_SAMPLE_TABLES_PENDING) carries its registers and this many bytes of user stack (a multiple of 8,
// at most HPD_MAX_STACK_COPY; 0 = none), which user space walks again once the tables are published.
const volatile __u32 pending_stack_copy_bytes = 0;
// Stack copies are taken while the ring holds fewer bytes than this (load_config_of).
const volatile __u64 copies_below_bytes = 0;
// The possible CPUs: sample_scratch holds two entries for each, the exit program's after the others'.
const volatile __u32 scratch_cpus = 1;
// Pages of the ring hpd_warm_ring touches before the recording starts (0: none).
const volatile __u32 warm_pages = 0;
// For an unprivileged client (HPD_FILTER_PIDS only): the uid and gid every followed process must run
// with; a process whose exec gives it others stops being followed at that exec (see hpd_exec).
// The ids are written after the load (in .bss), before anything is attached: one loaded object then
// serves any client (hpd loads the next session's programs ahead, bpf_preloader.cpp).
const volatile __u32 restrict_creds = 0;
__u32 client_uid = 0;
__u32 client_gid = 0;

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 4 << 20);  // resized by user space before load
} events SEC(".maps");

// Target processes (tgid) in HPD_FILTER_PIDS mode; followed children are added here.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 8192);
  __type(key, __s32);
  __type(value, __u8);
} targets SEC(".maps");

// The cgroup (v2) whose tasks, and its descendants' tasks, are recorded in HPD_FILTER_CGROUP mode.
struct {
  __uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
  __uint(max_entries, 1);
  __uint(key_size, sizeof(__u32));
  __uint(value_size, sizeof(__u32));
} target_cgroup SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 32768);
  __type(key, __s32);
  __type(value, struct hpd_thread_state);
} threads SEC(".maps");

// Target threads that are off the CPU: the record to emit when they run again, keyed by tid. The
// sched_wakeup program writes the wakeup's time of a blocked one into its record (woken_ns): only
// threads recorded here are looked at, so waking the rest of the system costs one failed lookup.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __uint(max_entries, 16384);
  __type(key, __s32);
  __type(value, struct hpd_sample_event);
} blocked SEC(".maps");

// cfi mode: the user state of target threads that are off the CPU and whose stack was walked by frame
// pointer because their process's tables were not published yet (profile_event.h), keyed by tid.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __uint(max_entries, 4096);
  __type(key, __s32);
  __type(value, struct hpd_pending_walk);
} pending_walks SEC(".maps");

// A record too large for the BPF stack is built here first.
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct hpd_sample_event);
} scratch SEC(".maps");

// On-CPU records are built here, one entry per possible CPU (indexed by CPU number; sized by user
// space before load), and after those the exit program's, one per CPU (exit_scratch_index). A per-CPU array
// cannot hold a dwarf stack copy (its values are limited to 32 KiB). Each entry has room for a
// hpd_sample_event with every frame, the stack copy and a page (see copy_user_stack).
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __uint(key_size, sizeof(__u32));
  __uint(value_size, sizeof(struct hpd_sample_event));
} sample_scratch SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, HPD_COUNTER_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} counters SEC(".maps");

static __always_inline void count_n(__u32 index, __u64 n) {
  __u64* value = bpf_map_lookup_elem(&counters, &index);
  if (value) *value += n;
}

static __always_inline void count(__u32 index) { count_n(index, 1); }

// The perf_event program's context as the kernel passes it (to reach the event that fired).
extern void* bpf_cast_to_kern_ctx(void* obj) __ksym;

// perf_event_attr configs (UAPI values) of the two software clock events that drive hpd_on_cpu. Their
// type is not checked: since Linux 6.15 each has a PMU of its own, whose dynamic type replaces
// PERF_TYPE_SOFTWARE in the event's attr.
#define SW_CPU_CLOCK 0
#define SW_TASK_CLOCK 1
// A thread runs at most a scheduler tick (at HZ=100, 10 ms) between two updates of its runtime, far
// longer only with nohz_full (up to a second); beyond this the reading is taken for garbage.
#define MAX_RUNTIME_LAG_NS 2000000000ull
// How far the run queue's clock may be ahead of a sample's clock and still be taken as the same
// moment (the two are updated at different points of one CPU's interrupt handling).
#define MAX_CLOCK_SKEW_NS 1000000ull

// local_clock() at this sample, which is the scheduler's clock (rq->clock), or 0 when unknown. The
// clock events' timer handler reads the event right before it runs the program: a cpu-clock event's
// last value is local_clock() itself; a task-clock event's is its context's time, which is
// local_clock() minus the context's time offset.
static __always_inline __u64 sample_clock_ns(struct bpf_perf_event_data* ctx) {
  struct bpf_perf_event_data_kern* kctx = bpf_cast_to_kern_ctx(ctx);
  struct perf_event* event = BPF_CORE_READ(kctx, event);
  if (!event) return 0;
  const __u64 config = BPF_CORE_READ(event, attr.config);
  const __u64 value = (__u64)BPF_CORE_READ(event, hw.prev_count.a.a.counter);
  if (config == SW_CPU_CLOCK) return value;
  if (config != SW_TASK_CLOCK) return 0;
  struct perf_event_context* context = BPF_CORE_READ(event, ctx);
  if (!context) return 0;
  return value - BPF_CORE_READ(context, time) + BPF_CORE_READ(context, timestamp);
}

// Where this CPU's hypervisor steal clock lies (KVM's struct kvm_steal_time, which PVM guests use
// too, the per-CPU steal_time the host writes), as an offset from the CPU's run queue: both are
// per-CPU variables of one section, whose places vmlinux's BTF gives (user space reads them;
// steal_time is not in kallsyms without CONFIG_KALLSYMS_ALL, so it cannot be a ksym). 0: unknown.
// Written after the load (in .bss), before anything is attached: user space reads vmlinux's BTF for
// them (about 25 ms) while the kernel verifies the programs.
volatile __u32 steal_clock_known = 0;
volatile __s64 steal_clock_from_rq = 0;

// The time the hypervisor took from this CPU since the run queue last accounted steal (when its
// clock was last updated), or 0 when unknown: the kernel then takes it out of the task clock, so a
// runtime brought up to date across it would count it as the task's (on a host that stole a quarter
// of the CPU time, 6-23% too much CPU for 2 ms processes, whose last sample's excess no later sample
// takes back). The run queue's record of the steal it accounted is the steal clock's value then
// (CONFIG_PARAVIRT_TIME_ACCOUNTING); a record of 0 means the run queue does not account steal (its
// task clock includes it), and so nothing is taken out. At most `elapsed`, the time since that
// update.
static __always_inline __u64 unaccounted_steal_ns(const struct rq* rq, __u64 elapsed) {
  if (!steal_clock_known || !bpf_core_field_exists(struct rq, prev_steal_time_rq)) return 0;
  const __u64 accounted = BPF_CORE_READ(rq, prev_steal_time_rq);
  if (accounted == 0) return 0;
  // The clock's first field (struct kvm_steal_time's u64 steal), read alone: an aligned 8-byte load is
  // whole on x86-64, so it is the old value or the new one, never a mix (the structure's version guards
  // its fields taken together; reading it before and after cost about 0.4 us more per sample, 15% of
  // the cfi walk's cost: docs/performance.md).
  __u64 steal = 0;
  if (bpf_probe_read_kernel(&steal, sizeof steal, (const char*)rq + steal_clock_from_rq) != 0) {
    count(HPD_COUNTER_STEAL_UNREAD);
    return 0;
  }
  if (steal <= accounted) return 0;
  const __u64 unaccounted = steal - accounted < elapsed ? steal - accounted : elapsed;
  count_n(HPD_COUNTER_STEAL_TAKEN_NS, unaccounted);
  return unaccounted;
}

// The current task's sum_exec_runtime brought up to this sample, as the kernel's
// task_sched_runtime() does: the stored value lags by the time the task ran since the scheduler
// last updated it (at a tick, 4 ms at HZ=250, or a switch), which is the run queue's task clock now
// minus the task's exec_start. The task clock is rq->clock less the steal (and IRQ) time the run
// queue accounted so far; the steal since its last update is taken out too (unaccounted_steal_ns),
// the IRQ time since is ignored (microseconds). Without a usable clock, the stored value: stale, but
// the deltas still add up to the thread's CPU time.
static __always_inline __u64 runtime_at_sample(struct bpf_perf_event_data* ctx, struct task_struct* task) {
  const __u64 stored = BPF_CORE_READ(task, se.sum_exec_runtime);
  const __u64 updated_at = BPF_CORE_READ(task, se.exec_start);
  // The task's run queue, through its CFS run queue (kernels with CONFIG_FAIR_GROUP_SCHED; the
  // runqueues variable itself is not in kallsyms without CONFIG_KALLSYMS_ALL).
  if (!bpf_core_field_exists(task->se.cfs_rq) || !bpf_core_field_exists(struct cfs_rq, rq)) {
    count(HPD_COUNTER_STALE_RUNTIME);
    return stored;
  }
  const struct rq* rq = BPF_CORE_READ(task, se.cfs_rq, rq);
  __u64 now = sample_clock_ns(ctx);
  const __u64 rq_clock = BPF_CORE_READ(rq, clock);
  const __u64 rq_clock_task = BPF_CORE_READ(rq, clock_task);
  // The sample's clock and the run queue's are both this CPU's, updated at different moments: the run
  // queue's may have been updated (by an interrupt) a little after the event's time was taken. Then
  // the runtime is brought up to the run queue's clock (what it lags by is that skew). Seen once in
  // 2,712 samples of a loaded machine, where the sample counted as stale.
  if (rq && now != 0 && now < rq_clock && rq_clock - now <= MAX_CLOCK_SKEW_NS) now = rq_clock;
  if (!rq || now == 0 || now < rq_clock || now - rq_clock > MAX_RUNTIME_LAG_NS || rq_clock < rq_clock_task) {
    count(HPD_COUNTER_STALE_RUNTIME);
    return stored;
  }
  const __u64 task_clock_now = now - (rq_clock - rq_clock_task) - unaccounted_steal_ns(rq, now - rq_clock);
  // Updated in this very interrupt (the tick came first), or steal accounted since: up to date.
  if (task_clock_now <= updated_at) return stored;
  if (task_clock_now - updated_at > MAX_RUNTIME_LAG_NS) {
    count(HPD_COUNTER_STALE_RUNTIME);
    return stored;
  }
  return stored + (task_clock_now - updated_at);
}

// Whether the current task belongs to what is recorded. `pid` is its tgid.
static __always_inline int is_target(__s32 pid) {
  if (pid == 0) return 0;  // the idle task
  if (filter_mode == HPD_FILTER_ALL) return pid != self_pid;
  if (filter_mode == HPD_FILTER_CGROUP) return bpf_current_task_under_cgroup(&target_cgroup, 0) == 1;
  return bpf_map_lookup_elem(&targets, &pid) != 0;
}

// A global function, checked once: inlined, it was checked on every path to every record's submit.
__attribute__((noinline)) __u64 submit_flags(void) {
  return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP
                                                                       : BPF_RB_NO_WAKEUP;
}

// When a sample whose walk met a table not published yet last woke user space (sample_submit_flags).
__u64 pending_wakeup_ns = 0;
#define PENDING_WAKEUP_GAP_NS 2000000ULL

// The submit flags of a sample or off-CPU record with these flags. cfi mode: one whose walk met a table
// not published yet (HPD_SAMPLE_TABLES_PENDING; a process just started, a library just mapped) wakes user
// space, which reads the new mappings, publishes their tables and walks the record again; without the
// wakeup, such samples came until the loop's next timeout (100 ms system-wide), each one walked twice
// from a copy of its stack. At most one such wakeup every PENDING_WAKEUP_GAP_NS (a table being
// compiled is waited for by the samples of seconds).
__attribute__((noinline)) __u64 sample_submit_flags(__u32 flags) {
  if (flags & HPD_SAMPLE_TABLES_PENDING) {
    const __u64 now = bpf_ktime_get_ns();
    if (now - pending_wakeup_ns >= PENDING_WAKEUP_GAP_NS) {
      pending_wakeup_ns = now;
      return BPF_RB_FORCE_WAKEUP;
    }
  }
  return submit_flags();
}

static __always_inline void fill_header(struct hpd_event_header* h, __u32 type, __s32 pid, __s32 tid,
                                        __u64 now) {
  h->type = type;
  h->cpu = bpf_get_smp_processor_id();
  h->pid = pid;
  h->tid = tid;
  h->time_ns = now;
  bpf_get_current_comm(h->comm, sizeof h->comm);
}

// In a tp_btf program the kernel stack starts with the program itself and bpf_trace_runN, which
// called it; the scheduler's own frames follow.
#define TRACEPOINT_STACK_SKIP 2

#define USER_MODE_CS_BITS 3

// The user registers the current task entered the kernel with (on x86-64 an interrupt of user mode
// saves them there too, so this is also the interrupted user state); NULL for kernel threads.
static __always_inline struct pt_regs* current_user_regs(void) {
  struct task_struct* task = bpf_get_current_task_btf();
  struct pt_regs* regs = (struct pt_regs*)bpf_task_pt_regs(task);
  if (!regs || (regs->cs & USER_MODE_CS_BITS) != USER_MODE_CS_BITS) return 0;
  return regs;
}

// Whether the thread whose user registers these are is in a system call: the entry stores the call's
// number in orig_ax, every interrupt and exception entry -1 (syscall_get_nr() reads it the same way).
static __always_inline __u32 in_syscall_flag(const struct pt_regs* user) {
  return user && (long)user->orig_ax >= 0 ? HPD_SAMPLE_IN_SYSCALL : 0;
}

// A frame pointer farther than this above the stack pointer is taken for garbage, not a frame.
#define USER_STACK_REACH (1ull << 30)

struct user_frame {
  __u64 next;  // the caller's frame pointer
  __u64 ret;   // the return address into the caller
};

struct user_frames {
  __u64 ips[HPD_MAX_USER_FRAMES];
};

#include "calls_unwind.bpf.h"

// The walk's state between its steps, in memory the caller owns (walk_user_frames's argument): the
// verifier takes what is read from there for any value, so it checks a step once (under bpf_loop), where
// a count it could follow made it check the loop's body once per frame (65,000-70,000 instructions per
// walking program in fp and dwarf modes; docs/performance.md).
struct fp_walk {
  __u64 fp;
  __u64 sp;
  __u64 frames;  // out->ips filled so far
  __u32 end;
  __u32 uprobes;  // uretprobe_walk_begin()
};

struct fp_walk_ctx {
  struct user_frames* out;
  struct fp_walk* w;
};

// One frame-pointer step (a bpf_loop callback): 1 once the walk has ended (w->end says how).
static long fp_walk_step(__u64 index, struct fp_walk_ctx* c) {
  struct fp_walk* w = c->w;
  struct user_frames* out = c->out;
  if (!w || !out) return 1;
  const __u64 i = w->frames;
  if (i >= HPD_MAX_USER_FRAMES) return 1;  // HPD_USER_END_DEPTH, set before the loop
  const __u64 fp = w->fp;
  // rbp = 0 past the leaf: the start-up code's marker of the outermost frame.
  if (fp == 0 && i > 1) {
    w->end = HPD_USER_END_FP_ZERO;
    return 1;
  }
  if ((fp & 7) != 0 || fp < w->sp || fp - w->sp > USER_STACK_REACH) {
    w->end = HPD_USER_END_FP_BROKEN;
    return 1;
  }
  struct user_frame frame;
  if (bpf_probe_read_user(&frame, sizeof frame, (const void*)fp) != 0) {
    w->end = HPD_USER_END_READ_FAULT;
    return 1;
  }
  if (frame.ret == 0) {
    w->end = HPD_USER_END_ROOT;
    return 1;
  }
  if (calls_runtime_active) frame.ret = calls_real_return(frame.ret, fp + 8);
  if (w->uprobes) frame.ret = uretprobe_real_return(frame.ret, fp + 8);
  out->ips[i & (HPD_MAX_USER_FRAMES - 1)] = frame.ret;
  w->frames = i + 1;
  if (frame.next == 0) {
    w->end = HPD_USER_END_FP_ZERO;
    return 1;
  }
  if (frame.next <= fp) {
    w->end = HPD_USER_END_FP_BROKEN;
    return 1;
  }
  w->fp = frame.next;
  return 0;
}

// The user stack by frame pointers into out[0..HPD_MAX_USER_FRAMES): the instruction pointer, then
// one return address per frame; returns how many, and how the walk ended in w->end. This is the walk
// bpf_get_stack(BPF_F_USER_STACK) does, with one difference that matters for its cost: it stops where
// the chain stops climbing the stack (a frame pointer of 0, misaligned, below the previous one or far
// above it), where the kernel reads at whatever the last frame pointer holds. Code without frame
// pointers (libc's start-up frames, usually) leaves such garbage at the end of nearly every chain, and
// reading it faults; a fault handled in the middle of the sample costs microseconds on a
// paravirtualized guest (docs/performance.md).
//
// A global function, so that the verifier checks it once on its own: inlined, every way out of the
// loop multiplied the states of the code after it beyond the verifier's limit.
//
// w->end is HPD_USER_END_ROOT on entry for a new thread that has not returned to user mode yet
// (clone_side_of in cfi_walk.bpf.h): its stack is its start, that frame alone.
__attribute__((noinline)) __u64 walk_user_frames(struct user_frames* out, __u64 ip, struct fp_walk* w) {
  if (!out || !w) return 0;
  out->ips[0] = ip;
  w->frames = 1;
  if (w->end == HPD_USER_END_ROOT) return 1;
  w->end = HPD_USER_END_DEPTH;
  w->uprobes = uretprobe_walk_begin();
  struct fp_walk_ctx c = {.out = out, .w = w};
  bpf_loop(HPD_MAX_USER_FRAMES - 1, fp_walk_step, &c, 0);
  const __u64 n = w->frames;
  return n > HPD_MAX_USER_FRAMES ? HPD_MAX_USER_FRAMES : n;
}

#include "cfi_walk.bpf.h"

// The kernel frames a stack helper returned `bytes` of (its negative errno is kept in the record).
static __always_inline __u64 kernel_frames_of(struct hpd_sample_event* e, long bytes) {
  if (bytes < 0) {
    e->kernel_error = (__s32)bytes;
    return 0;
  }
  const __u64 frames = (__u64)bytes / sizeof(__u64);
  return frames > HPD_MAX_KERNEL_FRAMES ? HPD_MAX_KERNEL_FRAMES : frames;
}

// Kernel stack (when wanted, after skipping its first `kernel_skip` frames), then (when `user` is
// not NULL) the user stack from those registers (by the CFI tables when cfi_unwind is set, else by
// frame pointers), into e->ips.
static __always_inline void capture_stacks(void* ctx, struct hpd_sample_event* e, __u64 kernel_skip,
                                           const struct pt_regs* user, __u32 window_slot) {
  __u64 kernel_frames = 0;
  e->kernel_error = 0;
  e->user_end = HPD_USER_END_NONE;
  e->user_fp_frames = 0;
  if (capture_kernel)
    kernel_frames = kernel_frames_of(e, bpf_get_stack(ctx, e->ips, HPD_MAX_KERNEL_FRAMES * sizeof(__u64),
                                                      kernel_skip & BPF_F_SKIP_FIELD_MASK));
  if (kernel_frames > HPD_MAX_KERNEL_FRAMES) kernel_frames = HPD_MAX_KERNEL_FRAMES;
  __u64 user_frames = 0;
  if (user) calls_walk_begin(e->header.pid);
  if (user && cfi_unwind) {
    struct cfi_regs r = {
        .ip = uprobe_xol_real_ip(user->ip), .sp = user->sp, .bp = user->bp, .exact = 1, .di = user->di, .di_known = 1};
    r.clone = clone_side_of(user->orig_ax, user->ax, user->ip);
    uretprobe_syscall_regs(user, &r.ip, &r.sp);
    __u32 end = HPD_USER_END_NONE;
    user_frames =
        walk_user_cfi((struct user_frames*)&e->ips[kernel_frames], &r, e->header.pid, &end, window_slot);
    e->user_end = (__u16)end;
    e->user_fp_frames = (__u16)r.fp_frames;
    if (r.pending) e->flags |= HPD_SAMPLE_TABLES_PENDING;
  } else if (user) {
    struct fp_walk w = {.fp = user->bp, .sp = user->sp, .end = HPD_USER_END_NONE};
    // A new thread before its first return to user mode is on the child's side of its clone, on a stack
    // of its own (a forked process's child is walked as the copy of its parent's stack it has).
    if (e->header.tid != e->header.pid && clone_side_of(user->orig_ax, user->ax, user->ip) == CFI_CLONE_CHILD)
      w.end = HPD_USER_END_ROOT;
    user_frames = walk_user_frames((struct user_frames*)&e->ips[kernel_frames], uprobe_xol_real_ip(user->ip), &w);
    e->user_end = (__u16)w.end;
  }
  if (user_frames > HPD_MAX_USER_FRAMES) user_frames = HPD_MAX_USER_FRAMES;
  e->kernel_frames = (__u16)kernel_frames;
  e->user_frames = (__u16)user_frames;
}

static __always_inline __u64 sample_size(const struct hpd_sample_event* e) {
  __u64 frames = (__u64)e->kernel_frames + e->user_frames;
  if (frames > HPD_MAX_FRAMES) frames = HPD_MAX_FRAMES;
  return __builtin_offsetof(struct hpd_sample_event, ips) + frames * sizeof(__u64);
}

#define PAGE_BYTES 4096
// Enough page-sized reads for HPD_MAX_STACK_COPY bytes starting anywhere in a page.
#define STACK_COPY_READS (HPD_MAX_STACK_COPY / PAGE_BYTES + 2)

// Copies the user registers into the record, by DWARF number.
static __always_inline void copy_user_regs(struct hpd_sample_event* e, const struct pt_regs* regs) {
  e->regs[0] = regs->ax;
  e->regs[1] = regs->dx;
  e->regs[2] = regs->cx;
  e->regs[3] = regs->bx;
  e->regs[4] = regs->si;
  e->regs[5] = regs->di;
  e->regs[6] = regs->bp;
  e->regs[7] = regs->sp;
  e->regs[8] = regs->r8;
  e->regs[9] = regs->r9;
  e->regs[10] = regs->r10;
  e->regs[11] = regs->r11;
  e->regs[12] = regs->r12;
  e->regs[13] = regs->r13;
  e->regs[14] = regs->r14;
  e->regs[15] = regs->r15;
  e->regs[16] = uprobe_xol_real_ip(regs->ip);
  e->regs_valid = (1u << HPD_USER_REGS) - 1;
}

// The index of this CPU's sample_scratch entry: the record being built, with room after it.
static __always_inline __u32 scratch_index(void) {
  return bpf_get_smp_processor_id();
}
// The exit program's entry of this CPU (see exit_busy).
static __always_inline __u32 exit_scratch_index(void) {
  return scratch_cpus + bpf_get_smp_processor_id();
}

// The entry has room for the larger of the two copies and a page after the record (bpf_load.cpp).
static __always_inline __u64 stack_room(void) {
  return stack_copy_bytes > pending_stack_copy_bytes ? stack_copy_bytes : pending_stack_copy_bytes;
}

// uretprobe_restore_copy on the `copied` bytes of stack from `sp` at `offset` in sample_scratch's entry
// `index`: a global function, checked once on its own by the verifier.
__attribute__((noinline)) int restore_stack_copy(__u32 index, __u64 offset, __u64 sp, __u64 copied) {
  struct hpd_sample_event* e = bpf_map_lookup_elem(&sample_scratch, &index);
  if (!e || offset > sizeof(struct hpd_sample_event) || copied > stack_room()) return 0;
  uretprobe_restore_copy((__u8*)e + offset, sp, copied);
  return 0;
}

struct stack_copy {
  __u32 index;   // the record's sample_scratch entry
  __u64 offset;  // where the copy begins in the record
  __u64 sp;
  __u64 want;  // at most stack_room()
};

// One page-sized read of copy_user_stack (a bpf_loop callback); 1 to stop. The bytes copied so far are
// kept in the record's stack_bytes, which the verifier takes for any value: so it checks this once, where
// a count it could follow made it check a bounded loop's body once per iteration, for every way the
// program reached it (the on-CPU program: 318,663 instructions, 0.6 s of verifying at every recording's
// start; docs/performance.md, "The path to the first sample").
static long copy_stack_page(__u64 index, struct stack_copy* c) {
  struct hpd_sample_event* e = bpf_map_lookup_elem(&sample_scratch, &c->index);
  if (!e || c->offset > sizeof(struct hpd_sample_event)) return 1;
  const __u64 copied = e->stack_bytes;
  // Unsigned 64-bit comparisons with constants, which the verifier turns into bounds: copied stays
  // below stack_room() and one read below a page, so the entry needs stack_room() + a page after the
  // frames.
  if (copied >= c->want || copied >= stack_room()) return 1;
  const __u64 at = c->sp + copied;
  __u64 size = PAGE_BYTES - (at & (PAGE_BYTES - 1));
  const __u64 left = c->want - copied;
  if (size > left) size = left;
  if (size > PAGE_BYTES) return 1;
  if (bpf_probe_read_user((__u8*)e + c->offset + copied, size, (const void*)at) != 0) return 1;
  e->stack_bytes = (__u32)(copied + size);
  return 0;
}

// Copies up to `want` bytes (stack_copy_bytes or pending_stack_copy_bytes) of user stack from `sp` into
// the record in sample_scratch's entry `index` at `offset` (right after its last frame), page by page,
// stopping at the first page that cannot be read: like perf_event's copy, it ends at the top of the
// stack mapping (or at a page that is not present). Return addresses the kernel's return probes replaced are put back in the copy
// (uretprobe_restore_copy). Sets the record's stack_bytes and returns it. A global function, checked once
// on its own (its caller bounds what it returns).
__attribute__((noinline)) __u64 copy_user_stack(__u32 index, __u64 offset, __u64 sp, __u64 want) {
  struct hpd_sample_event* e = bpf_map_lookup_elem(&sample_scratch, &index);
  if (!e) return 0;
  e->stack_bytes = 0;
  const __u64 room = stack_room();
  struct stack_copy c = {.index = index, .offset = offset, .sp = sp, .want = want > room ? room : want};
  bpf_loop(STACK_COPY_READS, copy_stack_page, &c, 0);
  const __u64 copied = e->stack_bytes;
  // A timed call's return address in the copy is the kernel's trampoline: the original back.
  if (copied >= 8) restore_stack_copy(index, offset, sp, copied);
  return copied;
}

// Whether the ring holds copies_below_bytes or more (half of it; system-wide in cfi mode, all but twice
// the samples' own ring): no stack copy (40 samples' worth) is taken then, the samples come first.
static __always_inline int ring_too_full_for_copies(void) {
  return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= copies_below_bytes;
}

// cfi mode: whether record `e`, whose walk stood in frame pointers for a table not published yet, is to
// carry the registers and a copy of the stack for user space to walk again once the tables are (not when
// return addresses on it are the calls runtime's hook, which only the programs' walk replaces).
static __always_inline int wants_pending_copy(const struct hpd_sample_event* e) {
  return pending_stack_copy_bytes != 0 && (e->flags & HPD_SAMPLE_TABLES_PENDING) && !calls_walk_hooked();
}

// A record of thread `tid` (of process `pid`) that did not fit: counted globally and for the thread,
// whose state is created if need be, so that user space can attribute every drop to a thread.
static __always_inline void count_drop(__s32 pid, __s32 tid) {
  count(HPD_COUNTER_RINGBUF_DROPS);
  struct hpd_thread_state* state = bpf_map_lookup_elem(&threads, &tid);
  if (!state) {
    // No CPU-time baseline: seeded stays 0, so the thread's next sample still counts as unseeded.
    struct hpd_thread_state fresh = {.pid = pid};
    bpf_map_update_elem(&threads, &tid, &fresh, BPF_NOEXIST);
    state = bpf_map_lookup_elem(&threads, &tid);
  }
  if (state) __sync_fetch_and_add(&state->ringbuf_drops, 1);
}

SEC("perf_event")
int hpd_on_cpu(struct bpf_perf_event_data* ctx) {
  const __u64 id = bpf_get_current_pid_tgid();
  const __s32 pid = (__s32)(id >> 32);
  const __s32 tid = (__s32)id;
  if (!is_target(pid)) return 0;
  struct hpd_thread_state* state = bpf_map_lookup_elem(&threads, &tid);
  // Per-CPU events all have the same period, so this drops nothing there (see hpd_thread_state).
  const __u64 period = ctx->sample_period;
  if (state) {
    if (state->event_period != 0 && period > state->event_period) return 0;
    state->event_period = period;
  }
  count(HPD_COUNTER_SAMPLES);
  const __u32 slot = scratch_index();
  struct hpd_sample_event* e = bpf_map_lookup_elem(&sample_scratch, &slot);
  if (!e) return 0;
  const __u64 now = bpf_ktime_get_ns();
  fill_header(&e->header, HPD_EVENT_ON_CPU, pid, tid, now);
  e->off_cpu_ns = 0;
  e->charged_ns = 0;
  e->wake_cpu = 0;
  e->reserved = 0;
  e->flags = 0;

  // The thread's CPU time up to this sample: each delta is the CPU it used since its previous
  // sample. The value never goes back (a reading a few microseconds ahead of the kernel's is
  // absorbed by the next delta), so the deltas telescope to the thread's exact CPU time.
  struct task_struct* task = (struct task_struct*)bpf_get_current_task();
  const __u64 runtime = runtime_at_sample(ctx, task);
  if (state && state->seeded) {
    if (runtime > state->last_runtime_ns) {
      e->cpu_delta_ns = runtime - state->last_runtime_ns;
      state->last_runtime_ns = runtime;
    } else {
      e->cpu_delta_ns = 0;
    }
  } else {
    // No baseline (a thread that existed before the recording and was not seeded): one period is
    // the best guess for this first sample.
    e->cpu_delta_ns = runtime < sample_period_ns ? runtime : sample_period_ns;
    e->flags |= HPD_SAMPLE_NO_BASELINE;
    if (state) {
      state->last_runtime_ns = runtime;
      state->seeded = 1;
    } else {
      struct hpd_thread_state fresh = {
          .last_runtime_ns = runtime, .pid = pid, .seeded = 1, .event_period = period};
      if (bpf_map_update_elem(&threads, &tid, &fresh, BPF_NOEXIST) != 0) count(HPD_COUNTER_THREAD_MAP_FULL);
    }
  }

  e->regs_valid = 0;
  e->stack_bytes = 0;
  const struct pt_regs* regs = current_user_regs();
  e->flags |= in_syscall_flag(regs);
  const int have_regs = stack_copy_bytes != 0 && regs != 0;
  if (have_regs) copy_user_regs(e, regs);
  capture_stacks(ctx, e, 0, have_regs && user_stack_from_copy ? 0 : regs, 0);
  __u64 size = sample_size(e);
  __u64 copy = have_regs ? stack_copy_bytes : 0;
  // cfi mode: a walk that stood in frame pointers for a table not published yet is done again by user
  // space from the registers and a copy of the stack.
  if (!have_regs && regs && wants_pending_copy(e)) {
    if (ring_too_full_for_copies()) {
      count(HPD_COUNTER_COPIES_SKIPPED);
    } else {
      copy_user_regs(e, regs);
      copy = pending_stack_copy_bytes;
    }
  }
  if (copy != 0) {
    // The copy goes right after the last frame; sample_size() is at most the offset of the end of ips.
    if (size > sizeof(struct hpd_sample_event)) return 0;  // for the verifier
    __u64 copied = copy_user_stack(slot, size, e->regs[7], copy);
    if (copied > copy) copied = 0;  // never: the bound the verifier needs for the record's size
    e->stack_bytes = (__u32)copied;
    size += copied;
  }
  if (bpf_ringbuf_output(&events, e, size, sample_submit_flags(e->flags)) != 0) count_drop(pid, tid);
  return 0;
}

// The user registers and `want` bytes of stack of the thread being switched out, as an
// HPD_EVENT_SWITCH_STACK record with the switch-out's time (its off-CPU record follows at its switch-in):
// dwarf mode's copy for every switch-out (stack_copy_bytes), cfi mode's for a switch-out whose walk met a
// table not published yet (pending_stack_copy_bytes), which user space walks again with the tables
// however late they come (the thread may have run again by then, and its stack changed).
// Built in the CPU's sample_scratch entry: hpd_on_cpu, its other user, runs in the timer's interrupt,
// which cannot come while the scheduler runs this program (interrupts are off in __schedule), nor can
// this program run inside an interrupt. Not while the ring is too full for copies: the samples come first, and
// the off-CPU record then keeps the frame-pointer walk taken with it.
static __always_inline void emit_switch_stack(const struct hpd_event_header* h, const struct pt_regs* user,
                                              __u32 want) {
  if (ring_too_full_for_copies()) {
    count(HPD_COUNTER_COPIES_SKIPPED);
    return;
  }
  const __u32 slot = scratch_index();
  struct hpd_sample_event* c = bpf_map_lookup_elem(&sample_scratch, &slot);
  if (!c) return;
  c->header = *h;
  c->header.type = HPD_EVENT_SWITCH_STACK;
  c->cpu_delta_ns = 0;
  c->off_cpu_ns = 0;
  c->charged_ns = 0;
  c->wake_cpu = 0;
  c->reserved = 0;
  c->kernel_error = 0;
  c->user_end = HPD_USER_END_NONE;
  c->user_fp_frames = 0;
  c->kernel_frames = 0;
  c->user_frames = 0;
  c->flags = 0;
  copy_user_regs(c, user);
  const __u64 size = __builtin_offsetof(struct hpd_sample_event, ips);
  __u64 copied = copy_user_stack(slot, size, c->regs[7], want);
  if (copied > want) copied = 0;  // never: the bound the verifier needs for the record's size
  c->stack_bytes = (__u32)copied;
  // Lost: the off-CPU record keeps its frame-pointer walk (user space counts it), not a lost sample.
  bpf_ringbuf_output(&events, c, size + copied, submit_flags());
}

// Kernels before 5.14 named the task state `state` (a long); the flavor lets CO-RE read either.
struct task_struct___pre_5_14 {
  long state;
} __attribute__((preserve_access_index));

// Whether `prev`, being switched out, stays runnable (TASK_RUNNING, 0): it waits for a CPU rather than
// for an event. `preempt` alone misses most of it: a task preempted in user mode is switched out by
// the plain schedule() of the return to user mode (exit_to_user_mode_loop), with preempt false (seen
// on 6.18: a CPU-bound thread sharing its CPU had every switch-out unflagged); so does a task that
// gives the CPU up itself while runnable (sched_yield, cond_resched), or that meant to sleep but had a
// signal pending.
static __always_inline int task_is_running(struct task_struct* prev) {
  if (bpf_core_field_exists(prev->__state)) return BPF_CORE_READ(prev, __state) == 0;
  const struct task_struct___pre_5_14* old = (const void*)prev;
  return BPF_CORE_READ(old, state) == 0;
}

// A record still in `blocked` when its thread switches out again or exits: the switch-in that ended
// its interval was not reported. The kernel this project runs on reports no sched_switch away from
// some tasks (its PID 1's threads), so the switch to the next task goes unseen too. The thread ran
// from that switch-in until now without a switch-out (every switch-out of a target is seen), so it
// came back `runtime_now` less its runtime at the switch-out (kept in off_cpu_ns) before `now`.
// `runtime_now` may lag a little behind the thread's true CPU time (at exit: up to a tick), which
// makes the interval that much longer. Emitted, flagged and counted; its pending walk goes with it.
static __always_inline void emit_unseen_switch_in(struct hpd_sample_event* b, __s32 tid, __u64 runtime_now,
                                                  __u64 now) {
  const __u64 ran = runtime_now > b->off_cpu_ns ? runtime_now - b->off_cpu_ns : 0;
  const __u64 back = now > ran ? now - ran : 0;
  if (b->flags & HPD_SAMPLE_TABLES_PENDING) bpf_map_delete_elem(&pending_walks, &tid);
  count(HPD_COUNTER_SWITCH_IN_UNSEEN);
  if (back <= b->header.time_ns || back - b->header.time_ns < off_cpu_min_ns) return;
  b->off_cpu_ns = back - b->header.time_ns;
  b->flags |= HPD_SAMPLE_SWITCH_IN_INFERRED;
  // A wakeup after the thread was back is none of this interval's; what the scheduler charged for
  // its wait stays in the thread's on-CPU deltas.
  if (b->woken_ns > back) b->woken_ns = 0;
  b->charged_ns = 0;
  b->wake_cpu = 0;
  if (bpf_ringbuf_output(&events, b, sample_size(b), sample_submit_flags(b->flags)) != 0)
    count_drop(b->header.pid, tid);
}

// Reserves an exec, exit or CPU-tail record and fills its header; NULL (the drop counted) when the ring is full.
static __always_inline struct hpd_task_event* reserve_task_event(__u32 type, __s32 pid, __s32 tid) {
  struct hpd_task_event* e = bpf_ringbuf_reserve(&events, sizeof *e, 0);
  if (!e) {
    count_drop(pid, tid);
    return 0;
  }
  fill_header(&e->header, type, pid, tid, bpf_ktime_get_ns());
  e->ringbuf_drops = 0;
  e->cpu_tail_ns = 0;
  e->task_flags = 0;
  e->cpu_excess_ns = 0;
  return e;
}

// Whether `prev`, being switched out, is dead: its last switch-out (do_task_dead).
static __always_inline int task_is_dead(struct task_struct* prev) {
  if (bpf_core_field_exists(prev->__state)) return BPF_CORE_READ(prev, __state) == TASK_DEAD;
  struct task_struct___pre_5_14* old = (void*)prev;
  return BPF_CORE_READ(old, state) == TASK_DEAD;
}

// The CPU-tail record of `task` (whose seeded state is `state`): its runtime since its last sample,
// which becomes the state's baseline, or how far that sample's was ahead of it. `even_zero`: sent when
// there is neither too.
static __always_inline void emit_cpu_tail(struct task_struct* task, struct hpd_thread_state* state, __s32 pid,
                                          __s32 tid, int even_zero) {
  const __u64 runtime = BPF_CORE_READ(task, se.sum_exec_runtime);
  if (!even_zero && runtime == state->last_runtime_ns) return;
  struct hpd_task_event* e = reserve_task_event(HPD_EVENT_CPU_TAIL, pid, tid);
  if (!e) return;
  if (runtime > state->last_runtime_ns) {
    e->cpu_tail_ns = runtime - state->last_runtime_ns;
    state->last_runtime_ns = runtime;
  } else if (runtime < state->last_runtime_ns) {
    // The final runtime is exact; a sample's, brought up to its instant, counted time that was not
    // the thread's. Said once: the baseline comes down to the final value.
    const __u64 excess = state->last_runtime_ns - runtime;
    e->cpu_excess_ns = excess > 0xffffffffull ? 0xffffffffu : (__u32)excess;
    state->last_runtime_ns = runtime;
  }
  BPF_CORE_READ_STR_INTO(&e->header.comm, task, comm);
  bpf_ringbuf_submit(e, submit_flags());
}

// The CPU time a dying thread used since its last sample, reported at its last switch-out, where the
// scheduler has just brought its runtime up to date for the last time. Not left to hpd_free: the task
// is freed after an RCU grace period, which may come seconds later (lazy RCU) and so after the
// recording has ended, losing the thread's last stretch of CPU. Sent even when it is zero, as user
// space waits for it (hpd_exit's HPD_TASK_TAIL_FOLLOWS); when it does not fit, hpd_free tries again.
static __always_inline void emit_final_cpu_tail(struct task_struct* prev, __s32 pid, __s32 tid) {
  struct hpd_thread_state* state = bpf_map_lookup_elem(&threads, &tid);
  if (state && state->pid == pid && state->seeded) emit_cpu_tail(prev, state, pid, tid, 1);
}

// What the scheduler charges `next`, switched in at `now` after the wakeup that ended blocked record
// `b`, for its wait for a CPU: the scheduler set its exec_start to its run queue's clock_task when it
// picked it, and charges its runtime from there. That clock stood where the wakeup left it (b's
// charged_ns) unless the run queue updated it since: the wait less the time the clock moved on. 0
// without a wakeup, after a migration (another run queue's clock_task is not comparable), or when the
// clock moved on by the whole wait. The clock's steal during the wait (task time excludes it) is
// counted as charged: on this project's VM microseconds, against a wait of tens.
static __always_inline __u64 charged_for_wait(const struct hpd_sample_event* b, struct task_struct* next,
                                              __u64 now) {
  if (b->woken_ns == 0 || b->woken_ns >= now || b->charged_ns == 0) return 0;
  if (b->wake_cpu != bpf_get_smp_processor_id()) return 0;
  const __u64 exec_start = BPF_CORE_READ(next, se.exec_start);
  if (exec_start < b->charged_ns) return 0;
  const __u64 moved = exec_start - b->charged_ns;
  const __u64 wait = now - b->woken_ns;
  return moved < wait ? wait - moved : 0;
}

// tp_btf/sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next, ...).
// It runs in the context of `prev`, so the current task's stack is the one that is being switched out.
SEC("tp_btf/sched_switch")
int hpd_sched_switch(__u64* ctx) {
  // This runs at every context switch of the system: the clock is read only for target threads.
  struct task_struct* next = (struct task_struct*)ctx[2];
  __s32 next_tid = BPF_CORE_READ(next, pid);
  if (next_tid != 0) {
    struct hpd_sample_event* b = bpf_map_lookup_elem(&blocked, &next_tid);
    if (b) {
      // The threshold applies to the whole interval; user space splits a blocked one at woken_ns
      // (set by hpd_sched_wakeup) into its blocked part and its wait for a CPU.
      const __u64 now = bpf_ktime_get_ns();
      const __u64 away = now - b->header.time_ns;
      // Given to the record only when the thread's next on-CPU delta can leave it out: from a real
      // baseline (a guessed one holds no such time), and once the record is in the ring.
      struct hpd_thread_state* state = 0;
      __u64 charged = charged_for_wait(b, next, now);
      if (charged != 0) {
        state = bpf_map_lookup_elem(&threads, &next_tid);
        if (!state || !state->seeded || state->pid != b->header.pid) charged = 0;
      }
      b->charged_ns = charged;
      b->wake_cpu = 0;
      if (away >= off_cpu_min_ns) {
        b->off_cpu_ns = away;
        if (bpf_ringbuf_output(&events, b, sample_size(b), sample_submit_flags(b->flags)) != 0)
          count_drop(b->header.pid, next_tid);
        else if (state && charged != 0)
          state->last_runtime_ns += charged;
      }
      // Before the thread runs: user space takes an entry that is still here once it has read the
      // stack for a stack that did not change meanwhile.
      if (b->flags & HPD_SAMPLE_TABLES_PENDING) bpf_map_delete_elem(&pending_walks, &next_tid);
      bpf_map_delete_elem(&blocked, &next_tid);
    }
  }

  const __u64 id = bpf_get_current_pid_tgid();
  const __s32 pid = (__s32)(id >> 32);
  const __s32 tid = (__s32)id;
  struct task_struct* prev = (struct task_struct*)ctx[1];
  // Its last switch-outs: it never comes back. Looked at before the target test, as the last thread of
  // a process to exit has taken its pid out of the targets (hpd_exit).
  if (BPF_CORE_READ(prev, flags) & PF_EXITING) {
    if (task_is_dead(prev)) emit_final_cpu_tail(prev, pid, tid);
    return 0;
  }
  if (!is_target(pid)) return 0;
  const __u32 zero = 0;
  struct hpd_sample_event* e = bpf_map_lookup_elem(&scratch, &zero);
  if (!e) return 0;
  fill_header(&e->header, HPD_EVENT_OFF_CPU, pid, tid, bpf_ktime_get_ns());
  e->woken_ns = 0;
  e->charged_ns = 0;
  e->wake_cpu = 0;
  e->reserved = 0;
  // The scheduler brought it up to date before this tracepoint (update_curr of the switch-out).
  e->off_cpu_ns = BPF_CORE_READ(prev, se.sum_exec_runtime);
  e->flags = ctx[0] || task_is_running(prev) ? HPD_SAMPLE_PREEMPTED : 0;
  e->regs_valid = 0;
  e->stack_bytes = 0;
  // Off-CPU stacks are walked here (cfi tables or frame pointers) and kept with the record in `blocked`
  // until the thread runs again, which holds no stack copy (one per blocked thread would cost too much
  // kernel memory); dwarf mode's copy goes into the ring at once (emit_switch_stack), as does cfi mode's
  // when the walk met a table not published yet.
  const struct pt_regs* user = current_user_regs();
  e->flags |= in_syscall_flag(user);
  capture_stacks(ctx, e, TRACEPOINT_STACK_SKIP, user, 1);
  // A record of this thread still there: its switch-in went unseen (emit_unseen_switch_in). Looked for
  // only when the insertion finds it, so that a switch-out costs no second lookup.
  long err = bpf_map_update_elem(&blocked, &tid, e, BPF_NOEXIST);
  if (err == -EEXIST) {
    struct hpd_sample_event* stale = bpf_map_lookup_elem(&blocked, &tid);
    if (stale) emit_unseen_switch_in(stale, tid, e->off_cpu_ns, e->header.time_ns);
    err = bpf_map_update_elem(&blocked, &tid, e, BPF_ANY);
  }
  if (err != 0) {
    count(HPD_COUNTER_OFFCPU_MAP_FULL);
    return 0;
  }
  if (user && switch_stack_copy && stack_copy_bytes != 0)
    emit_switch_stack(&e->header, user, stack_copy_bytes);
  else if (user && wants_pending_copy(e))
    emit_switch_stack(&e->header, user, pending_stack_copy_bytes);
  if (user && (e->flags & HPD_SAMPLE_TABLES_PENDING)) {
    struct hpd_pending_walk walk = {
        .time_ns = e->header.time_ns, .ip = uprobe_xol_real_ip(user->ip), .sp = user->sp, .bp = user->bp,
        .pid = pid, .di = user->di};
    bpf_map_update_elem(&pending_walks, &tid, &walk, BPF_ANY);
  }
  return 0;
}

// tp_btf/sched_wakeup(struct task_struct *p): p, which blocked, is runnable again and queued for a
// CPU (after the switch-out's record is in `blocked`: a waker waits until p is off its CPU). Runs in
// whatever task woke p (or in an interrupt), on any CPU, for every wakeup of the system. Only the
// first wakeup of a blocked interval counts: p cannot be woken again before it runs. New tasks
// (sched_wakeup_new) never have a blocked record, so that tracepoint is not traced.
SEC("tp_btf/sched_wakeup")
int hpd_sched_wakeup(__u64* ctx) {
  struct task_struct* p = (struct task_struct*)ctx[0];
  // A tp_btf argument is a trusted pointer: a plain load, not a helper call, on every wakeup.
  __s32 tid = p->pid;
  if (tid == 0) return 0;
  struct hpd_sample_event* b = bpf_map_lookup_elem(&blocked, &tid);
  // A runnable switch-out waits for a CPU from its start; its record keeps woken_ns 0.
  if (!b || (b->flags & HPD_SAMPLE_PREEMPTED) || b->woken_ns != 0) return 0;
  b->woken_ns = bpf_ktime_get_ns();
  // The run queue p was queued on has just had its clock updated (ttwu): where the scheduler will
  // charge p's runtime from if no update comes before p runs (hpd_sched_switch).
  if (bpf_core_field_exists(p->se.cfs_rq) && bpf_core_field_exists(struct cfs_rq, rq) &&
      bpf_core_field_exists(struct rq, cpu)) {
    const struct rq* rq = BPF_CORE_READ(p, se.cfs_rq, rq);
    if (rq) {
      b->charged_ns = BPF_CORE_READ(rq, clock_task);
      b->wake_cpu = BPF_CORE_READ(rq, cpu);
    }
  }
  return 0;
}

// tp_btf/sched_process_fork(struct task_struct *parent, struct task_struct *child); runs in the parent.
SEC("tp_btf/sched_process_fork")
int hpd_fork(__u64* ctx) {
  const __u64 id = bpf_get_current_pid_tgid();
  const __s32 parent_pid = (__s32)(id >> 32);
  if (!is_target(parent_pid)) return 0;
  struct task_struct* child = (struct task_struct*)ctx[1];
  const __s32 child_pid = BPF_CORE_READ(child, tgid);
  const __s32 child_tid = BPF_CORE_READ(child, pid);
  if (child_pid != parent_pid && filter_mode == HPD_FILTER_PIDS) {
    if (!follow_children) return 0;
    const __u8 yes = 1;
    bpf_map_update_elem(&targets, &child_pid, &yes, BPF_ANY);
  }
  // A new task's sum_exec_runtime starts at zero: an exact baseline for its first sample.
  struct hpd_thread_state state = {.pid = child_pid, .seeded = 1};
  if (bpf_map_update_elem(&threads, &child_tid, &state, BPF_ANY) != 0) count(HPD_COUNTER_THREAD_MAP_FULL);

  struct hpd_fork_event* e = bpf_ringbuf_reserve(&events, sizeof *e, 0);
  if (!e) {
    count_drop(child_pid, child_tid);
    return 0;
  }
  e->header.type = HPD_EVENT_FORK;
  e->header.cpu = bpf_get_smp_processor_id();
  e->header.pid = child_pid;
  e->header.tid = child_tid;
  e->header.time_ns = bpf_ktime_get_ns();
  BPF_CORE_READ_STR_INTO(&e->header.comm, child, comm);
  e->parent_pid = parent_pid;
  e->parent_tid = (__s32)id;
  bpf_ringbuf_submit(e, submit_flags());
  return 0;
}

// tp_btf/sched_process_exec(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm); the comm
// is already the new program's.
SEC("tp_btf/sched_process_exec")
int hpd_exec(__u64* ctx) {
  const __u64 id = bpf_get_current_pid_tgid();
  const __s32 pid = (__s32)(id >> 32);
  if (!is_target(pid)) return 0;
  // The new credentials are committed before this tracepoint: a process the client may not trace
  // leaves the targets here, so that none of its samples (on or off the CPU) is taken from now on.
  __u32 task_flags = 0;
  if (restrict_creds && filter_mode == HPD_FILTER_PIDS && !hpd_runs_as_client((struct task_struct*)ctx[0], client_uid, client_gid)) {
    bpf_map_delete_elem(&targets, &pid);
    __s32 tid = (__s32)id;
    bpf_map_delete_elem(&blocked, &tid);
    task_flags = HPD_TASK_UNFOLLOWED;
  }
  // The old image's mappings are gone, and so are its rows' meaning: a pc of the new image that lies
  // where the old one had code (two non-PIE programs, both at 0x400000) would be walked with the old
  // code's rows into frames that never were. Until user space publishes the new image, the process's
  // walks find no mappings: their samples are taken as those of a process not published yet (a copy of
  // the stack, walked again once it is).
  if (cfi_unwind) bpf_map_delete_elem(&proc_mappings, &pid);
  struct hpd_task_event* e = reserve_task_event(HPD_EVENT_EXEC, pid, (__s32)id);
  if (!e) return 0;
  e->task_flags = task_flags;
  bpf_ringbuf_submit(e, submit_flags());
  return 0;
}

// Whether an exit program of this CPU is building its record (in sample_scratch's exit entry of the CPU,
// exit_scratch_index): unlike the scheduler's programs it may be preempted (by another exiting thread
// of this CPU, which then takes no exit stack), and the timer's program may interrupt it (it has an
// entry of its own).
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u32);
} exit_busy SEC(".maps");

// Where the exiting thread is (its kernel stack from do_exit, its user stack from the call that made
// it exit): the CPU time after its last timer sample, which its last switch-out reports
// (emit_final_cpu_tail), is spent here and on the rest of the exit, not where that sample was.
static __always_inline void emit_exit_stack(void* ctx, __s32 pid, __s32 tid) {
  const __u32 zero = 0;
  __u32* busy = bpf_map_lookup_elem(&exit_busy, &zero);
  if (!busy || *busy) return;
  *busy = 1;
  const __u32 slot = exit_scratch_index();
  struct hpd_sample_event* e = bpf_map_lookup_elem(&sample_scratch, &slot);
  if (e) {
    fill_header(&e->header, HPD_EVENT_EXIT_STACK, pid, tid, bpf_ktime_get_ns());
    e->cpu_delta_ns = 0;
    e->off_cpu_ns = 0;
    e->charged_ns = 0;
    e->wake_cpu = 0;
    e->reserved = 0;
    e->regs_valid = 0;
    e->stack_bytes = 0;
    const struct pt_regs* user = current_user_regs();
    e->flags = in_syscall_flag(user);
    capture_stacks(ctx, e, TRACEPOINT_STACK_SKIP, user, 2);
    __u64 size = sample_size(e);
    // cfi mode: a walk that met a table not published yet (a process that lived a millisecond, whose
    // tables were still being compiled) is done again by user space, as an on-CPU sample's is.
    if (user && wants_pending_copy(e) && !ring_too_full_for_copies() && size <= sizeof(struct hpd_sample_event)) {
      copy_user_regs(e, user);
      __u64 copied = copy_user_stack(slot, size, e->regs[7], pending_stack_copy_bytes);
      if (copied > pending_stack_copy_bytes) copied = 0;  // never: the bound the verifier needs
      e->stack_bytes = (__u32)copied;
      size += copied;
    }
    if (bpf_ringbuf_output(&events, e, size, submit_flags()) != 0) count_drop(pid, tid);
  }
  *busy = 0;
}

// tp_btf/sched_process_exit(struct task_struct *p, ...); runs in the exiting thread. The thread's
// record of drops leaves the map with its exit record; when that record itself does not fit, the
// state stays (with one more drop) for user space to collect when the recording ends.
SEC("tp_btf/sched_process_exit")
int hpd_exit(__u64* ctx) {
  const __u64 id = bpf_get_current_pid_tgid();
  const __s32 pid = (__s32)(id >> 32);
  __s32 tid = (__s32)id;
  struct task_struct* task = (struct task_struct*)ctx[0];
  // Its record is there only if its last switch-in went unseen: it ran from then until this exit.
  struct hpd_sample_event* stale = bpf_map_lookup_elem(&blocked, &tid);
  if (stale) {
    emit_unseen_switch_in(stale, tid, BPF_CORE_READ(task, se.sum_exec_runtime), bpf_ktime_get_ns());
    bpf_map_delete_elem(&blocked, &tid);
  }
  // Every thread of the process has begun to exit (signal->live is decremented before this
  // tracepoint): its pid leaves the targets now, before it can be reaped and given to another
  // process, which would otherwise be sampled as this one.
  const int group_dead =
      filter_mode == HPD_FILTER_PIDS && BPF_CORE_READ(task, signal, live.counter) == 0;
  int target = is_target(pid);
  if (!target && group_dead) {
    // A sibling thread, exiting at the same time, took the pid out a moment ago: this thread is still
    // the target's (in pid mode only targets' threads have a state).
    struct hpd_thread_state* state = bpf_map_lookup_elem(&threads, &tid);
    target = state && state->pid == pid;
  }
  if (!target) {
    bpf_map_delete_elem(&threads, &tid);
    return 0;
  }
  emit_exit_stack(ctx, pid, tid);
  if (timed_entries_shared) bpf_map_delete_elem(&timed_entries, &tid);
  if (group_dead) bpf_map_delete_elem(&targets, &pid);
  struct hpd_task_event* e = reserve_task_event(HPD_EVENT_EXIT, pid, tid);
  if (!e) return 0;
  struct hpd_thread_state* state = bpf_map_lookup_elem(&threads, &tid);
  if (state) {
    // Reported here; the state stays for the thread's last switch-out (or hpd_free), which reports its
    // last CPU time.
    e->ringbuf_drops = state->ringbuf_drops;
    state->ringbuf_drops = 0;
    if (state->seeded) e->task_flags |= HPD_TASK_TAIL_FOLLOWS;
  }
  bpf_ringbuf_submit(e, submit_flags());
  return 0;
}

// tp_btf/sched_process_free(struct task_struct *p); runs when the task is freed (after an RCU grace
// period, in whatever context), after its last context switch: its sum_exec_runtime is final. What its
// last switch-out did not report (its record did not fit, or the thread had no state then).
SEC("tp_btf/sched_process_free")
int hpd_free(__u64* ctx) {
  struct task_struct* p = (struct task_struct*)ctx[0];
  __s32 tid = BPF_CORE_READ(p, pid);
  struct hpd_thread_state* state = bpf_map_lookup_elem(&threads, &tid);
  if (!state) return 0;
  if (state->seeded) emit_cpu_tail(p, state, state->pid, tid, 0);
  bpf_map_delete_elem(&threads, &tid);
  return 0;
}

// The first write to each page of the ring through the kernel's mapping is slow on some virtual
// machines (6-12 us a page on the project's PVM guest, docs/performance.md): a fresh 64 MiB ring
// charged one such write to nearly every 4 KiB sample of the target. This program, run once by user
// space before any event is attached, writes every page's first bytes: one record of a page (with
// its 8-byte header) is reserved and discarded per page, so the ring ends full of discarded records,
// which user space consumes before attaching. Returns the pages touched.
static long warm_page(__u32 index, void* ctx) {
  void* record = bpf_ringbuf_reserve(&events, PAGE_BYTES - 8, 0);
  // The ring never holds a whole ring of data, so the last page takes a small record.
  const int last = record == 0;
  if (last) record = bpf_ringbuf_reserve(&events, 8, 0);
  if (!record) return 1;
  bpf_ringbuf_discard(record, BPF_RB_NO_WAKEUP);
  *(__u32*)ctx += 1;
  return last;
}

SEC("syscall")
int hpd_warm_ring(void* ctx) {
  __u32 touched = 0;
  bpf_loop(warm_pages, warm_page, &touched, 0);
  return (int)touched;
}

#include "attach_state.bpf.h"
