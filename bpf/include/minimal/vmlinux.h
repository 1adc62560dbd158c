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

struct sched_entity {
  u64 sum_exec_runtime;
};

struct task_struct {
  unsigned int flags;
  struct sched_entity se;
  pid_t pid;
  pid_t tgid;
  char comm[16];
};

#pragma clang attribute pop

#endif
