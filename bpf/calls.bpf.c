// hpd's call counter: one program attached (as uprobe_multi links) to every mcount/__fentry__ probe
// point of the target's modules, counting (tgid, caller, callee) edges in a per-CPU hash map.
// The attach cookie of each site says where caller and callee are (enum hpd_calls_mode).
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "calls_event.h"

char LICENSE[] SEC("license") = "GPL";

const volatile __u32 follow_children = 1;

// Target processes (tgid); followed children are added by hpd_calls_fork.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 8192);
  __type(key, __s32);
  __type(value, __u8);
} call_targets SEC(".maps");

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

// Loaded with expected_attach_type BPF_TRACE_UPROBE_MULTI by user space (libbpf 1.1 does not know
// the "uprobe.multi" section name).
SEC("uprobe")
int hpd_count_call(struct pt_regs* ctx) {
  const __s32 tgid = (__s32)(bpf_get_current_pid_tgid() >> 32);
  if (!bpf_map_lookup_elem(&call_targets, &tgid)) {
    count(HPD_CALLS_OTHER_HITS);
    return 0;
  }
  const __u64 cookie = bpf_get_attach_cookie(ctx);
  const __u64 mode = cookie & 0xff;
  const __u32 kind = (cookie >> 8) & 0xff;
  count(kind <= HPD_CALLS_HITS_CALL ? kind : HPD_CALLS_HITS_CALL);
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
  __u64* n = bpf_map_lookup_elem(&call_edges, &key);
  if (n) {
    *n += 1;
    return 0;
  }
  const __u64 one = 1;
  if (bpf_map_update_elem(&call_edges, &key, &one, BPF_NOEXIST) == 0) {
    record_edge_vmas(&key);
    return 0;
  }
  // Another call on this CPU cannot have raced us (per-CPU, no preemption inside the program), but
  // another CPU may have created the key: its slot for this CPU exists now.
  n = bpf_map_lookup_elem(&call_edges, &key);
  if (n)
    *n += 1;
  else
    count(HPD_CALLS_MAP_FULL);
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
