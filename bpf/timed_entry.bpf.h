// The map the call-timing program (calls.bpf.c) shares with the sampling programs (profile.bpf.c):
// per thread, the stack slot and return address of its latest timed call, written at the call's entry.
//
// The kernel's return probe replaces a timed call's return address with its [uprobes] trampoline in
// prepare_uretprobe(), after the entry program ran, and links the return instance that keeps the
// original a few steps later. A sample taken in between (the thread is in the kernel, its user pc at the
// function's entry) finds the trampoline at the slot and no instance naming it: only this entry has the
// original then. Both objects define the map identically; user space creates it with the sampling
// object and hands its descriptor to the timing one before that one is loaded (bpf_map__reuse_fd).
#ifndef HPD_TIMED_ENTRY_BPF_H
#define HPD_TIMED_ENTRY_BPF_H

struct hpd_timed_entry {
  __u64 slot;  // the return address's slot: sp at the function's first instruction
  __u64 ret;   // the return address there before the kernel replaced it
};

// Allocated as threads make their first timed call (a recording without timed calls pays nothing);
// the sampling programs delete a target thread's entry when it exits.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __uint(max_entries, 65536);
  __type(key, __u32);  // tid
  __type(value, struct hpd_timed_entry);
} timed_entries SEC(".maps");

#endif
