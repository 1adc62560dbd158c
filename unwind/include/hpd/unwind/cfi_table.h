// Compact CFI tables: a module's .eh_frame (and .debug_frame) compiled into sorted rows that say, per
// pc range, how to find the caller (CFA from rsp or rbp, saved rbp, return address at CFA-8). The
// eBPF programs unwind user stacks with these rows in the kernel (bpf/cfi_walk.bpf.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace hpd {

// How a row finds the CFA (the caller's rsp). Same numbers as HPD_CFA_* in bpf/profile_event.h.
enum class CfaKind : uint8_t {
  kNone = 0,         // no CFI covers this pc (a gap between FDEs)
  kRsp = 1,          // rsp + cfa_offset
  kRbp = 2,          // rbp + cfa_offset
  kPlt = 3,          // rsp + cfa_offset + ((rip & 15) >= rbp_offset ? 8 : 0): the PLT's expression
  kSignal = 4,       // a signal trampoline: rsp points at the kernel's ucontext (x86-64 rt_sigframe)
  kOutermost = 5,    // the return address is undefined: the thread's first frame (_start, clone3)
  kUnsupported = 6,  // the return address is not at CFA-8, or the CFA is another expression
  // rsp + cfa_offset, and the return address is in rdi (glibc's vfork pops it there across the system
  // call, which the child returns from too): known only in the sampled frame, whose rdi was read.
  kRspRaInRdi = 7,
};

// Where the caller's rbp is. Same numbers as HPD_RBP_* in bpf/profile_event.h.
enum class RbpKind : uint8_t {
  kSame = 0,       // unchanged by this frame
  kAtCfa = 1,      // saved at CFA + rbp_offset
  kUndefined = 2,  // not recoverable (or in a form the rows do not express)
};

// One row, valid from `pc` (an ELF virtual address of the module) up to the next row's pc. The layout
// is struct hpd_cfi_row's (12 bytes).
struct CfiRow {
  uint32_t pc = 0;
  int32_t cfa_offset = 0;
  int16_t rbp_offset = 0;  // kAtCfa: the offset; kPlt rows: the (rip & 15) threshold
  uint8_t cfa_kind = 0;    // CfaKind
  uint8_t rbp_kind = 0;    // RbpKind
  bool same_rule(const CfiRow& o) const {
    return cfa_offset == o.cfa_offset && rbp_offset == o.rbp_offset && cfa_kind == o.cfa_kind &&
           rbp_kind == o.rbp_kind;
  }
};
static_assert(sizeof(CfiRow) == 12);

// The x86-64 Linux signal frame: when a handler returns into the trampoline (__restore_rt), rsp points at
// the ucontext; the interrupted registers are at these offsets (uc_mcontext at 40, then r8..r15, rdi,
// rsi, rbp, rbx, rdx, rax, rcx, rsp, rip).
inline constexpr int32_t kSigframeRbp = 120;
inline constexpr int32_t kSigframeRsp = 160;
inline constexpr int32_t kSigframeRip = 168;

// An index over a table's rows, so that a lookup searches a few rows instead of all of them (the eBPF
// walker's binary search over libc's 28,000 rows took 15 map lookups, most of a frame's cost). The
// module's code from `base` is cut into buckets of 2^shift bytes; bucket b lists the rows that cover
// any address in it: rows [first, first + count), counted from the module's first row. The last
// bucket runs to the last row. Same layout as struct hpd_cfi_bucket in bpf/profile_event.h.
struct CfiBucket {
  uint32_t first = 0;
  uint32_t count = 0;
};
struct CfiIndex {
  uint32_t base = 0;   // the first row's pc
  uint32_t shift = 0;  // log2 of the bucket size in bytes
  std::vector<CfiBucket> buckets;
  // The rows to search for `vaddr` (at or above base), as the eBPF walker computes them.
  CfiBucket bucket_of(uint64_t vaddr) const;
};
// Buckets of the smallest size (at least 16 bytes) that keeps their number at or below a quarter of
// the rows (so the index takes at most an eighth of the rows' memory in the eBPF maps): a few rows
// per bucket on average. Empty for an empty table.
CfiIndex build_cfi_index(const std::vector<CfiRow>& rows);

struct CfiTable {
  std::vector<CfiRow> rows;  // sorted by pc, adjacent rows with the same rule merged
  CfiIndex index;            // over `rows`
  std::string error;         // why there are no rows (or why .debug_frame could not be read)
  std::string opened_path;
  std::string build_id;           // of the file compiled (lower-case hex; empty when it has none)
  uint64_t fdes = 0;              // FDEs read (.eh_frame and .debug_frame)
  uint64_t cfi_rows = 0;          // CFI rows before merging
  uint64_t unsupported_rows = 0;  // rows marked kUnsupported (before merging)
  uint64_t debug_frame_fdes = 0;  // FDEs taken from .debug_frame (pcs .eh_frame does not cover)
  uint64_t build_ns = 0;          // time to compile
  // Why .eh_frame was read through libdw, which answers one pc at a time (what the one-pass reader does
  // not interpret); empty when it was not (or when CfiTableOptions asked for libdw). Not kept on disk.
  std::string eh_frame_through_libdw;
  // The module's PT_LOAD segments, to turn a mapping's file offset into the ELF address the rows use.
  struct Segment {
    uint64_t offset, filesz, vaddr;
    bool executable;
  };
  std::vector<Segment> segments;

  // ELF virtual address of the file offset an executable mapping starts at (page-aligned: with lld's
  // layout it lies before its segment's first byte, in the previous segment's range); false when no
  // segment holds it.
  bool vaddr_of(uint64_t file_offset, uint64_t* vaddr) const;

  // The row covering `vaddr`, or nullptr (before the first row, or beyond 4 GiB).
  const CfiRow* find(uint64_t vaddr) const;
  // The same through the index: a binary search within the vaddr's bucket only.
  const CfiRow* find_indexed(uint64_t vaddr) const;
  uint64_t bytes() const { return rows.size() * sizeof(CfiRow); }
};

// How two tables of one module differ, for the checks that compile it two ways (the one-pass .eh_frame
// reader against libdw: eh_frame_rows_test, cfi_compile_bench --sweep): empty when their error, counts,
// rows and index size are the same; else each difference, "; "-separated, rows up to the first five.
std::string cfi_table_difference(const CfiTable& a, const CfiTable& b);

struct CfiTableOptions {
  bool use_debug_frame = true;
  std::string debug_root = "/usr/lib/debug";
  // .eh_frame's rows through libdw, one pc at a time, rather than read in one pass per FDE (the same
  // rows, several times slower): for the test that compares the two.
  bool eh_frame_through_libdw = false;
};

// Compiles the table of the first candidate file whose build-id is `build_id` (any when empty). Never
// throws: a file that cannot be read, or has no usable CFI, gives a table without rows and an error.
std::shared_ptr<const CfiTable> compile_cfi_table(const std::vector<std::string>& candidates,
                                                  const std::string& build_id,
                                                  const CfiTableOptions& options);

// Compiles the table of an ELF image in memory (the vDSO, read from the target); `name` is for
// errors. The image need not outlive the table.
std::shared_ptr<const CfiTable> compile_cfi_table_image(std::span<const uint8_t> image,
                                                        const std::string& name);

// The page Linux (6.18, x86-64) maps as [uprobes-trampoline] in a process whose nop5 uprobes it
// optimized into a call there: push %rcx; push %r11; push %rax; mov $__NR_uprobe,%rax; syscall; pop %rax;
// pop %r11; pop %rcx; ret. It has no CFI of its own. Its length in bytes (18):
inline constexpr size_t kUprobeTrampolineCodeBytes = 18;
// Whether `code` (the page's first bytes) is that code, with any syscall number; `why` says how it
// differs.
bool is_uprobe_trampoline_code(std::span<const uint8_t> code, std::string* why);
// Rows for that code: the CFA is rsp + 8, 16, 24, 32 as the pushes go and back as the pops go, the
// return address (into the probed function, just past the call) at CFA-8, rbp untouched; no rows
// past the ret. One executable segment at offset 0 of a one-page mapping.
std::shared_ptr<const CfiTable> uprobe_trampoline_cfi_table();

// The start of the page Linux (x86-64, 6.11+) maps as [uprobes] in a process with return probes (the
// xol area: its first slot is the return probes' trampoline, the rest single-step displaced
// instructions): push %rax; push %rcx; push %r11; mov $__NR_uretprobe,%rax; syscall; pop %r11; pop %rcx;
// ret; int3. A timed call returns there: the kernel replaced its return address with the page's
// address and keeps the original in the thread's return instance (whose `stack` is the slot the address
// was in), and the syscall writes the original where rax was pushed, for the ret. Its length (18):
inline constexpr size_t kUretprobeTrampolineCodeBytes = 18;
// Whether `code` (the page's first bytes) is that code, with any syscall number; `why` says how it
// differs.
bool is_uretprobe_trampoline_code(std::span<const uint8_t> code, std::string* why);
// Rows for that code: the CFA (the replaced return address's slot + 8) is rsp + 0 at the first
// instruction (the ret into the page popped the slot), then rsp + 8, 16, 24 as the pushes go and back
// as the pops go; the return address at CFA-8 (the kernel's trampoline address, rax, or the original:
// the walk takes it from the pending return instance of that slot), rbp untouched. No rows from the
// int3 on (the other slots). One executable segment at offset 0 of a one-page mapping.
std::shared_ptr<const CfiTable> uretprobe_trampoline_cfi_table();

// Tables compiled once per module and kept (the daemon keeps them across recordings). Looked up by
// build-id when the caller knows it, else by path; a table found by path is also filed under its
// file's build-id. Bounded: once the tables kept take more than limit_bytes() (their rows, index and
// segments), the least recently used ones are dropped (a recording that uses one still holds it).
// Thread-safe.
class CfiTableCache {
 public:
  // The bound of the tables hpd keeps in memory across recordings (docs/architecture.md): about 300
  // tables of libc's size (28,000 rows).
  static constexpr uint64_t kDefaultLimitBytes = 128ull << 20;
  explicit CfiTableCache(CfiTableOptions options = {}, uint64_t limit_bytes = kDefaultLimitBytes)
      : options_(std::move(options)), limit_bytes_(limit_bytes) {}
  std::shared_ptr<const CfiTable> get(const std::string& path, const std::string& build_id,
                                      const std::vector<std::string>& candidates);
  // The same, with `make` instead of the compiler for a table not kept yet (the cache on disk, then the
  // compiler); a null from `make` is returned and not kept.
  // `identity` names the file the table is made from (device and inode): a table is shared by build-id
  // only between mappings of one file, as anyone can link a file with another file's build-id.
  using Make = std::function<std::shared_ptr<const CfiTable>()>;
  std::shared_ptr<const CfiTable> get(const std::string& path, const std::string& build_id, const Make& make,
                                      const std::string& identity = "");
  // The table kept for this module, or null (nothing is compiled).
  std::shared_ptr<const CfiTable> find(const std::string& path, const std::string& build_id,
                                       const std::string& identity = "") const;
  size_t size() const;
  // The memory the tables kept take (as counted against the bound), and the tables dropped for it.
  uint64_t bytes() const;
  uint64_t evicted() const;
  uint64_t limit_bytes() const;
  // A new bound (hpd.conf's max_kept_unwind_tables_mb, at start and on SIGHUP): a smaller one drops the
  // least recently used tables at once, down to it. Returns the number dropped.
  uint64_t set_limit_bytes(uint64_t limit_bytes);
  // size(), bytes(), limit_bytes() and evicted() read together (at one moment).
  struct Usage {
    uint64_t tables = 0;
    uint64_t bytes = 0;
    uint64_t limit_bytes = 0;
    uint64_t evicted = 0;
  };
  Usage usage() const;
  const CfiTableOptions& options() const { return options_; }
  // What a table kept counts against the bound.
  static uint64_t kept_bytes(const CfiTable& table);

 private:
  struct Entry {
    std::shared_ptr<const CfiTable> table;
    uint64_t last_used = 0;
  };
  void keep_locked(const std::string& key, const std::shared_ptr<const CfiTable>& table);
  void evict_locked(const std::string& keep);

  CfiTableOptions options_;
  uint64_t limit_bytes_;
  mutable std::mutex mutex_;
  mutable uint64_t clock_ = 0;  // the use clock of the entries
  uint64_t bytes_ = 0;
  uint64_t evicted_ = 0;
  // One table may be filed under two keys (path and build-id): its bytes are counted once per key.
  mutable std::unordered_map<std::string, Entry> tables_;
};

}  // namespace hpd
