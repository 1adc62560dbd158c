/* Records the hpd BPF programs write into their ring buffer; shared by the programs and the daemon.
 * Fixed-width fields only, laid out without implicit padding, so both compilers agree on offsets. */
#ifndef HPD_BPF_PROFILE_EVENT_H
#define HPD_BPF_PROFILE_EVENT_H

#ifndef __bpf__
#include <linux/types.h>
#endif

#define HPD_COMM_LEN 16
#define HPD_MAX_KERNEL_FRAMES 48
/* User frames per stack: enough for a 200-deep recursion under a runtime's start-up frames. */
#define HPD_MAX_USER_FRAMES 256
#define HPD_MAX_FRAMES (HPD_MAX_KERNEL_FRAMES + HPD_MAX_USER_FRAMES)
/* User registers of a sample, by x86-64 DWARF number (rax, rdx, rcx, rbx, rsi, rdi, rbp, rsp,
 * r8-r15, rip), as hpd::UserRegs holds them. */
#define HPD_USER_REGS 17
/* The most user stack an on-CPU record carries (perf_event's limit too). */
#define HPD_MAX_STACK_COPY 65528

enum hpd_event_type {
  HPD_EVENT_ON_CPU = 1,   /* a timer sample of a running target thread */
  HPD_EVENT_OFF_CPU = 2,  /* a target thread was off the CPU for off_cpu_ns from time_ns on */
  HPD_EVENT_FORK = 3,     /* a target created a thread or (followed) process */
  HPD_EVENT_EXEC = 4,     /* a target process exec'd; comm is the new name */
  HPD_EVENT_EXIT = 5,     /* a target thread exited */
  HPD_EVENT_CPU_TAIL = 6, /* a target thread's task was freed: the CPU time after its last sample */
  /* where a target thread exits (an hpd_sample_event with no CPU time): the stack the CPU time after
   * its last sample (HPD_EVENT_CPU_TAIL) is attributed to */
  HPD_EVENT_EXIT_STACK = 7,
  /* --call-graph dwarf: the user registers and a copy of the user stack of a target thread at its
   * switch-out (an hpd_sample_event without frames: regs, then stack_bytes of stack where ips begin).
   * header.time_ns is the switch-out's, as in the HPD_EVENT_OFF_CPU record its switch-in emits later,
   * whose user stack user space unwinds from this copy. */
  HPD_EVENT_SWITCH_STACK = 8,
};

/* Filter modes, set in the programs' read-only configuration before load. */
enum hpd_filter_mode {
  HPD_FILTER_PIDS = 0,    /* processes in the targets map */
  HPD_FILTER_CGROUP = 1,  /* tasks in the cgroup (or below it) in the cgroup map */
  HPD_FILTER_ALL = 2,     /* every task except the idle task and the recorder itself */
};

/* Indices of the global per-CPU counters. */
enum hpd_counter {
  HPD_COUNTER_RINGBUF_DROPS = 0, /* records that did not fit into the ring buffer */
  HPD_COUNTER_THREAD_MAP_FULL = 1, /* threads whose CPU-time baseline could not be stored */
  HPD_COUNTER_OFFCPU_MAP_FULL = 2, /* switch-outs whose stack could not be stored */
  HPD_COUNTER_SAMPLES = 3,       /* on-CPU samples taken (before any drop) */
  HPD_COUNTER_STALE_RUNTIME = 4, /* on-CPU samples whose runtime could not be brought up to date */
  /* off-CPU intervals whose switch-in the sched_switch tracepoint did not report (their end was taken
   * from the thread's CPU time: HPD_SAMPLE_SWITCH_IN_INFERRED) */
  HPD_COUNTER_SWITCH_IN_UNSEEN = 5,
  /* stack copies not taken because the ring held half of its size or more (ring_too_full_for_copies):
   * cfi mode's copies of samples whose tables were pending, and switch-out copies (dwarf, cfi); those
   * records keep the frame-pointer walk taken with them */
  HPD_COUNTER_COPIES_SKIPPED = 6,
  /* on-CPU samples whose hypervisor steal clock could not be read (the runtime kept the steal since
   * the run queue's last update) */
  HPD_COUNTER_STEAL_UNREAD = 7,
  /* the hypervisor's steal taken out of on-CPU samples' runtimes brought up to date, in ns */
  HPD_COUNTER_STEAL_TAKEN_NS = 8,
  HPD_COUNTER_COUNT = 9,
};

/* Every record starts with this header. */
struct hpd_event_header {
  __u32 type; /* enum hpd_event_type */
  __u32 cpu;
  __s32 pid; /* process (tgid) */
  __s32 tid;
  __u64 time_ns; /* CLOCK_MONOTONIC */
  char comm[HPD_COMM_LEN];
};

/* HPD_EVENT_ON_CPU and HPD_EVENT_OFF_CPU: only the first kernel_frames + user_frames entries of ips
 * are present in the ring, followed by stack_bytes bytes of user stack (from regs[7], the sp, up);
 * the record is cut after them. On-CPU records of user code carry the registers and the stack copy
 * (fp mode: a small one, for the frameless leaf's caller; dwarf mode: the unwinder's, and no user
 * frames); off-CPU records carry neither (regs_valid 0, stack_bytes 0): in dwarf mode their copy came
 * before them, in an HPD_EVENT_SWITCH_STACK record of the same thread and time, as it did in cfi mode
 * for a walk that met a table not published yet (HPD_SAMPLE_TABLES_PENDING). */
struct hpd_sample_event {
  struct hpd_event_header header;
  union {
    __u64 cpu_delta_ns; /* on-CPU: the thread's CPU time since its previous sample */
    /* off-CPU, blocked (no HPD_SAMPLE_PREEMPTED): when sched_wakeup made the thread runnable again
     * (CLOCK_MONOTONIC), 0 when no wakeup was seen. From then to the switch-in it waited for a CPU.
     * Never in an on-CPU record, so the two share their place: records did not grow. */
    __u64 woken_ns;
  };
  /* off-CPU: how long the thread stayed off the CPU; flags: blocked or runnable. While the record
   * waits in the programs' `blocked` map: the thread's sum_exec_runtime at its switch-out. */
  __u64 off_cpu_ns;
  /* off-CPU, blocked and woken: the CPU time the scheduler charged the thread for its wait between
   * its wakeup and its switch-in. A wakeup that preempts asks the next __schedule() to skip its clock
   * update (rq_clock_skip_update), so the woken thread's runtime starts at the run queue's clock as the
   * wakeup left it; on an idle CPU that wait is the way out of idle. No sample can land in it; the
   * programs take it out of the thread's next on-CPU delta and give it to this record, whose stack is
   * where the thread waited. 0 otherwise. While the record waits in `blocked` after a wakeup: that run
   * queue's clock_task at the wakeup (charged_ns) and its CPU (wake_cpu). */
  __u64 charged_ns;
  __u32 wake_cpu;
  __u32 reserved; /* 0 */
  __s32 kernel_error; /* bpf_get_stack's negative errno for the kernel stack, else 0 */
  __u16 user_end;      /* enum hpd_user_end: how the program's user walk ended */
  __u16 user_fp_frames; /* cfi walks: frames stepped by frame pointer (modules without a table) */
  __u16 kernel_frames; /* leaf first */
  __u16 user_frames;   /* leaf first, after the kernel frames */
  __u32 flags;         /* HPD_SAMPLE_* */
  __u32 stack_bytes;   /* bytes of user stack after the frames */
  __u32 regs_valid;    /* bit N set: regs[N] holds DWARF register N */
  __u64 regs[HPD_USER_REGS];
  __u64 ips[HPD_MAX_FRAMES];
};

#define HPD_SAMPLE_NO_BASELINE 1u /* the thread had no earlier runtime value: cpu_delta_ns is a guess */
/* off-CPU: switched out while runnable (preempted, or yielding in TASK_RUNNING), not blocked: the
 * interval is time spent waiting for a CPU */
#define HPD_SAMPLE_PREEMPTED 2u
/* cfi walks: the process had no mapping table yet, or the walk met a module whose table was still
 * being compiled (the frame pointer stood in) */
#define HPD_SAMPLE_TABLES_PENDING 4u
/* off-CPU: written by hpd_attach_state for a thread that was already off the CPU when the recording
 * began (attach_state.bpf.h); its interval starts at the recording's start */
#define HPD_SAMPLE_AT_ATTACH 8u
/* The thread is in a system call (its saved user registers' orig_ax, the system call's number, is not
 * -1, which every interrupt and exception entry stores): its user pc is the instruction after the
 * `syscall`, a return address. Otherwise it is the instruction the thread was interrupted at. */
#define HPD_SAMPLE_IN_SYSCALL 16u
/* off-CPU: the sched_switch tracepoint did not report the switch-in that ended the interval (seen on
 * a kernel that reports no switch away from some tasks, so neither the switch to the next one); the
 * thread ran again unseen, and the interval's end is when its CPU time says it did: the switch-out
 * (or exit) that found the record still waiting, less the CPU time the thread used since its
 * switch-out. */
#define HPD_SAMPLE_SWITCH_IN_INFERRED 32u

/* cfi mode: a target thread switched out while its walk stood in frame pointers for tables not yet
 * published (HPD_SAMPLE_TABLES_PENDING): where its user state was, kept in the programs' pending_walks
 * map by tid until the thread is switched in again. Its stack cannot change before then, so user space
 * may read it and walk it again once the tables are published (and, system-wide, asks for them). */
struct hpd_pending_walk {
  __u64 time_ns; /* the switch-out's: its off-CPU record's header.time_ns */
  __u64 ip;
  __u64 sp;
  __u64 bp;
  __s32 pid;
  __u32 pad;
  __u64 di; /* rdi: glibc's vfork keeps its return address there (HPD_CFA_RSP_RA_RDI) */
};
/* How a user stack walk of the programs ended. */
enum hpd_user_end {
  HPD_USER_END_NONE = 0,        /* no walk (no user registers: a kernel thread), or dwarf mode */
  HPD_USER_END_ROOT = 1,        /* CFI says the return address is undefined (_start, clone3), or it is 0 */
  HPD_USER_END_FP_ZERO = 2,     /* a frame-pointer step met rbp = 0, the start-up code's marker */
  HPD_USER_END_DEPTH = 3,       /* HPD_MAX_USER_FRAMES reached */
  HPD_USER_END_READ_FAULT = 4,  /* the stack slot a rule named could not be read */
  HPD_USER_END_NO_CFI = 5,      /* unused: a pc no FDE covers is stepped by frame pointer */
  HPD_USER_END_UNSUPPORTED = 6, /* the row's rule is one the tables do not express */
  HPD_USER_END_FP_BROKEN = 7,   /* a frame-pointer step met an implausible rbp (no table there) */
  HPD_USER_END_NO_GROWTH = 8,   /* the caller's frame was not above the callee's */
  HPD_USER_END_COUNT = 9,
};

/* CFI tables (see hpd/unwind/cfi_table.h, whose CfiRow has this layout). */
#define HPD_CFA_NONE 0        /* no CFI covers the pc */
#define HPD_CFA_RSP 1         /* CFA = rsp + cfa_offset */
#define HPD_CFA_RBP 2         /* CFA = rbp + cfa_offset */
#define HPD_CFA_PLT 3         /* CFA = rsp + cfa_offset + ((rip & 15) >= rbp_offset ? 8 : 0) */
#define HPD_CFA_SIGNAL 4      /* signal trampoline: the interrupted registers are in the ucontext at rsp */
#define HPD_CFA_OUTERMOST 5   /* the return address is undefined: the thread's first frame */
#define HPD_CFA_UNSUPPORTED 6 /* a rule the rows do not express */
#define HPD_CFA_RSP_RA_RDI 7  /* CFA = rsp + cfa_offset, the return address in rdi (glibc's vfork): sampled frame only */
#define HPD_RBP_SAME 0        /* the caller's rbp is the callee's */
#define HPD_RBP_AT_CFA 1      /* saved at CFA + rbp_offset */
#define HPD_RBP_UNDEFINED 2   /* lost */
/* The x86-64 rt_sigframe's ucontext: where rbp, rsp and rip were saved, from the trampoline's rsp. */
#define HPD_SIGFRAME_RBP 120
#define HPD_SIGFRAME_RSP 160
#define HPD_SIGFRAME_RIP 168

/* One row, valid from pc (an ELF virtual address of its module) to the next row's pc, and its rule: an
 * entry of the rule map, where every distinct rule of the loaded tables is stored once (a few thousand
 * rules serve the millions of rows of a machine's programs), so that a row takes 8 bytes, not 16. */
struct hpd_cfi_row {
  __u32 pc;
  __u32 rule;
};

/* How a row finds its caller's frame: the CFA (cfa_kind, cfa_offset) and the caller's rbp (rbp_kind,
 * rbp_offset; for HPD_CFA_PLT rows the (rip & 15) threshold). */
struct hpd_cfi_rule {
  __s32 cfa_offset;
  __s16 rbp_offset;
  __u8 cfa_kind;
  __u8 rbp_kind;
};

/* Entries of the rule map: distinct rules of the tables loaded at once. */
#define HPD_CFI_RULES 65536

/* A bucket of a module's row index (hpd/unwind/cfi_table.h's CfiBucket): the rows covering any address
 * of the bucket are [first, first + count), counted from the module's first row. */
struct hpd_cfi_bucket {
  __u32 first;
  __u32 count;
};

/* Executable mappings of one process for the cfi walk, sorted by start, kept by user space. */
#define HPD_MAX_PROC_MAPPINGS 256
#define HPD_MAPPING_PENDING 1u /* the module's table is being compiled: frame pointers meanwhile */
struct hpd_proc_mapping {
  __u64 start;
  __u64 end;
  __u64 bias;      /* runtime address - ELF virtual address */
  __u32 row_first; /* into the cfi_rows map */
  __u32 row_count; /* 0: no table (frame pointers) */
  __u32 flags;     /* HPD_MAPPING_* */
  __u32 index_shift;  /* log2 of the module's bucket size */
  __u32 index_first;  /* into the cfi_index map */
  __u32 index_count;  /* buckets; 0: search all rows */
  __u32 index_base;   /* ELF virtual address of bucket 0 (the first row's pc) */
  __u32 pad;
};
struct hpd_proc_mappings {
  __u32 count;
  __u32 pad;
  struct hpd_proc_mapping mappings[HPD_MAX_PROC_MAPPINGS];
};

/* A process that runs hpd's call-counting runtime (libhpdcalls.so): while a call is timed, its return
 * address on the stack is the runtime's hook and the original is on the thread's shadow stack. The
 * walkers replace the hook's address by the shadow frame's original whose slot is where they read it.
 * The layout is the runtime's (hpd/calls/preload_abi.h, HPD_CALLS_STATE_* and hpd_calls_shadow_frame);
 * bpf_session_attach.cpp checks that both agree. */
#define HPD_CALLS_RT_STATE_SHADOW 24u
#define HPD_CALLS_RT_STATE_DEPTH 32u
#define HPD_CALLS_RT_MAX_DEPTH 65536u
struct hpd_calls_rt_frame {
  __u64 slot;     /* where the return address lives on the stack */
  __u64 original; /* the return address the hook replaced */
  __u64 start;
  __u32 func;
  __u32 restored; /* the original was put back (an exception unwinds through it) */
};
struct hpd_calls_runtime_process {
  __u64 trampoline;       /* the hook's address in this process */
  __s64 tls_state_offset; /* thread pointer + this: the thread's state pointer */
};

/* HPD_EVENT_FORK */
struct hpd_fork_event {
  struct hpd_event_header header; /* the new task: pid, tid, comm */
  __s32 parent_pid;
  __s32 parent_tid;
};

/* HPD_EVENT_EXEC, HPD_EVENT_EXIT and HPD_EVENT_CPU_TAIL. An exit carries what was lost for that
 * thread. A CPU tail carries the CPU time the thread used after its last sample: sum_exec_runtime at
 * the thread's last switch-out, as it dies (final: it advances only at ticks and context switches, so
 * at the exit itself it still lacks the last part), or when the task is freed if that switch-out's
 * record did not fit, minus the CPU time at that sample. Without it a thread's CPU time ended at its
 * last sample, half of the CPU time of processes that live a few milliseconds. */
struct hpd_task_event {
  struct hpd_event_header header;
  __u64 ringbuf_drops;
  __u64 cpu_tail_ns;
  __u32 task_flags; /* HPD_TASK_* */
  /* HPD_EVENT_CPU_TAIL: how far the runtime the thread's last sample was given (brought up to the
   * sample's instant) was ahead of its final sum_exec_runtime, in ns (at most 2^32-1): time that was
   * not the thread's (hypervisor steal the programs could not read, IRQ time), which user space takes
   * back from the thread's last samples. 0 otherwise. */
  __u32 cpu_excess_ns;
};

/* HPD_EVENT_EXEC: the exec gave the process credentials the client may not trace (restrict_creds);
 * it is no longer followed from this record on. */
#define HPD_TASK_UNFOLLOWED 1u
/* HPD_EVENT_EXIT: the thread has a CPU-time baseline, so a CPU tail follows (at its last switch-out,
 * microseconds later; at the latest when its task is freed). */
#define HPD_TASK_TAIL_FOLLOWS 2u

/* Per-thread state kept by the programs, keyed by tid. */
struct hpd_thread_state {
  __u64 last_runtime_ns; /* CPU time (sum_exec_runtime, brought up to date) at the previous sample, or
                            seeded from /proc at attach */
  __u64 ringbuf_drops;   /* this thread's records that did not fit */
  __s32 pid;
  __u32 seeded;          /* last_runtime_ns is a real baseline */
  /* Per-task sampling: the smallest event period seen on this thread. A thread born while user space
   * attached its events may carry an inherited event and one attached to it directly; the direct
   * ones of later attach rounds have a period larger by the round number, so the copy is dropped. */
  __u64 event_period;
};

#endif
