// The allocator entry points a module defines, read from its symbol tables: the C library's names
// (malloc, free, ...) in its dynamic symbol table, and the entry points of allocators that go by other
// names (mimalloc's mi_*, jemalloc built with a prefix, je_* or Rust's tikv-jemallocator's _rjem_*,
// gperftools' tcmalloc's tc_*), in .symtab or .dynsym, so that an allocator linked statically is found
// too. `--alloc --pid` probes them all (alloc_probes.h); `--alloc -- CMD`, whose preloaded runtime
// interposes only the C library's names, says which modules' allocations it did not see.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpd {
struct RawProfile;
}

namespace hpd::calls {

// What an entry point's arguments are, as one of the C library's functions takes them (the values of
// enum hpd_alloc_fn, bpf/alloc_event.h: the probe's cookie).
enum class AllocatorCall : uint32_t {
  kMalloc = 0,         // (size, ...): malloc, mi_malloc_aligned(size, alignment), mallocx(size, flags)
  kCalloc = 1,         // (n, size, ...)
  kRealloc = 2,        // (ptr, size, ...): NULL when it fails, ptr freed when it does not
  kFree = 3,           // (ptr, ...): free, sdallocx(ptr, size, flags)
  kPosixMemalign = 4,  // (&ptr, alignment, size)
  kAlignedAlloc = 5,   // (alignment, size)
};

struct AllocatorFunction {
  std::string name;
  uint64_t offset = 0;  // in the file, where the probe goes
  AllocatorCall call = AllocatorCall::kMalloc;
  // Only for the C library's names: its index in kAllocatorFunctions (hpd_alloc_fn), whose valloc,
  // memalign and pvalloc have arguments of their own.
  uint32_t cookie = 0;
  // Of an entry point under another name: the C library's name at the same address in `standard`
  // (libmimalloc.so's malloc is mi_malloc), or an earlier family's (its mi_new is its operator new),
  // whose probe sees its calls too; empty if none.
  std::string alias_of;
  // It calls another of the module's entry points that `--pid` probes (libtcmalloc's posix_memalign
  // calls its memalign): while it runs, the probes look at those calls as its own, not again.
  bool wraps = false;
};

// One allocator under other names in one module.
struct OtherAllocator {
  std::string family;                        // "mimalloc", "jemalloc built with the prefix je_", ...
  std::vector<AllocatorFunction> functions;  // in the table's order; one per address
  // Found only in a module that defines malloc, and probed there beside the C library's names (C++'s
  // operator new and delete of jemalloc, tcmalloc, mimalloc; jemalloc's mallocx, ...).
  bool beside_malloc = false;
};

struct ModuleAllocators {
  std::vector<AllocatorFunction> standard;  // the C library's names in .dynsym, one per address
  // Entry points under other names, one per address.
  std::vector<OtherAllocator> others;
};

// The C library's allocator functions, in the order a message names them (hpd_alloc_fn's order).
extern const char* const kAllocatorFunctions[];
extern const size_t kAllocatorFunctionCount;

// What `file` (an ELF file; anything else: nothing) defines. Never throws.
ModuleAllocators module_allocators(const std::string& file);

// `--alloc -- CMD`: the summary's words for each allocator under other names in the modules the
// recorded processes mapped, whose entry points the preloaded runtime does not interpose (it sees
// malloc, free, ... only): their allocations were not seen.
std::vector<std::string> allocators_not_seen(const RawProfile& profile);

// "mi_malloc, mi_calloc, mi_free" for a message.
std::string function_names(const std::vector<AllocatorFunction>& functions);

}  // namespace hpd::calls
