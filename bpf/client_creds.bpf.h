// Whether a task runs with exactly the credentials of the client a recording is for: the check that
// decides, at an exec, whether a target stays followed (profile.bpf.c, alloc.bpf.c). Needs
// vmlinux.h and bpf_core_read.h first.
#pragma once

// Whether every real, effective, saved and filesystem id of `p` is the client's: the credentials the
// kernel's PTRACE_MODE_READ check compares (a set-user-ID exec changes the effective and saved ones).
static __always_inline int hpd_runs_as_client(struct task_struct* p, __u32 uid, __u32 gid) {
  const struct cred* c = BPF_CORE_READ(p, cred);
  return BPF_CORE_READ(c, uid.val) == uid && BPF_CORE_READ(c, euid.val) == uid &&
         BPF_CORE_READ(c, suid.val) == uid && BPF_CORE_READ(c, fsuid.val) == uid &&
         BPF_CORE_READ(c, gid.val) == gid && BPF_CORE_READ(c, egid.val) == gid &&
         BPF_CORE_READ(c, sgid.val) == gid && BPF_CORE_READ(c, fsgid.val) == gid;
}
