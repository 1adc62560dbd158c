// hpd's call counter: one program attached (as uprobe_multi links) to every mcount/__fentry__ probe
// point of the target's modules, counting (tgid, caller, callee) edges in a per-CPU hash map.
// The attach cookie of each site says where caller and callee are (enum hpd_calls_mode).
// Sites at a function's first instruction are attached in session mode instead when the kernel has
// it (Linux 6.13): the same count at the entry, and the call's latency at its return.
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "calls_event.h"
#include "client_creds.bpf.h"
#include "timed_entry.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile __u32 follow_children = 1;
// For a client who may trace only processes running with their own credentials (a user's session
// through hpd; hpd_calls_exec is attached only then): the ids a target must keep across an exec.
const volatile __u32 client_uid = 0;
const volatile __u32 client_gid = 0;
// 1: timed_entries is the sampling programs' map (timed_entry.bpf.h): each timed call's entry is kept
// there for their walks. Without a recording that walks stacks nobody reads it, and it is not written.
const volatile __u32 share_timed_entries = 0;

// Weak: on a kernel without uprobe sessions the counting program still loads (the timing one not).
extern bool bpf_session_is_return(void) __ksym __weak;
extern __u64* bpf_session_cookie(void) __ksym __weak;

// Target processes (tgid); followed children are added by hpd_calls_fork.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 8192);
  __type(key, __s32);
  __type(value, __u8);
} call_targets SEC(".maps");

// Targets that left at an exec (hpd_calls_exec), so that user space tells them from exited ones.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 1024);
  __type(key, __s32);
  __type(value, __u8);
} call_left SEC(".maps");

// Per-CPU counts: the hot path never contends on a shared cache line.
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, 65536);
  __type(key, struct hpd_call_edge_key);
  __type(value, __u64);
} call_edges SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, HPD_CALLS_COUNTER_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} call_counters SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, struct hpd_call_vma_key);
  __type(value, struct hpd_call_vma);
} call_vmas SEC(".maps");

// Per (tgid, function): calls timed, their sum, outermost sum and max (per CPU).
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, 32768);
  __type(key, struct hpd_call_fn_key);
  __type(value, struct hpd_call_latency);
} call_latency SEC(".maps");

// Per (tgid, function, bucket): calls (per CPU).
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, 131072);
  __type(key, struct hpd_call_hist_key);
  __type(value, __u64);
} call_hist SEC(".maps");

// Per (thread, function): activations not yet returned; an entry exists only while one is.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 65536);
  __type(key, struct hpd_call_depth_key);
  __type(value, __u32);
} call_depths SEC(".maps");

struct vma_walk {
  __s32 pid;
};

static long record_vma(struct task_struct* task, struct vm_area_struct* vma, void* data) {
  struct hpd_call_vma_key key = {.pid = ((struct vma_walk*)data)->pid, .start = vma->vm_start};
  struct hpd_call_vma v = {.end = vma->vm_end, .pgoff = vma->vm_pgoff};
  struct file* file = vma->vm_file;
  if (file) {
    v.ino = BPF_CORE_READ(file, f_inode, i_ino);
    const __u32 dev = BPF_CORE_READ(file, f_inode, i_sb, s_dev);
    v.dev_major = dev >> 20;
    v.dev_minor = dev & 0xfffff;
  }
  bpf_map_update_elem(&call_vmas, &key, &v, BPF_NOEXIST);
  return 0;
}

// Once per new edge (not per call): where its two addresses are mapped.
static __always_inline void record_edge_vmas(const struct hpd_call_edge_key* key) {
  struct vma_walk walk = {.pid = key->pid};
  struct task_struct* task = bpf_get_current_task_btf();
  bpf_find_vma(task, key->caller, record_vma, &walk, 0);
  bpf_find_vma(task, key->callee, record_vma, &walk, 0);
}

static __always_inline void count(__u32 which) {
  __u64* v = bpf_map_lookup_elem(&call_counters, &which);
  if (v) *v += 1;
}

// Counts the call at a probe site of a target; the callee, or 0 when the call was not counted. The
// return address into the caller (or glibc's hook's frompc) into *caller.
static __always_inline __u64 count_call(struct pt_regs* ctx, __s32 tgid, __u32 hit_counter, __u64* caller) {
  const __u64 cookie = bpf_get_attach_cookie(ctx);
  const __u64 mode = cookie & 0xff;
  count(hit_counter);
  struct hpd_call_edge_key key = {.pid = tgid};
  if (mode == HPD_CALLS_MCOUNT_INTERNAL) {
    key.caller = PT_REGS_PARM1(ctx);
    key.callee = PT_REGS_PARM2(ctx);
  } else {
    key.callee = PT_REGS_IP(ctx);
    const __u64 slot = mode == HPD_CALLS_AT_ENTRY ? PT_REGS_SP(ctx) : PT_REGS_FP(ctx) + 8;
    if (bpf_probe_read_user(&key.caller, sizeof key.caller, (const void*)slot) != 0) {
      count(HPD_CALLS_READ_FAILED);
      return 0;
    }
  }
  *caller = key.caller;
  __u64* n = bpf_map_lookup_elem(&call_edges, &key);
  if (n) {
    *n += 1;
    return key.callee;
  }
  const __u64 one = 1;
  if (bpf_map_update_elem(&call_edges, &key, &one, BPF_NOEXIST) == 0) {
    record_edge_vmas(&key);
    return key.callee;
  }
  // Another call on this CPU cannot have raced us (per-CPU, no preemption inside the program), but
  // another CPU may have created the key: its slot for this CPU exists now.
  n = bpf_map_lookup_elem(&call_edges, &key);
  if (n) {
    *n += 1;
    return key.callee;
  }
  count(HPD_CALLS_MAP_FULL);
  return 0;
}

// Loaded with expected_attach_type BPF_TRACE_UPROBE_MULTI by user space (libbpf 1.1 does not know
// the "uprobe.multi" section name).
SEC("uprobe")
int hpd_count_call(struct pt_regs* ctx) {
  const __s32 tgid = (__s32)(bpf_get_current_pid_tgid() >> 32);
  if (!bpf_map_lookup_elem(&call_targets, &tgid)) {
    count(HPD_CALLS_OTHER_HITS);
    return 0;
  }
  const __u32 kind = (bpf_get_attach_cookie(ctx) >> 8) & 0xff;
  __u64 caller = 0;
  count_call(ctx, tgid, kind <= HPD_CALLS_HITS_CALL ? kind : HPD_CALLS_HITS_CALL, &caller);
  return 0;
}

// The bucket of a latency of `v` ns: preload_abi.h's hpd_calls_hist_bucket, without a clz builtin.
static __always_inline __u32 hist_bucket(__u64 v) {
  if (v < 16) return (__u32)v;
  __u32 e = 0;
  __u64 x = v;
  if (x >> 32) {
    e += 32;
    x >>= 32;
  }
  if (x >> 16) {
    e += 16;
    x >>= 16;
  }
  if (x >> 8) {
    e += 8;
    x >>= 8;
  }
  if (x >> 4) {
    e += 4;
    x >>= 4;
  }
  if (x >> 2) {
    e += 2;
    x >>= 2;
  }
  if (x >> 1) {
    e += 1;
  }
  if (e > 47) return (47 - 4 + 2) * 16 - 1;
  return (e - 4 + 1) * 16 + (__u32)((v >> (e - 4)) & 15);
}

// The return of a timed call: its latency into the function's sums and histogram.
static __always_inline void on_timed_return(struct pt_regs* ctx) {
  __u64* cookie = bpf_session_cookie();
  if (!cookie || *cookie == 0) return;
  const __u64 now = bpf_ktime_get_ns();
  const __u64 start = *cookie >> 1;
  const __u64 outer = *cookie & 1;
  const __u64 ns = now > start ? now - start : 0;
  const __u64 pid_tgid = bpf_get_current_pid_tgid();
  const __u64 callee = bpf_get_func_ip(ctx);  // the probed entry, as at the entry
  struct hpd_call_depth_key dk = {.tid = (__u32)pid_tgid, .callee = callee};
  __u32* depth = bpf_map_lookup_elem(&call_depths, &dk);
  if (depth) {
    if (*depth <= 1)
      bpf_map_delete_elem(&call_depths, &dk);
    else
      *depth -= 1;
  }
  struct hpd_call_fn_key key = {.pid = (__s32)(pid_tgid >> 32), .callee = callee};
  struct hpd_call_latency* l = bpf_map_lookup_elem(&call_latency, &key);
  if (!l) {
    const struct hpd_call_latency zero = {};
    bpf_map_update_elem(&call_latency, &key, &zero, BPF_NOEXIST);
    l = bpf_map_lookup_elem(&call_latency, &key);
    if (!l) {
      count(HPD_CALLS_NOT_TIMED);
      return;
    }
  }
  l->calls += 1;
  l->sum_ns += ns;
  if (outer) l->outer_ns += ns;
  if (ns > l->max_ns) l->max_ns = ns;
  struct hpd_call_hist_key hk = {.pid = key.pid, .bucket = hist_bucket(ns), .callee = callee};
  __u64* n = bpf_map_lookup_elem(&call_hist, &hk);
  if (n) {
    *n += 1;
    return;
  }
  const __u64 one = 1;
  if (bpf_map_update_elem(&call_hist, &hk, &one, BPF_NOEXIST) != 0) {
    n = bpf_map_lookup_elem(&call_hist, &hk);
    if (n)
      *n += 1;
    else
      count(HPD_CALLS_NOT_TIMED);
  }
}

// Sites at a function's first instruction, in session mode (expected_attach_type
// BPF_TRACE_UPROBE_SESSION, set by user space): at the entry, the call is counted as hpd_count_call
// counts it and its start kept in the session's cookie (bit 0: the outermost activation of the
// function on this thread); returning 0 has the kernel run the program again at the call's return.
// The cookie belongs to this one activation, so recursion and other threads cannot mix starts up.
SEC("uprobe")
int hpd_time_call(struct pt_regs* ctx) {
  if (bpf_session_is_return()) {
    on_timed_return(ctx);
    return 0;
  }
  const __u64 pid_tgid = bpf_get_current_pid_tgid();
  const __s32 tgid = (__s32)(pid_tgid >> 32);
  if (!bpf_map_lookup_elem(&call_targets, &tgid)) {
    count(HPD_CALLS_OTHER_HITS);
    return 1;  // no return probe for other processes
  }
  const __u32 kind = (bpf_get_attach_cookie(ctx) >> 8) & 0xff;
  __u64 caller = 0;
  const __u64 callee = count_call(
      ctx, tgid, kind == HPD_CALLS_HITS_NOP1 ? HPD_CALLS_HITS_NOP1_TIMED : HPD_CALLS_HITS_NOP5_TIMED, &caller);
  if (callee == 0) return 1;
  __u64* cookie = bpf_session_cookie();
  if (!cookie) return 1;
  struct hpd_call_depth_key dk = {.tid = (__u32)pid_tgid, .callee = callee};
  __u64 outer = 0;
  __u32* depth = bpf_map_lookup_elem(&call_depths, &dk);
  if (depth) {
    *depth += 1;
  } else {
    const __u32 one = 1;
    outer = bpf_map_update_elem(&call_depths, &dk, &one, BPF_NOEXIST) == 0;
  }
  *cookie = (bpf_ktime_get_ns() << 1) | outer;
  if (share_timed_entries && (bpf_get_attach_cookie(ctx) & 0xff) == HPD_CALLS_AT_ENTRY) {
    // The slot and its return address, before the kernel puts its trampoline there (after this
    // program returns 0): the window's samples take the original from here (timed_entry.bpf.h).
    const __u32 tid = (__u32)pid_tgid;
    struct hpd_timed_entry* t = bpf_map_lookup_elem(&timed_entries, &tid);
    if (t) {
      t->slot = PT_REGS_SP(ctx);
      t->ret = caller;
    } else {
      const struct hpd_timed_entry fresh = {.slot = PT_REGS_SP(ctx), .ret = caller};
      bpf_map_update_elem(&timed_entries, &tid, &fresh, BPF_ANY);
    }
  }
  return 0;
}

// tp_btf/sched_process_fork(struct task_struct *parent, struct task_struct *child); runs in the parent.
SEC("tp_btf/sched_process_fork")
int hpd_calls_fork(__u64* ctx) {
  if (!follow_children) return 0;
  const __s32 parent = (__s32)(bpf_get_current_pid_tgid() >> 32);
  if (!bpf_map_lookup_elem(&call_targets, &parent)) return 0;
  struct task_struct* child = (struct task_struct*)ctx[1];
  const __s32 child_pid = BPF_CORE_READ(child, tgid);
  if (child_pid == parent) return 0;
  const __u8 yes = 1;
  bpf_map_update_elem(&call_targets, &child_pid, &yes, BPF_ANY);
  return 0;
}

// tp_btf/sched_process_exec(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm), attached
// only for a restricted client: the new credentials are committed before it fires. A target that
// executes a program with other credentials (a set-user-ID one) stops being counted before that
// program's first instruction, and user space no longer probes its modules.
SEC("tp_btf/sched_process_exec")
int hpd_calls_exec(__u64* ctx) {
  const __s32 tgid = (__s32)(bpf_get_current_pid_tgid() >> 32);
  if (!bpf_map_lookup_elem(&call_targets, &tgid)) return 0;
  if (hpd_runs_as_client((struct task_struct*)ctx[0], client_uid, client_gid)) return 0;
  const __u8 yes = 1;
  bpf_map_update_elem(&call_left, &tgid, &yes, BPF_ANY);
  bpf_map_delete_elem(&call_targets, &tgid);
  return 0;
}
