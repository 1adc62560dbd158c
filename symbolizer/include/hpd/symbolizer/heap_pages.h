// Transparent huge pages for the heap of a process that symbolizes.
//
// Building a module's index touches tens of megabytes of fresh heap (line rows, subroutine
// spans and nodes, names). With glibc's default malloc and the usual THP setting "madvise",
// each 4 KiB of it costs a page fault, and on a virtual machine a fault is an exit to the
// hypervisor: on the PVM guests hpd is developed on, `hpctl symbolize` took 13,000 faults on
// a 55 MB-DWARF binary. glibc can ask for huge pages itself (GLIBC_TUNABLES=
// glibc.malloc.hugetlb=1), but a tunable must be set before the process starts and would then
// leak into the commands `hpctl record` launches. This does the same from inside: it makes
// malloc grow and keep its main heap in large steps and advises that heap MADV_HUGEPAGE.
//
// Process-wide and meant for short-lived command-line processes (hpctl), not for the daemon:
// the heap is no longer trimmed below `reserve_bytes`, and allocations up to 32 MiB come from
// the heap instead of their own mappings. Nothing of it survives exec, so commands started
// afterwards get the defaults. Only the main arena (the main thread's allocations) is covered.
#pragma once

#include <cstddef>
#include <string>

namespace hpd {

struct HeapPagesResult {
  bool advised = false;      // some of the heap is now MADV_HUGEPAGE
  size_t advised_bytes = 0;  // how much (2 MiB-aligned, inside [heap])
  std::string reason;        // why not, when !advised: THP disabled, no [heap], madvise failed
};

// Grows the main heap by about `reserve_bytes` now (and by as much at every later growth),
// stops malloc from trimming it, and advises the 2 MiB-aligned part of [heap] for huge pages.
// Safe to call more than once: a later call also covers what the heap has grown by since.
HeapPagesResult prefer_huge_pages_for_heap(size_t reserve_bytes = size_t{64} << 20);

}  // namespace hpd
