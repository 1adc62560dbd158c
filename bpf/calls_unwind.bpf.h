// Unwinding through the frames hpd's call-counting runtime (libhpdcalls.so) hooked: while a call is
// timed, its return address on the stack is the runtime's return hook, and the original waits on the
// thread's shadow stack (profile_event.h, struct hpd_calls_runtime_process). Without this every stack
// of instrumented code ended at the hook, and the callers of timed calls lost their inclusive time.
// Included by profile.bpf.c before its stack walkers.
#ifndef HPD_CALLS_UNWIND_BPF_H
#define HPD_CALLS_UNWIND_BPF_H

#include "timed_entry.bpf.h"

extern void* bpf_rdonly_cast(const void* obj, __u32 btf_id) __ksym;

// The current task, for plain loads of its pointer fields: the verifier takes a pointer loaded from a
// trusted one (bpf_get_current_task_btf()'s) for trusted only after it searched the kernel's BTF by name
// for the field's type, three or four times, one type after another (btf_nested_type_is_trusted): about
// a millisecond each time it checks such a load, on every path to it. Loads from an untrusted pointer
// are not checked that way; they are the same load, with the fault handled (a NULL field reads 0).
// `task->utask` on the walking programs' paths was half of their verifying (docs/performance.md).
static __always_inline struct task_struct* untrusted_task(void) {
  return bpf_rdonly_cast(bpf_get_current_task_btf(), bpf_core_type_id_kernel(struct task_struct));
}

// Per process (tgid) that announced the runtime through the uprobe below.
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 4096);
  __type(key, __s32);
  __type(value, struct hpd_calls_runtime_process);
} calls_runtime_procs SEC(".maps");

// Set by user space once it attached the uprobe; until then no walk looks for hooked frames.
__u32 calls_runtime_active = 0;

// The user stack walk in progress on this CPU: the hook's address in its process (0: nothing to
// replace), the thread's shadow frames, and how many of them are still candidates.
struct calls_walk {
  __u64 trampoline;
  __u64 frames;
  __u32 next;
  __u32 pad;
};
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct calls_walk);
} calls_walks SEC(".maps");

// The runtime's hpd_calls_announce(trampoline, tls_state_offset), once per process that counts.
SEC("uprobe")
int hpd_calls_announced(struct pt_regs* ctx) {
  const __s32 pid = (__s32)(bpf_get_current_pid_tgid() >> 32);
  struct hpd_calls_runtime_process p = {
      .trampoline = PT_REGS_PARM1(ctx),
      .tls_state_offset = (__s64)PT_REGS_PARM2(ctx),
  };
  bpf_map_update_elem(&calls_runtime_procs, &pid, &p, BPF_ANY);
  return 0;
}

// Before a user stack walk of the current task, of process `pid`. Without the uprobe no walk calls
// calls_real_return, so a recording without the runtime pays one load of a global here.
static __always_inline void calls_walk_begin(__s32 pid) {
  if (!calls_runtime_active) return;
  const __u32 zero = 0;
  struct calls_walk* w = bpf_map_lookup_elem(&calls_walks, &zero);
  if (!w) return;
  w->trampoline = 0;
  const struct hpd_calls_runtime_process* p = bpf_map_lookup_elem(&calls_runtime_procs, &pid);
  if (!p) return;
  struct task_struct* task = bpf_get_current_task_btf();
  const __u64 fsbase = task->thread.fsbase;
  __u64 state = 0;
  __u64 frames = 0;
  __u32 depth = 0;
  if (bpf_probe_read_user(&state, sizeof state, (const void*)(fsbase + p->tls_state_offset)) != 0 ||
      state == 0)
    return;
  if (bpf_probe_read_user(&frames, sizeof frames, (const void*)(state + HPD_CALLS_RT_STATE_SHADOW)) != 0 ||
      bpf_probe_read_user(&depth, sizeof depth, (const void*)(state + HPD_CALLS_RT_STATE_DEPTH)) != 0)
    return;
  if (frames == 0 || depth == 0 || depth > HPD_CALLS_RT_MAX_DEPTH) return;
  w->trampoline = p->trampoline;
  w->frames = frames;
  w->next = depth;
}

// Whether the walk begun by calls_walk_begin may meet hooked return addresses (the thread has shadow
// frames): a copy of its stack holds the hook's address where the originals belong.
static __always_inline int calls_walk_hooked(void) {
  if (!calls_runtime_active) return 0;
  const __u32 zero = 0;
  const struct calls_walk* w = bpf_map_lookup_elem(&calls_walks, &zero);
  return w && w->trampoline != 0;
}

// Shadow frames looked at per hooked return address: the one that matches is nearly always the next
// (a frame is pushed before the hook replaces its return address, so one may not be hooked yet).
#define CALLS_SHADOW_SEARCH 8

// The return address the walker read at `slot`: the original when it is the runtime's hook. Walking
// from the leaf, hooked frames come in the shadow stack's order from its top.
__attribute__((noinline)) __u64 calls_real_return(__u64 ra, __u64 slot) {
  const __u32 zero = 0;
  struct calls_walk* w = bpf_map_lookup_elem(&calls_walks, &zero);
  if (!w || w->trampoline == 0 || ra != w->trampoline) return ra;
  for (int i = 0; i < CALLS_SHADOW_SEARCH; i++) {
    if (w->next == 0) break;
    const __u32 index = w->next - 1;
    struct hpd_calls_rt_frame frame;
    if (bpf_probe_read_user(&frame, sizeof frame, (const void*)(w->frames + (__u64)index * sizeof frame)) !=
        0)
      return ra;
    w->next = index;
    if (frame.slot == slot && !frame.restored) return frame.original;
  }
  return ra;
}

// A return address the kernel's return probes replaced (uprobe sessions and uretprobes: the calls
// `--calls --pid` times): the original, from the thread's pending return instances, each of which
// names the stack slot it hijacked. Without this every stack below a timed call ended at the
// kernel's [uprobes] trampoline. The innermost instance comes first, as the walk meets them.
//
// A call whose entry probe is still running (the kernel put its trampoline at the slot, but has not
// linked the instance yet) has no instance: its original is the one the timing program kept at the
// entry (timed_entry.bpf.h), taken only when the slot holds the trampoline ([uprobes]'s first address).
#define URETPROBE_SEARCH 32

// Set by user space when the call-timing program shares timed_entries with these programs.
__u32 timed_entries_shared = 0;

// Whether uretprobe_real_return may replace any return address of the current task: it has pending
// return instances, or the timing program shares its entries. Taken once per walk (neither changes
// while the program runs on the task's CPU): a call per frame cost a kernel read per frame for the
// threads no probe ever hit, nearly all of them.
static __always_inline __u32 uretprobe_walk_begin(void) {
  if (timed_entries_shared) return 1;
  struct task_struct* task = bpf_get_current_task_btf();
  struct uprobe_task* utask = BPF_CORE_READ(task, utask);
  return utask && BPF_CORE_READ(utask, return_instances) != 0;
}

// The walk of the thread's pending return instances (struct return_instance, innermost first), a
// bpf_loop step each: the verifier checks one step, where a loop it could follow was checked once per
// iteration (1,000 instructions per walking program, 3,700 for the copy's restore).
struct uretprobe_search {
  __u64 ri;    // the instance to look at next (a kernel address; 0: none left)
  __u64 slot;  // uretprobe_real_return: the slot looked for
  __u64 orig;  // uretprobe_real_return: its original return address (0: not found)
  __u8* out;   // uretprobe_restore_copy: the copy and its bounds
  __u64 sp;
  __u64 copied;
};

static long uretprobe_find_step(__u64 index, struct uretprobe_search* s) {
  struct return_instance* ri = (struct return_instance*)s->ri;
  if (!ri) return 1;
  if (BPF_CORE_READ(ri, stack) == s->slot) {
    s->orig = BPF_CORE_READ(ri, orig_ret_vaddr);
    return 1;
  }
  s->ri = (__u64)BPF_CORE_READ(ri, next);
  return 0;
}

__attribute__((noinline)) __u64 uretprobe_real_return(__u64 ra, __u64 slot) {
  struct task_struct* task = bpf_get_current_task_btf();
  struct uprobe_task* utask = BPF_CORE_READ(task, utask);
  if (!utask) return ra;
  struct uretprobe_search s = {.ri = (__u64)BPF_CORE_READ(utask, return_instances), .slot = slot};
  bpf_loop(URETPROBE_SEARCH, uretprobe_find_step, &s, 0);
  if (s.orig != 0) return s.orig;
  if (!timed_entries_shared) return ra;
  const __u32 tid = (__u32)bpf_get_current_pid_tgid();
  const struct hpd_timed_entry* entry = bpf_map_lookup_elem(&timed_entries, &tid);
  if (!entry || entry->slot != slot || entry->ret == ra) return ra;
  const __u64 trampoline = BPF_CORE_READ(task, mm, uprobes_state.xol_area, vaddr);
  return trampoline != 0 && ra == trampoline ? entry->ret : ra;
}

// The registers a walk starts from, for a thread in the return probes' system call: the kernel adds
// the three registers the [uprobes] trampoline pushed to the saved sp (uretprobe, before it runs the
// return handlers) while the saved pc stays after the trampoline's syscall, where the trampoline's rows
// expect the pushes below sp. Until the kernel moves the pc to the original return address (and pops
// the instance), the walk starts there, as the thread will resume: the caller, with sp above the slot.
// Seen as the innermost instance's slot right below sp with the pc in the [uprobes] page.
static __always_inline void uretprobe_syscall_regs(const struct pt_regs* user, __u64* ip, __u64* sp) {
  if ((long)user->orig_ax != -1) return;
  struct task_struct* task = bpf_get_current_task_btf();
  struct uprobe_task* utask = BPF_CORE_READ(task, utask);
  if (!utask) return;
  struct return_instance* ri = BPF_CORE_READ(utask, return_instances);
  if (!ri || BPF_CORE_READ(ri, stack) != *sp - 8) return;
  const __u64 page = BPF_CORE_READ(task, mm, uprobes_state.xol_area, vaddr);
  if (page == 0 || *ip < page || *ip - page >= 4096) return;
  *ip = BPF_CORE_READ(ri, orig_ret_vaddr);
}

// The pc of a thread whose probed instruction is being stepped out of line: the kernel has run the
// probe's handlers and pointed the saved pc at a copy of the instruction in its slot of the [uprobes]
// page (utask->xol_vaddr), to be executed there with the registers otherwise as at the probed address
// (utask->vaddr); once the copy has run, the pc is after it until the kernel moves it back. Either way
// the thread is in the probed function: the walk starts at the same place in the original code, whose
// tables and symbols are the function's. From the slot, which no table covers, the walk failed: 81% of
// the CPU samples of a process whose allocator `hpctl record --alloc --pid` probed (most of its time
// is the probes' exit to user mode, with the pc in the slot). Slots are 128 bytes (UPROBE_XOL_SLOT_BYTES).
// Plain loads, not helper calls: this runs for every sample. Through an untrusted view of the task
// (untrusted_task()).
static __always_inline __u64 uprobe_xol_real_ip(__u64 ip) {
  struct task_struct* task = untrusted_task();
  struct uprobe_task* utask = task->utask;
  if (!utask) return ip;
  const __u64 slot = utask->xol_vaddr;
  if (slot == 0 || ip < slot || ip - slot >= 128) return ip;
  const __u64 probed = utask->vaddr;
  return probed != 0 ? probed + (ip - slot) : ip;
}

// For a copy of `copied` bytes of user stack from `sp`: the original return address of a timed call
// whose entry probe is still running, when its slot lies in the copy and holds the trampoline (read
// from the stack again), and the slot's offset in the copy into *off; else 0.
__attribute__((noinline)) __u64 timed_entry_for_copy(__u64 sp, __u64 copied, __u64* off) {
  if (!off || !timed_entries_shared) return 0;
  const __u32 tid = (__u32)bpf_get_current_pid_tgid();
  const struct hpd_timed_entry* entry = bpf_map_lookup_elem(&timed_entries, &tid);
  if (!entry || entry->slot < sp || entry->slot - sp + 8 > copied) return 0;
  struct task_struct* task = bpf_get_current_task_btf();
  const __u64 trampoline = BPF_CORE_READ(task, mm, uprobes_state.xol_area, vaddr);
  __u64 held = 0;
  if (trampoline == 0 || bpf_probe_read_user(&held, sizeof held, (const void*)entry->slot) != 0 ||
      held != trampoline)
    return 0;
  *off = entry->slot - sp;
  return entry->ret;
}

// The same for a copy of the user stack (dwarf mode, and the samples walked again once their tables are
// in): `copied` bytes at `out`, from `sp`. Each pending return instance whose slot lies in the copy gets
// its original return address written back there, so that user space's walk meets the caller rather
// than the kernel's trampoline. (A slot just below sp, when the sample is at the trampoline's first
// instruction, is outside the copy.)
static long uretprobe_restore_step(__u64 index, struct uretprobe_search* s) {
  struct return_instance* ri = (struct return_instance*)s->ri;
  if (!ri || !s->out) return 1;
  const __u64 slot = BPF_CORE_READ(ri, stack);
  if (slot >= s->sp && slot - s->sp + 8 <= s->copied) {
    const __u64 off = slot - s->sp;
    if (off > HPD_MAX_STACK_COPY - 8) return 1;  // for the verifier (copied is at most that)
    const __u64 orig = BPF_CORE_READ(ri, orig_ret_vaddr);
    __builtin_memcpy(s->out + off, &orig, sizeof orig);
  }
  s->ri = (__u64)BPF_CORE_READ(ri, next);
  return 0;
}

static __always_inline void uretprobe_restore_copy(__u8* out, __u64 sp, __u64 copied) {
  struct task_struct* task = bpf_get_current_task_btf();
  struct uprobe_task* utask = BPF_CORE_READ(task, utask);
  if (!utask) return;
  struct uretprobe_search s = {
      .ri = (__u64)BPF_CORE_READ(utask, return_instances), .out = out, .sp = sp, .copied = copied};
  bpf_loop(URETPROBE_SEARCH, uretprobe_restore_step, &s, 0);
  // A call whose entry probe is still running: the entry the timing program kept.
  __u64 off = 0;
  const __u64 orig = timed_entry_for_copy(sp, copied, &off);
  if (orig == 0 || off + 8 > copied) return;
  if (off > HPD_MAX_STACK_COPY - 8) return;  // for the verifier, as above
  __builtin_memcpy(out + off, &orig, sizeof orig);
}

#endif
