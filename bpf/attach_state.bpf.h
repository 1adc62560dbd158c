// Attach-time state: where each target thread is when the recording begins. Included at the end of
// profile.bpf.c, whose maps and helpers it uses.
//
// A thread blocked before the recording began has no switch-out for hpd_sched_switch to record, so its
// switch-in found nothing in `blocked` and all its time was lost: the reason people attach to a hung
// service is exactly such threads. hpd_attach_state, a task iterator user space runs once after the
// scheduler hooks are attached, writes for each target thread that is off the CPU the record its
// switch-out would have written: blocked (or runnable, waiting for a CPU) since the recording's start,
// with its kernel stack and its user registers. From there the thread is like any other off-CPU thread:
// its switch-in emits the interval, sched_wakeup splits it, the end of the recording closes it. The user
// stack of another task cannot be read here (bpf_probe_read_user reads the current task's memory): in
// cfi mode the record keeps the user leaf and its registers go into pending_walks, and user space walks
// the stack with the same tables (OffCpuRewalk) while the thread is still off the CPU.

// The recording's start (CLOCK_MONOTONIC), set by user space before the iterator runs.
__u64 attach_start_ns = 0;
// What the iterator did, for the recording's summary: records written, of them runnable ones, and
// records taken back because the thread ran while its record was written.
__u64 attach_blocked_records = 0;
__u64 attach_runnable_records = 0;
__u64 attach_raced = 0;

// Per target thread, its context switches (nvcsw + nivcsw, /proc/PID/task/TID/status) read by user
// space before the recording's start. A thread still off the CPU at the iteration that has not switched
// since was off the CPU all the time in between: its record starts at attach_start_ns.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __uint(max_entries, 16384);
  __type(key, __s32);
  __type(value, __u64);
} attach_switches SEC(".maps");

// The record being built; not `scratch`: the iterator runs in a preemptible task, and a context switch
// on its CPU runs hpd_sched_switch, which builds its own record there.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct hpd_sample_event);
} attach_scratch SEC(".maps");

#define PF_KTHREAD 0x00200000

static __always_inline __u64 task_switches(struct task_struct* task) {
  return BPF_CORE_READ(task, nvcsw) + BPF_CORE_READ(task, nivcsw);
}

// Whether `task` runs, or is being switched in: its run queue names it current before sched_switch
// fires, and on_cpu is set after it, until the task is switched out.
static __always_inline int task_on_a_cpu(struct task_struct* task) {
  if (BPF_CORE_READ(task, on_cpu)) return 1;
  if (!bpf_core_field_exists(task->se.cfs_rq) || !bpf_core_field_exists(struct cfs_rq, rq)) return 0;
  const struct rq* rq = BPF_CORE_READ(task, se.cfs_rq, rq);
  return rq && BPF_CORE_READ(rq, curr) == task;
}

SEC("iter/task")
int hpd_attach_state(struct bpf_iter__task* ctx) {
  struct task_struct* task = ctx->task;
  if (!task || filter_mode != HPD_FILTER_PIDS) return 0;
  __s32 pid = BPF_CORE_READ(task, tgid);
  __s32 tid = BPF_CORE_READ(task, pid);
  if (!bpf_map_lookup_elem(&targets, &pid)) return 0;
  if (BPF_CORE_READ(task, flags) & (PF_EXITING | PF_KTHREAD)) return 0;
  // Running: the sampling events see it, and its own switch-out records where it blocks.
  if (task_on_a_cpu(task)) return 0;
  const int runnable = task_is_running(task);
  const __u64 now = bpf_ktime_get_ns();
  __u64 since = now;
  if (!runnable) {
    const __u64* before = bpf_map_lookup_elem(&attach_switches, &tid);
    if (before && *before == task_switches(task) && attach_start_ns != 0 && attach_start_ns < now)
      since = attach_start_ns;
  }
  const __u32 zero = 0;
  struct hpd_sample_event* e = bpf_map_lookup_elem(&attach_scratch, &zero);
  if (!e) return 0;
  e->header.type = HPD_EVENT_OFF_CPU;
  e->header.cpu = bpf_core_field_exists(task->thread_info.cpu) ? BPF_CORE_READ(task, thread_info.cpu) : 0;
  e->header.pid = pid;
  e->header.tid = tid;
  e->header.time_ns = since;
  BPF_CORE_READ_STR_INTO(&e->header.comm, task, comm);
  e->woken_ns = 0;
  e->charged_ns = 0;
  e->wake_cpu = 0;
  e->reserved = 0;
  e->off_cpu_ns = BPF_CORE_READ(task, se.sum_exec_runtime);  // kept while in `blocked` (profile_event.h)
  e->flags = HPD_SAMPLE_AT_ATTACH | (runnable ? HPD_SAMPLE_PREEMPTED : 0);
  e->regs_valid = 0;
  e->stack_bytes = 0;
  e->kernel_error = 0;
  e->user_end = HPD_USER_END_NONE;
  e->user_fp_frames = 0;
  __u64 kernel_frames = 0;
  // A sleeping task's saved kernel stack, from the scheduler's frames on (user space drops them).
  if (capture_kernel)
    kernel_frames =
        kernel_frames_of(e, bpf_get_task_stack(task, e->ips, HPD_MAX_KERNEL_FRAMES * sizeof(__u64), 0));
  if (kernel_frames > HPD_MAX_KERNEL_FRAMES) kernel_frames = HPD_MAX_KERNEL_FRAMES;
  __u64 user_frames = 0;
  struct hpd_pending_walk walk = {};
  struct pt_regs* regs = (struct pt_regs*)bpf_task_pt_regs(task);
  if (regs && (BPF_CORE_READ(regs, cs) & USER_MODE_CS_BITS) == USER_MODE_CS_BITS) {
    walk.ip = BPF_CORE_READ(regs, ip);
    walk.sp = BPF_CORE_READ(regs, sp);
    walk.bp = BPF_CORE_READ(regs, bp);
    walk.di = BPF_CORE_READ(regs, di);
    walk.pid = pid;
    walk.time_ns = since;
    e->ips[kernel_frames] = walk.ip;
    user_frames = 1;
    if (cfi_unwind) e->flags |= HPD_SAMPLE_TABLES_PENDING;
    // Blocked in a system call (orig_ax holds its number): the user pc is a return address.
    if ((long)BPF_CORE_READ(regs, orig_ax) >= 0) e->flags |= HPD_SAMPLE_IN_SYSCALL;
  }
  e->kernel_frames = (__u16)kernel_frames;
  e->user_frames = (__u16)user_frames;
  // A switch-out recorded since the hooks were attached is the better record.
  if (bpf_map_update_elem(&blocked, &tid, e, BPF_NOEXIST) != 0) return 0;
  if (e->flags & HPD_SAMPLE_TABLES_PENDING) bpf_map_update_elem(&pending_walks, &tid, &walk, BPF_ANY);
  // A locked add is a full barrier: the look below comes after the record is in the map.
  __sync_fetch_and_add(runnable ? &attach_runnable_records : &attach_blocked_records, 1);
  // Switched in meanwhile: its switch-in may have looked before the record was there, and a record
  // left behind would be taken for time off the CPU while it runs. Taken back (only if still ours).
  if (task_on_a_cpu(task)) {
    struct hpd_sample_event* b = bpf_map_lookup_elem(&blocked, &tid);
    if (b && (b->flags & HPD_SAMPLE_AT_ATTACH) && b->header.time_ns == since) {
      bpf_map_delete_elem(&blocked, &tid);
      bpf_map_delete_elem(&pending_walks, &tid);
      __sync_fetch_and_add(&attach_raced, 1);
    }
  }
  return 0;
}
