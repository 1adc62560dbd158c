/* The few kernel types hpd's BPF programs read, for builds on machines without kernel BTF.
 * preserve_access_index makes every field access a CO-RE relocation, resolved against the running
 * kernel's BTF when the programs are loaded; only the fields used need to be declared. */
#ifndef HPD_MINIMAL_VMLINUX_H
#define HPD_MINIMAL_VMLINUX_H
/* bpftool's vmlinux.h defines this: bpf_tracing.h then names pt_regs' fields as the kernel does (di, not
 * the UAPI's rdi). */
#define __VMLINUX_H__ 1

#include <linux/types.h>
#include <linux/bpf.h>

typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __s32 s32;
typedef __s64 s64;
typedef int pid_t;
typedef u32 dev_t;
typedef u32 uid_t;
typedef u32 gid_t;
typedef _Bool bool;
enum {
  false = 0,
  true = 1,
};

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct task_struct;

struct rq {
  struct task_struct* curr;
  u64 clock;
  u64 clock_task;
  u64 prev_steal_time_rq;
  int cpu;
};

struct cfs_rq {
  struct rq* rq;
};

struct sched_entity {
  u64 exec_start;
  u64 sum_exec_runtime;
  struct cfs_rq* cfs_rq;
};

typedef struct {
  s64 counter;
} atomic64_t;
typedef atomic64_t atomic_long_t;
typedef struct {
  atomic_long_t a;
} local_t;
typedef struct {
  local_t a;
} local64_t;

struct perf_event_attr {
  u32 type;
  u64 config;
};

struct hw_perf_event {
  local64_t prev_count;
};

struct perf_event_context {
  u64 time;
  u64 timestamp;
};

struct perf_event {
  struct perf_event_attr attr;
  struct hw_perf_event hw;
  struct perf_event_context* ctx;
};

/* What a perf_event program's context really points to (bpf_cast_to_kern_ctx). */
struct bpf_perf_event_data_kern {
  void* regs;
  void* data;
  struct perf_event* event;
};

typedef struct {
  u32 val;
} kuid_t;

typedef struct {
  u32 val;
} kgid_t;

struct cred {
  kuid_t uid;
  kgid_t gid;
  kuid_t suid;
  kgid_t sgid;
  kuid_t euid;
  kgid_t egid;
  kuid_t fsuid;
  kgid_t fsgid;
};

typedef struct {
  int counter;
} atomic_t;

struct thread_info {
  u32 cpu;
};

/* x86-64 */
struct thread_struct {
  unsigned long fsbase;
};

struct return_instance {
  unsigned long stack;
  unsigned long orig_ret_vaddr;
  struct return_instance* next;
};

struct uprobe_task {
  unsigned long vaddr;
  unsigned long xol_vaddr;
  struct return_instance* return_instances;
};

struct xol_area {
  unsigned long vaddr;
};

struct uprobes_state {
  struct xol_area* xol_area;
};

struct mm_struct {
  struct uprobes_state uprobes_state;
};

struct super_block {
  dev_t s_dev;
};

struct inode {
  unsigned long i_ino;
  struct super_block* i_sb;
};

struct file {
  struct inode* f_inode;
};

struct vm_area_struct {
  unsigned long vm_start;
  unsigned long vm_end;
  unsigned long vm_pgoff;
  struct file* vm_file;
  const void* vm_ops;
};

struct signal_struct {
  atomic_t live;
};

struct task_struct {
  struct thread_info thread_info;
  unsigned int __state;
  unsigned int flags;
  int on_cpu;
  struct sched_entity se;
  struct mm_struct* mm;
  pid_t pid;
  pid_t tgid;
  unsigned long nvcsw;
  unsigned long nivcsw;
  const struct cred* cred;
  char comm[16];
  struct signal_struct* signal;
  struct uprobe_task* utask;
  struct thread_struct thread;
};

/* x86-64 */
struct pt_regs {
  unsigned long r15;
  unsigned long r14;
  unsigned long r13;
  unsigned long r12;
  unsigned long bp;
  unsigned long bx;
  unsigned long r11;
  unsigned long r10;
  unsigned long r9;
  unsigned long r8;
  unsigned long ax;
  unsigned long cx;
  unsigned long dx;
  unsigned long si;
  unsigned long di;
  unsigned long orig_ax;
  unsigned long ip;
  unsigned long cs;
  unsigned long flags;
  unsigned long sp;
  unsigned long ss;
};

struct bpf_iter_meta {
  struct seq_file* seq;
  u64 session_id;
  u64 seq_num;
};

/* An iter/task program's context. */
struct bpf_iter__task {
  struct bpf_iter_meta* meta;
  struct task_struct* task;
};

#pragma clang attribute pop

/* The perf_event program context (UAPI, rewritten by the verifier: no CO-RE relocation). */
struct bpf_perf_event_data {
  struct pt_regs regs;
  __u64 sample_period;
  __u64 addr;
};

#endif
