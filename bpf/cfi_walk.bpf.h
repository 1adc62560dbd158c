// The cfi walk: user stacks unwound in the kernel with compact tables compiled from each module's CFI
// (hpd/unwind/cfi_table.h). User space keeps four maps current: the rows of every loaded module in one
// array, the distinct rules they name in another, their indexes in a third, and per process its
// executable mappings sorted by address, each with its module's row and index ranges and load bias. Per
// frame: find the mapping of the pc, look up the pc's bucket in the module's index, binary-search the few
// rows it names, take the row's rule, compute the CFA, read the return address at CFA-8 and restore rbp.
// Modules without a table are stepped by frame pointer. Included by profile.bpf.c, after its maps and
// walk_user_frames.
#ifndef HPD_CFI_WALK_BPF_H
#define HPD_CFI_WALK_BPF_H

#include "hpd/base/x86_call.h"

// 1: on-CPU and off-CPU user stacks are walked with the tables (set by user space before load).
const volatile __u32 cfi_unwind = 0;

// Rows of every loaded module, back to back; user space writes them through a shared mapping before
// it publishes a process's mappings that refer to them. Sized by user space before load.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(map_flags, BPF_F_MMAPABLE);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct hpd_cfi_row);
} cfi_rows SEC(".maps");

// The rows' rules (struct hpd_cfi_rule), each distinct rule once: a row names its rule by index. Written
// by user space, like the rows, before a row that names a rule is written.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(map_flags, BPF_F_MMAPABLE);
  __uint(max_entries, HPD_CFI_RULES);
  __type(key, __u32);
  __type(value, struct hpd_cfi_rule);
} cfi_rules SEC(".maps");

// Each module's row index (struct hpd_cfi_bucket), back to back like the rows: per frame, one lookup
// here narrows the binary search to the few rows of the pc's bucket. Sized by user space before load.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(map_flags, BPF_F_MMAPABLE);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct hpd_cfi_bucket);
} cfi_index SEC(".maps");

// Per process (tgid): its executable mappings.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __uint(max_entries, 8192);
  __type(key, __s32);
  __type(value, struct hpd_proc_mappings);
} proc_mappings SEC(".maps");

// The registers of the frame being unwound.
struct cfi_regs {
  __u64 ip;
  __u64 sp;
  __u64 bp;
  __u32 exact;      // ip is an interrupted pc (the sample's, or after a signal frame), not a return address
  __u32 fp_frames;  // frames stepped by frame pointer
  __u32 pending;    // a module's table was not published yet (being loaded or compiled, or not mapped yet)
  __u32 mapping;    // the mapping of the previous frame: most callers are in the same module
  __u32 clone;      // enum cfi_clone_side: the sampled pc is right after a clone/clone3 system call
  __u32 uprobes;    // uretprobe_walk_begin(): return addresses may be the kernel's trampoline
  __u32 di_known;   // di is the sampled frame's rdi (HPD_CFA_RSP_RA_RDI rows); cleared by the first step
  __u64 di;
  __u32 frames;  // walk_user_cfi: out->ips filled so far
  __u32 end;     // walk_user_cfi: how the walk ended (enum hpd_user_end)
};

// glibc's __clone3 and __clone (musl's __clone too) end their CFI before the syscall, for the child's
// sake: the child runs there on its new, empty stack, then calls the thread's function from code whose
// CFI marks the outermost frame. A thread sampled before its first return to user mode (new, and
// preempted or sampled in the kernel on its way out) is at that pc: its whole stack is that frame. The
// parent is there too on its way back, with its return address at [sp] (the functions set up no frame).
// Told apart by the system call's return value in the saved registers: 0 in the child.
enum cfi_clone_side { CFI_CLONE_NONE = 0, CFI_CLONE_CHILD = 1, CFI_CLONE_PARENT = 2 };
#define NR_CLONE 56
#define NR_CLONE3 435

// The side of a clone/clone3 system call the saved user registers (orig_ax, ax, ip) are at: in one,
// with the pc right after its `syscall` instruction (0f 05). A global function, checked once.
__attribute__((noinline)) int clone_side_of(__u64 orig_ax, __u64 ax, __u64 ip) {
  if (orig_ax != NR_CLONE && orig_ax != NR_CLONE3) return CFI_CLONE_NONE;
  __u16 insn = 0;
  if (bpf_probe_read_user(&insn, sizeof insn, (const void*)(ip - 2)) != 0 || insn != 0x050f)
    return CFI_CLONE_NONE;
  return ax == 0 ? CFI_CLONE_CHILD : CFI_CLONE_PARENT;
}

// The stack above the sampled sp, copied at most once per walk: most frames' return addresses and
// saved rbp lie within it, and one read of a few KiB costs less than a user read per frame. One
// window per CPU and program (key: CPU * CFI_WINDOW_SLOTS + slot); the sampling program and the
// sched_switch program never run nested on one CPU (sched_switch runs with interrupts off), but each
// has its own window all the same. The exit program (slot 2) may be preempted or interrupted: it has
// its own window, and takes it only when no other exit program of its CPU holds it.
//
// The window is sp's page and the 7 pages above it (32 KiB), read a page at a time: the rest of
// sp's page at once, each page above only when a frame first lies there (one read for the frames of
// a deep stack by the dozen, where each was a read of its own: docs/performance.md, "Deep call
// chains"; reading by 1 or 2 KiB cost the same), never a page between two of them. The next page is
// often not readable: past the top of the main thread's stack when sp is near it, or a page that was
// never touched (exec leaves a random gap of up to 8 KiB between the argument strings and the
// initial stack pointer, and when it spans a whole page that page is never faulted in; a large local
// array may span untouched pages). A read that meets such a page fails (page faults are disabled in
// the program), but only after the fault was taken and refused: about 1 us on the paravirtualized
// guest we measured, as much as the rest of the walk. Read in one piece, a 4 KiB window made whole
// recordings twice as slow, depending on where ASLR had put the stack (docs/performance.md). A page
// a frame lies in was written, so it is present.
//
// The bytes are copied to the same offset within a 64-byte line as they have on the stack: the
// kernel's copy (rep movsb) is slower between differently aligned addresses, and with a per-CPU
// array (values aligned to 8 bytes, wherever the allocator put them) the cost of a walk changed
// from one recording to the next. An mmapable array's values start on a page, and the window's
// size is a multiple of 64 bytes, so every window's bytes start on a 64-byte line.
#define CFI_PAGE_BYTES 4096
#define CFI_WINDOW_PAGES 8  // a power of two, at most 32 (the bits of `read`)
#define CFI_WINDOW_BYTES (CFI_WINDOW_PAGES * CFI_PAGE_BYTES)
struct cfi_window {
  __u8 bytes[CFI_WINDOW_BYTES];  // sp's page, then the pages above it
  __u64 page;                    // user address of bytes[0]: the start of sp's page
  __u32 first;                   // offset of sp in bytes (the window's start)
  __u32 end;                     // the window's end offset: all of it, or first when sp's page is unreadable
  __u32 read;                    // bit p: page p holds the stack (sp's page from `first`)
  __u32 unreadable;              // bit p: page p could not be read
  __u8 line_padding[40];         // to a multiple of 64 bytes
};
_Static_assert(sizeof(struct cfi_window) % 64 == 0, "each window must start on a 64-byte line");
#define CFI_WINDOW_SLOTS 3
// Sized by user space before load: CFI_WINDOW_SLOTS per possible CPU.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(map_flags, BPF_F_MMAPABLE);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, struct cfi_window);
} cfi_windows SEC(".maps");

// Reads the part of the window in sp's page.
static __always_inline void cfi_fill_window(struct cfi_window* w, __u64 sp) {
  const __u32 first = (__u32)(sp & (CFI_PAGE_BYTES - 1));
  w->page = sp - first;
  w->first = first;
  w->end = CFI_WINDOW_BYTES;
  w->read = 1;
  w->unreadable = 0;
  const __u32 n = CFI_PAGE_BYTES - first;
  if (first >= CFI_PAGE_BYTES || bpf_probe_read_user(&w->bytes[first], n, (const void*)sp) != 0) {
    w->end = first;  // sp's page unreadable: no window, every read goes to the stack
    w->read = 0;
  }
}

// Makes window page p valid, reading it if need be; 0 when it is.
static __always_inline int cfi_window_page(struct cfi_window* w, __u32 p) {
  // Masked, not compared: the verifier needs the bound on the very register that indexes.
  p &= CFI_WINDOW_PAGES - 1;
  const __u32 bit = 1u << p;
  if (w->read & bit) return 0;
  if (w->unreadable & bit) return -1;
  if (bpf_probe_read_user(&w->bytes[p * CFI_PAGE_BYTES], CFI_PAGE_BYTES,
                          (const void*)(w->page + (__u64)p * CFI_PAGE_BYTES)) != 0) {
    w->unreadable |= bit;
    return -1;
  }
  w->read |= bit;
  return 0;
}

// Makes bytes [off, off + size) of the window valid (off at least first, off + size at most end),
// reading the pages they lie in if need be; 0 when they are.
static __always_inline int cfi_window_need(struct cfi_window* w, __u32 off, __u32 size) {
  const __u32 lo = off / CFI_PAGE_BYTES;
  const __u32 hi = (off + size - 1) / CFI_PAGE_BYTES;
  if (cfi_window_page(w, lo) != 0) return -1;
  return hi == lo ? 0 : cfi_window_page(w, hi);
}

// Reads `size` (8 or 16) bytes of the user stack at `addr`: from the window when it covers them
// (-1 when they lie in its unreadable part), else from the stack.
static __always_inline int cfi_read(struct cfi_window* w, void* out, __u64 addr, __u32 size) {
  if (w && addr >= w->page + w->first && addr < w->page + w->end) {
    const __u64 off = addr - w->page;
    if (off + size <= w->end) {
      if (cfi_window_need(w, (__u32)off, size) != 0) return -1;
      // Bounds the verifier can see on the register that indexes (always true here: off + size is
      // at most the window's end).
      if (size == 16) {
        if (off > CFI_WINDOW_BYTES - 16) return -1;
        __builtin_memcpy(out, &w->bytes[off], 16);
      } else {
        if (off > CFI_WINDOW_BYTES - 8) return -1;
        __builtin_memcpy(out, &w->bytes[off], 8);
      }
      return 0;
    }
  }
  return bpf_probe_read_user(out, size == 16 ? 16 : 8, (const void*)addr);
}

// Reads 8 bytes (a return address or a saved register) at `addr`.
static __always_inline int cfi_read8(struct cfi_window* w, __u64* out, __u64 addr) {
  return cfi_read(w, out, addr, 8);
}

// Reads a saved rbp and return address pair (16 bytes) at `addr`.
static __always_inline int cfi_read16(struct cfi_window* w, struct user_frame* out, __u64 addr) {
  return cfi_read(w, out, addr, 16);
}

// Row arrays of up to 16 M rows per module (a step more than their log2, for the search's last step).
#define CFI_ROW_SEARCH_STEPS 25
// Mappings: HPD_MAX_PROC_MAPPINGS is 2^8.
#define CFI_MAPPING_SEARCH_STEPS 9

// The loops of the walk (the frames, the mapping search, the row search) run under bpf_loop, their state
// in memory the callback reaches through a pointer: the verifier checks a step once or twice, where it
// checked a bounded loop's body once per iteration, in each of the three programs that walk (those loops
// were 15,000 of the on-CPU program's 33,743 instructions; a binary search as a bounded loop made it
// follow every path of its branches). Each bpf_loop step is a call, so a step does as much as the
// verifier allows cheaply: docs/performance.md, "The verifier's pass, cut again".
struct cfi_mapping_search {
  const struct hpd_proc_mappings* maps;
  __u64 pc;
  __u32 lo;  // the last mapping starting at or below pc is lo - 1 once lo == hi
  __u32 hi;
};

// One step of the binary search for the mapping holding pc (a bpf_loop callback); 1 when it is over.
// One step a callback: three cost the verifier six times as much, and most frames are in their
// caller's mapping, which needs no search.
static long cfi_mapping_search_step(__u64 index, struct cfi_mapping_search* s) {
  const struct hpd_proc_mappings* maps = s->maps;
  if (!maps || s->lo >= s->hi) return 1;
  const __u32 mid = s->lo + (s->hi - s->lo) / 2;
  // Masked, not compared: the verifier needs the bound on the very register that indexes.
  if (s->pc < maps->mappings[mid & (HPD_MAX_PROC_MAPPINGS - 1)].start)
    s->hi = mid;
  else
    s->lo = mid + 1;
  return 0;
}

// The index of the mapping holding `pc`, or -1: the previous frame's (`hint`) first, most callers
// being in the same module, else a binary search over the mappings, which user space sorts by start
// (a bounded loop of its steps made the verifier follow every path of its branches).
__attribute__((noinline)) int cfi_find_mapping(const struct hpd_proc_mappings* maps, __u64 pc, __u32 hint) {
  if (!maps) return -1;
  const __u32 count = maps->count > HPD_MAX_PROC_MAPPINGS ? HPD_MAX_PROC_MAPPINGS : maps->count;
  // Masked, not compared: the verifier needs the bound on the very register that indexes.
  const __u32 h = hint & (HPD_MAX_PROC_MAPPINGS - 1);
  if (h < count) {
    const struct hpd_proc_mapping* m = &maps->mappings[h];
    if (pc >= m->start && pc < m->end) return (int)h;
  }
  struct cfi_mapping_search s = {.maps = maps, .pc = pc, .lo = 0, .hi = count};
  bpf_loop(CFI_MAPPING_SEARCH_STEPS, cfi_mapping_search_step, &s, 0);
  if (s.lo == 0 || s.lo > count) return -1;  // below the first mapping
  const __u32 i = (s.lo - 1) & (HPD_MAX_PROC_MAPPINGS - 1);
  return pc < maps->mappings[i].end ? (int)i : -1;
}

struct cfi_row_search {
  __u32 lo;  // the row covering vaddr is the last of [first, hi) at or below it: lo - 1 at the end
  __u32 hi;
  __u32 vaddr;
  __u32 failed;  // a row could not be looked up
};

// One step of the binary search for the last row at or below vaddr; 1 when it is over.
static __always_inline long cfi_row_search_next(struct cfi_row_search* s) {
  if (s->lo >= s->hi) return 1;
  __u32 mid = s->lo + (s->hi - s->lo) / 2;
  const struct hpd_cfi_row* row = bpf_map_lookup_elem(&cfi_rows, &mid);
  if (!row) {
    s->failed = 1;
    return 1;
  }
  if (s->vaddr < row->pc)
    s->hi = mid;
  else
    s->lo = mid + 1;
  return 0;
}

// The same as a bpf_loop callback.
static long cfi_row_search_step(__u64 index, struct cfi_row_search* s) {
  return cfi_row_search_next(s);
}

// The row search's steps taken inline, before any under bpf_loop: a bucket of the index names a few
// rows (its buckets are at most a quarter as many as the rows), and four steps search up to 15 to the end.
#define CFI_ROW_INLINE_STEPS 4

// The rule of the row covering `vaddr` among rows [first, first + count) into *out; 0 when found.
__attribute__((noinline)) int cfi_find_row(__u32 first, __u32 count, __u32 vaddr, struct hpd_cfi_rule* out) {
  if (!out || count == 0) return -1;
  struct cfi_row_search s = {.lo = first, .hi = first + count, .vaddr = vaddr};
  int more = 1;
#pragma unroll
  for (int i = 0; i < CFI_ROW_INLINE_STEPS; i++) {
    if (cfi_row_search_next(&s) != 0) {
      more = 0;
      break;
    }
  }
  if (more) bpf_loop(CFI_ROW_SEARCH_STEPS, cfi_row_search_step, &s, 0);
  if (s.failed || s.lo == first) return -1;  // below the module's first row
  __u32 index = s.lo - 1;
  const struct hpd_cfi_row* row = bpf_map_lookup_elem(&cfi_rows, &index);
  if (!row) return -1;
  __u32 rule_index = row->rule;
  const struct hpd_cfi_rule* rule = bpf_map_lookup_elem(&cfi_rules, &rule_index);
  if (!rule) return -1;
  *out = *rule;
  return 0;
}

// One frame-pointer step: [rbp] is the caller's rbp, [rbp + 8] the return address.
static __always_inline int cfi_fp_step(struct cfi_regs* r, struct cfi_window* w) {
  // rbp = 0 is the start-up code's marker of the outermost frame, but only for a callee's rbp: at the
  // sampled leaf of code without frame pointers it is just a value.
  if (r->bp == 0) return r->exact ? HPD_USER_END_FP_BROKEN : HPD_USER_END_FP_ZERO;
  if ((r->bp & 7) != 0 || r->bp < r->sp || r->bp - r->sp > USER_STACK_REACH) return HPD_USER_END_FP_BROKEN;
  struct user_frame frame;
  if (cfi_read16(w, &frame, r->bp) != 0) return HPD_USER_END_READ_FAULT;
  if (frame.ret == 0) return HPD_USER_END_ROOT;
  if (calls_runtime_active) frame.ret = calls_real_return(frame.ret, r->bp + 8);
  if (r->uprobes) frame.ret = uretprobe_real_return(frame.ret, r->bp + 8);
  r->sp = r->bp + 16;
  r->bp = frame.next;
  r->ip = frame.ret;
  r->exact = 0;
  r->fp_frames += 1;
  return 0;
}

// bpf_find_vma's callback: whether the mapping holding the pc may get a table: it maps a file, or it is a
// special mapping the kernel made (vm_ops set without a file: the uprobes' pages, which hpd has rows for
// and learns of from their mmap records; anonymous memory has no vm_ops).
static long cfi_vma_maps_file(struct task_struct* task, struct vm_area_struct* vma, void* data) {
  // Through an untrusted view, as untrusted_task() says.
  const struct vm_area_struct* v = bpf_rdonly_cast(vma, bpf_core_type_id_kernel(struct vm_area_struct));
  *(__u32*)data = v->vm_file != 0 || v->vm_ops != 0;
  return 0;
}

// Whether `pc`, in none of the process's published mappings, lies in a mapping of a file: one made
// since user space last published the process (a library being loaded, dlopen), whose table will come.
// The same for a special mapping the kernel made since: the page a nop5 uprobe's first hit maps
// ([uprobes-trampoline]) or the return probes' [uprobes] page. Beside four CPU hogs, where user space
// reads the mmap records late, 3-11% of the on-CPU samples of a program spinning through nop5 probes
// stopped at that page before it was published (calls_pid_latency_test). Anonymous code (JIT) has none. When the mappings cannot be looked at (bpf_find_vma fails with EBUSY
// while another thread holds the mm's lock to map or unmap: a thread starting, with its stack being
// mapped, as the process's first threads do while ld.so's libraries are still being published), the
// pc is taken for a new file's: the walk is flagged, its stack copied, and user space walks it again
// once the process is published (where no table covers the pc then, the record keeps this walk). Taken
// for anonymous code instead, the first waits of a program starting threads kept their frame-pointer
// walk (seen in CI: 1 of 80 early waits).
static __always_inline int cfi_pc_in_new_file(__u64 pc) {
  __u32 file = 0;
  const long err = bpf_find_vma(bpf_get_current_task_btf(), pc, cfi_vma_maps_file, &file, 0);
  if (err == -16) return 1;  // -EBUSY: the mm's lock is taken
  return err == 0 && file != 0;  // -ENOENT: in no mapping at all (a broken frame-pointer chain)
}

// hpd_x86_call_length_before's FF positions, one per bpf_loop step: the verifier checks one step's
// paths, not six unrolled positions'. With [sp] read directly, this step costs each walking program about
// 680 instructions of verifying (3,300 with the positions unrolled and [sp] read through the window).
struct cfi_call_check {
  unsigned char before[8];  // the 8 bytes below a return address
  __u32 found;              // an FF /2 call ends there
};
static long cfi_ff_call_step(__u64 index, struct cfi_call_check* c) {
  if (hpd_x86_ff_call_length_at(c->before, (unsigned)(index & 7) + 1) == 0) return 0;
  c->found = 1;
  return 1;
}

// The sampled frame (or the one a signal interrupted) in code no table covers, JIT code above all: a
// leaf that set up no frame (a stub, a small loop) has its return address at [sp], and a frame-pointer
// step reads its caller's frame instead, so that the caller is lost (a JIT loop called from main showed
// under __libc_start_call_main). [sp] is taken for the return address when it points into a module
// with a table, right after a call instruction (hpd_x86_call_length_before): a frame that pushed rbp
// has a saved rbp or a local there, neither of which passes. 1 when taken. The user-space walks
// (hpd/unwind/unwinder.h, collect/src/bpf/cfi_user_walk.cpp) take the same step.
static __always_inline int cfi_leaf_return_at_sp(const struct hpd_proc_mappings* maps, struct cfi_regs* r) {
  // Read from the stack, not through the window (whose reads, inlined, cost the verifier hundreds of
  // instructions each): this step is rare. A return address a probe's trampoline took over is not
  // followed here (the trampoline's page has no call before it: the frame pointer is).
  __u64 ra = 0;
  if (bpf_probe_read_user(&ra, sizeof ra, (const void*)r->sp) != 0 || ra < 8) return 0;
  const int index = cfi_find_mapping(maps, ra - 1, r->mapping);
  if (!maps || index < 0 || index >= HPD_MAX_PROC_MAPPINGS) return 0;
  if (maps->mappings[index & (HPD_MAX_PROC_MAPPINGS - 1)].row_count == 0) return 0;
  struct cfi_call_check check = {};
  if (bpf_probe_read_user(check.before, sizeof check.before, (const void*)(ra - 8)) != 0) return 0;
  if (check.before[3] != 0xe8) {
    bpf_loop(6, cfi_ff_call_step, &check, 0);
    if (!check.found) return 0;
  }
  r->ip = ra;
  r->sp += 8;
  r->exact = 0;
  r->mapping = (__u32)index;
  return 1;
}

// A step from a pc no table row covers: right after a clone system call, its child's root or the
// parent's frameless frame (clone_side_of); a sampled frame whose return address is at [sp]
// (cfi_leaf_return_at_sp); else by frame pointer.
static __always_inline int cfi_step_without_row(const struct hpd_proc_mappings* maps, struct cfi_regs* r,
                                                struct cfi_window* w, __u32 clone) {
  if (clone == CFI_CLONE_CHILD) {
    // The whole stack, whatever tables are still to come: no second walk (which cannot tell).
    r->pending = 0;
    return HPD_USER_END_ROOT;
  }
  if (clone != CFI_CLONE_PARENT) {
    if (r->exact && cfi_leaf_return_at_sp(maps, r)) return 0;
    return cfi_fp_step(r, w);
  }
  __u64 ra = 0;
  if (cfi_read8(w, &ra, r->sp) != 0) return HPD_USER_END_READ_FAULT;
  if (ra == 0) return HPD_USER_END_ROOT;
  if (calls_runtime_active) ra = calls_real_return(ra, r->sp);
  if (r->uprobes) ra = uretprobe_real_return(ra, r->sp);
  r->ip = ra;
  r->sp += 8;
  r->exact = 0;
  return 0;
}

// How cfi_rule_of found no rule: step without one (cfi_step_without_row), or by frame pointer whatever
// side of a clone the frame is on.
#define CFI_NO_ROW 1
#define CFI_NO_ROW_FP 2

// The rule of the row covering `pc` into *row: 0 when there is one, else CFI_NO_ROW or CFI_NO_ROW_FP.
// Notes in *r a table that is still to come.
static __always_inline int cfi_rule_of(const struct hpd_proc_mappings* maps, struct cfi_regs* r, __u64 pc,
                                       struct hpd_cfi_rule* row) {
  const int index = cfi_find_mapping(maps, pc, r->mapping);
  if (!maps || index < 0 || index >= HPD_MAX_PROC_MAPPINGS) {
    if (!maps || (!r->pending && cfi_pc_in_new_file(pc))) r->pending = 1;
    return CFI_NO_ROW;
  }
  r->mapping = (__u32)index;
  const struct hpd_proc_mapping* m = &maps->mappings[index & (HPD_MAX_PROC_MAPPINGS - 1)];
  if (m->row_count == 0) {
    if (m->flags & HPD_MAPPING_PENDING) r->pending = 1;
    return CFI_NO_ROW;
  }
  const __u64 vaddr = pc - m->bias;
  if (vaddr > 0xffffffffull) return CFI_NO_ROW_FP;
  __u32 first = m->row_first;
  __u32 count = m->row_count;
  if (m->index_count != 0) {
    // Below the first row there is no CFI; past the last bucket, the last one (it runs to the end).
    if ((__u32)vaddr < m->index_base) return CFI_NO_ROW;
    __u32 bucket = ((__u32)vaddr - m->index_base) >> (m->index_shift & 31);
    if (bucket >= m->index_count) bucket = m->index_count - 1;
    bucket += m->index_first;
    const struct hpd_cfi_bucket* b = bpf_map_lookup_elem(&cfi_index, &bucket);
    if (!b || b->first >= count || b->count > count - b->first) return CFI_NO_ROW_FP;
    first += b->first;
    count = b->count;
  }
  // Code no FDE covers (hand-written assembly, objects built without unwind tables): the frame
  // pointer, as the DWARF unwinder does.
  if (cfi_find_row(first, count, (__u32)vaddr, row) != 0 || row->cfa_kind == HPD_CFA_NONE) return CFI_NO_ROW;
  return 0;
}

// A signal frame's saved rbp, rsp and rip (struct rt_sigframe's uc_mcontext), read at once.
struct cfi_sigframe_regs {
  __u64 regs[(HPD_SIGFRAME_RIP - HPD_SIGFRAME_RBP) / 8 + 1];
};

// One step from the frame in *r to its caller; 0 to go on, else how the walk ended (enum hpd_user_end).
// Each of its stack reads is inlined (a call per read cost about 25 ns a frame): the ways without a
// row share one step, so that each read is there once or twice.
__attribute__((noinline)) int cfi_step(const struct hpd_proc_mappings* maps, struct cfi_regs* r,
                                       struct cfi_window* w) {
  if (!r) return HPD_USER_END_READ_FAULT;
  // Only the sampled frame is at the system call, and has its rdi.
  const __u32 clone = r->clone;
  r->clone = CFI_CLONE_NONE;
  const __u32 di_known = r->di_known;
  r->di_known = 0;
  // A return address may follow a call that never returns, at the very end of a function.
  const __u64 pc = r->exact ? r->ip : r->ip - 1;
  struct hpd_cfi_rule row = {};
  const int found = cfi_rule_of(maps, r, pc, &row);
  if (found != 0) return cfi_step_without_row(maps, r, w, found == CFI_NO_ROW ? clone : CFI_CLONE_NONE);

  __u64 cfa = 0;
  __u64 ra = 0;
  __u64 bp = r->bp;
  __u32 exact = 0;
  __u32 ra_in_register = 0;
  switch (row.cfa_kind) {
    case HPD_CFA_RSP: cfa = r->sp + (__s64)row.cfa_offset; break;
    case HPD_CFA_RSP_RA_RDI:
      // glibc's vfork keeps its return address in rdi across the system call.
      if (!di_known) return HPD_USER_END_UNSUPPORTED;
      cfa = r->sp + (__s64)row.cfa_offset;
      ra = r->di;
      ra_in_register = 1;
      break;
    case HPD_CFA_RBP: cfa = r->bp + (__s64)row.cfa_offset; break;
    case HPD_CFA_PLT:
      cfa = r->sp + (__s64)row.cfa_offset + ((r->ip & 15) >= (__u64)row.rbp_offset ? 8 : 0);
      break;
    case HPD_CFA_SIGNAL: {
      // Rare: read from the stack, not through the window.
      struct cfi_sigframe_regs saved;
      if (bpf_probe_read_user(&saved, sizeof saved, (const void*)(r->sp + HPD_SIGFRAME_RBP)) != 0)
        return HPD_USER_END_READ_FAULT;
      bp = saved.regs[0];
      cfa = saved.regs[(HPD_SIGFRAME_RSP - HPD_SIGFRAME_RBP) / 8];
      ra = saved.regs[(HPD_SIGFRAME_RIP - HPD_SIGFRAME_RBP) / 8];
      exact = 1;  // the interrupted pc, not a return address
      break;
    }
    case HPD_CFA_OUTERMOST: return HPD_USER_END_ROOT;
    default: return HPD_USER_END_UNSUPPORTED;
  }
  if (!exact && !ra_in_register && row.rbp_kind == HPD_RBP_AT_CFA && row.rbp_offset == -16) {
    // rbp pushed right below the return address (every frame-pointer prologue): one read for both.
    struct user_frame saved;
    if (cfi_read16(w, &saved, cfa - 16) != 0) return HPD_USER_END_READ_FAULT;
    bp = saved.next;
    ra = saved.ret;
    if (cfa <= r->sp) return HPD_USER_END_NO_GROWTH;
  } else if (!exact) {
    if (!ra_in_register && cfi_read8(w, &ra, cfa - 8) != 0) return HPD_USER_END_READ_FAULT;
    if (row.rbp_kind == HPD_RBP_AT_CFA) {
      if (cfi_read8(w, &bp, cfa + (__s64)row.rbp_offset) != 0) return HPD_USER_END_READ_FAULT;
    } else if (row.rbp_kind != HPD_RBP_SAME) {
      bp = 0;
    }
    // Each frame lies above its callee (only a signal frame may switch stacks). The interrupted
    // frame may have CFA = sp: the first instruction of code entered by a `ret`, such as the calls
    // runtime's return trampoline (its return address is then just below sp).
    if (cfa < r->sp || (cfa == r->sp && !r->exact)) return HPD_USER_END_NO_GROWTH;
  }
  if (ra == 0) return HPD_USER_END_ROOT;
  if (!exact && !ra_in_register && calls_runtime_active) ra = calls_real_return(ra, cfa - 8);
  if (!exact && !ra_in_register && r->uprobes) ra = uretprobe_real_return(ra, cfa - 8);
  r->ip = ra;
  r->sp = cfa;
  r->bp = bp;
  r->exact = exact;
  return 0;
}

struct cfi_walk_ctx {
  const struct hpd_proc_mappings* maps;
  struct cfi_regs* r;
  struct cfi_window* w;
  struct user_frames* out;
};

// One step of walk_user_cfi: 1 once the walk has ended (r->end says how).
static __always_inline long cfi_walk_next(struct cfi_walk_ctx* c) {
  struct cfi_regs* r = c->r;
  struct user_frames* out = c->out;
  if (!r || !out) return 1;
  const __u32 i = r->frames;
  if (i >= HPD_MAX_USER_FRAMES) return 1;  // HPD_USER_END_DEPTH, set before the loop
  const int how = cfi_step(c->maps, r, c->w);
  if (how != 0) {
    r->end = how;
    return 1;
  }
  out->ips[i & (HPD_MAX_USER_FRAMES - 1)] = r->ip;
  r->frames = i + 1;
  return 0;
}

// Frames per bpf_loop step of walk_user_cfi: each step is a call, and the verifier checks each frame of a
// step apart (two dozen instructions each, around the call to cfi_step).
#define CFI_FRAMES_PER_LOOP_STEP 8

// CFI_FRAMES_PER_LOOP_STEP steps of walk_user_cfi (a bpf_loop callback).
static long cfi_walk_steps(__u64 index, struct cfi_walk_ctx* c) {
#pragma unroll
  for (int k = 0; k < CFI_FRAMES_PER_LOOP_STEP; k++)
    if (cfi_walk_next(c) != 0) return 1;
  return 0;
}

// The user stack by the tables into out[0..HPD_MAX_USER_FRAMES): the pc, then one return address
// per frame; returns how many, and how the walk ended in *end. CFI_FRAMES_PER_LOOP_STEP steps per
// bpf_loop iteration, their count kept in *r (memory the caller owns, whose values the verifier does not
// follow).
__attribute__((noinline)) __u64 walk_user_cfi(struct user_frames* out, struct cfi_regs* r, __s32 pid,
                                              __u32* end, __u32 window_slot) {
  if (!out || !r || !end) return 0;
  const struct hpd_proc_mappings* maps = bpf_map_lookup_elem(&proc_mappings, &pid);
  const __u32 window_key = bpf_get_smp_processor_id() * CFI_WINDOW_SLOTS + window_slot;
  struct cfi_window* w = bpf_map_lookup_elem(&cfi_windows, &window_key);
  if (w) cfi_fill_window(w, r->sp);
  r->uprobes = uretprobe_walk_begin();
  out->ips[0] = r->ip;
  r->frames = 1;
  r->end = HPD_USER_END_DEPTH;
  struct cfi_walk_ctx c = {.maps = maps, .r = r, .w = w, .out = out};
  bpf_loop((HPD_MAX_USER_FRAMES - 1 + CFI_FRAMES_PER_LOOP_STEP - 1) / CFI_FRAMES_PER_LOOP_STEP, cfi_walk_steps,
           &c, 0);
  const __u32 n = r->frames > HPD_MAX_USER_FRAMES ? HPD_MAX_USER_FRAMES : r->frames;
  *end = r->end;
  // Full: if the next step would end at the root, the stack is complete all the same.
  if (r->end == HPD_USER_END_DEPTH && n == HPD_MAX_USER_FRAMES) {
    const int how = cfi_step(maps, r, w);
    if (how == HPD_USER_END_ROOT || how == HPD_USER_END_FP_ZERO) *end = how;
  }
  return n;
}

#endif
