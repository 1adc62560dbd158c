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
  uint64_t total = 0;  // every sample in it and in what was inlined into it
  uint64_t head = 0;   // top level only: the samples at its entry location
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

// The symbol order: the real functions with samples, most first, one name a line (lld's
// --symbol-ordering-file, gold's --section-ordering-file with -ffunction-sections names).
void write_symbol_order(const LlvmSampleProfile& profile, std::ostream& out);

}  // namespace hpd
