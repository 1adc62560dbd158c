/* The few kernel types hpd's BPF programs read, for builds on machines without kernel BTF.
 * preserve_access_index makes every field access a CO-RE relocation, resolved against the running
 * kernel's BTF when the programs are loaded; only the fields used need to be declared. */
#ifndef HPD_MINIMAL_VMLINUX_H
#define HPD_MINIMAL_VMLINUX_H

#include <linux/types.h>
#include <linux/bpf.h>

typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __s32 s32;
typedef __s64 s64;
typedef int pid_t;

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct rq {
  u64 clock;
  u64 clock_task;
  u64 prev_steal_time_rq;
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

struct task_struct {
  unsigned int flags;
  struct sched_entity se;
  pid_t pid;
  pid_t tgid;
  char comm[16];
  const struct cred* cred;
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

#pragma clang attribute pop

/* The perf_event program context (UAPI, rewritten by the verifier: no CO-RE relocation). */
struct bpf_perf_event_data {
  struct pt_regs regs;
  __u64 sample_period;
  __u64 addr;
};

#endif
