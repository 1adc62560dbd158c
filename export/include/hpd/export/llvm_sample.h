// LLVM's sample profile (the text form `clang -fprofile-sample-use` and `llvm-profdata` read) and a
// symbol order file, from sampled addresses of one binary located by their inline chains.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hpd {

// One level of a sampled address's inline chain, as LLVM keys code: the function's name as clang
// names it (the linkage name), its declaration line, and the line and base discriminator that
// execute at this level (for an outer level, the call site of the next one).
struct SampleLevel {
  std::string name;
  uint32_t decl_line = 0;
  uint32_t line = 0;  // 0 = unknown
  uint32_t discriminator = 0;
};

// The samples taken at one address: its chain, outermost (the real function) first.
struct SampledSite {
  std::vector<SampleLevel> levels;
  uint64_t samples = 0;
};

// Where a real function starts: the line and discriminator of its entry address (its outermost
// level), which its head samples are counted at.
struct FunctionEntry {
  uint32_t line = 0;
  uint32_t discriminator = 0;
};

// LLVM's location key: (line - the function's declaration line) & 0xffff, and the discriminator.
using LineKey = std::pair<uint32_t, uint32_t>;

// A function's samples, as LLVM's FunctionSamples holds them.
struct FunctionSampleTree {
  std::string name;
  uint32_t decl_line = 0;  // its declaration line, which the offsets are from
  uint64_t total = 0;      // every sample in it and in what was inlined into it
  uint64_t head = 0;       // top level only: the samples at its entry location
  std::map<LineKey, uint64_t> body;
  // Inlined call sites: by location, then by callee name.
  std::map<LineKey, std::map<std::string, FunctionSampleTree>> inlined;
};

struct LlvmSampleProfile {
  std::vector<FunctionSampleTree> functions;  // real functions, most samples first (then by name)
  uint64_t samples = 0;                       // all samples given
  uint64_t unlocated = 0;                     // samples at a line 0 or unknown line: in totals only
};

// Builds the functions from the sites. A site without levels or with a nameless level is
// dropped (counted in `unlocated`). Body samples go to the innermost level at its line; totals
// count every sample of the function and its inlined callees; head samples are a real function's
// body samples at the entry location given in `entries` (by name; none when absent).
LlvmSampleProfile build_llvm_sample_profile(const std::vector<SampledSite>& sites,
                                            const std::map<std::string, FunctionEntry>& entries);

// The text format: "name:total:head" per function, then " offset[.discriminator]: samples" body
// lines and " offset[.discriminator]: callee:total" inlined call sites, one more space of indent
// per level. `comment` lines (without '#') go first, each as "# ...".
void write_llvm_sample_text(const LlvmSampleProfile& profile, std::ostream& out,
                            const std::vector<std::string>& comment = {});

// LLVM's extensible binary sample profile (SPF_Ext_Binary, version 103, as LLVM 14's
// `llvm-profdata merge --extbinary` writes it): a header of ULEB128 magic and version and a table of
// sections (type, flags, offset, size: u64 little-endian each), then the sections: the profile
// summary (with LLVM's 16 detailed-summary cutoffs), the name table (sorted, NUL-terminated), an
// empty context name table, the function profiles (head, name index, total, body records, inlined
// call sites, recursively; ULEB128), the function offset table, an empty profile symbol list and
// empty function metadata. Comments have no place in it.
void write_llvm_sample_extbinary(const LlvmSampleProfile& profile, std::ostream& out);

// "decl-line NAME LINE" for every function of the profile (real and inlined, each name once): the
// lines its offsets are from, as comments for the text form so that `hpctl pgo-check` can tell
// whether a rebuilt binary moved them.
std::vector<std::string> declaration_line_comments(const LlvmSampleProfile& profile);

// An exact count of calls from one function to another (hpctl record --calls), by linkage name.
struct NamedCallEdge {
  std::string caller;
  std::string callee;
  uint64_t count = 0;
};

// The symbol order: without call edges, the real functions with samples, most first. With them,
// call-chain clustering: each callee's cluster is appended to the cluster of its most frequent
// caller, the most frequent calls first, so that a hot caller lies next to its callees; clusters go
// by their samples, then their calls. Functions that were called but never sampled are placed too.
// Ties: the function with more samples, then calls received, then by name.
std::vector<std::string> symbol_order(const LlvmSampleProfile& profile,
                                      const std::vector<NamedCallEdge>& edges = {});

// symbol_order, one name a line (lld's --symbol-ordering-file, gold's --section-ordering-file with
// -ffunction-sections names).
void write_symbol_order(const LlvmSampleProfile& profile, std::ostream& out,
                        const std::vector<NamedCallEdge>& edges = {});

}  // namespace hpd
