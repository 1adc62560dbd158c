// LLVM sample profile (text) and symbol order writers: sampled inline chains folded into LLVM's
// FunctionSamples shape (body samples by line offset and discriminator, inlined call sites nested).
#include <algorithm>
#include <ostream>
#include <string>

#include "hpd/export/error.h"
#include "hpd/export/llvm_sample.h"

namespace hpd {
namespace {

LineKey key_of(const SampleLevel& level) {
  // FunctionSamples::getOffset: (line - the subprogram's line) & 0xffff.
  return {(level.line - level.decl_line) & 0xffffu, level.discriminator};
}

void write_key(std::ostream& out, const LineKey& key) {
  out << key.first;
  if (key.second != 0) out << '.' << key.second;
}

void write_tree(const FunctionSampleTree& f, std::ostream& out, int indent) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  for (const auto& [key, samples] : f.body) {
    out << pad;
    write_key(out, key);
    out << ": " << samples << '\n';
  }
  for (const auto& [key, callees] : f.inlined) {
    // Most samples first at one call site, as llvm-profdata orders them.
    std::vector<const FunctionSampleTree*> sorted;
    for (const auto& [name, callee] : callees) sorted.push_back(&callee);
    std::stable_sort(
        sorted.begin(), sorted.end(),
        [](const FunctionSampleTree* a, const FunctionSampleTree* b) { return a->total > b->total; });
    for (const FunctionSampleTree* callee : sorted) {
      out << pad;
      write_key(out, key);
      out << ": " << callee->name << ':' << callee->total << '\n';
      write_tree(*callee, out, indent + 1);
    }
  }
}

}  // namespace

LlvmSampleProfile build_llvm_sample_profile(const std::vector<SampledSite>& sites,
                                            const std::map<std::string, FunctionEntry>& entries) {
  LlvmSampleProfile profile;
  std::map<std::string, FunctionSampleTree> top;
  for (const SampledSite& site : sites) {
    profile.samples += site.samples;
    const bool named =
        !site.levels.empty() && std::all_of(site.levels.begin(), site.levels.end(),
                                            [](const SampleLevel& l) { return !l.name.empty(); });
    if (!named || site.samples == 0) {
      profile.unlocated += site.samples;
      continue;
    }
    FunctionSampleTree* f = &top[site.levels.front().name];
    f->name = site.levels.front().name;
    for (size_t i = 0; i < site.levels.size(); ++i) {
      const SampleLevel& level = site.levels[i];
      f->total += site.samples;
      if (level.line == 0) {
        // No line to key it by (compiler-made code): it stays in the totals only.
        profile.unlocated += site.samples;
        break;
      }
      if (i + 1 == site.levels.size()) {
        f->body[key_of(level)] += site.samples;
        break;
      }
      const std::string& callee = site.levels[i + 1].name;
      FunctionSampleTree& next = f->inlined[key_of(level)][callee];
      next.name = callee;
      f = &next;
    }
  }
  for (auto& [name, f] : top) {
    if (const auto entry = entries.find(name); entry != entries.end() && entry->second.line != 0) {
      // The head samples: the body samples at the entry's location (decl line as in its sites).
      for (const SampledSite& site : sites) {
        if (site.levels.empty() || site.levels.front().name != name) continue;
        const SampleLevel at_entry{name, site.levels.front().decl_line, entry->second.line,
                                   entry->second.discriminator};
        const auto body = f.body.find(key_of(at_entry));
        f.head = body != f.body.end() ? body->second : 0;
        break;
      }
    }
    profile.functions.push_back(std::move(f));
  }
  std::stable_sort(
      profile.functions.begin(), profile.functions.end(),
      [](const FunctionSampleTree& a, const FunctionSampleTree& b) { return a.total > b.total; });
  return profile;
}

void write_llvm_sample_text(const LlvmSampleProfile& profile, std::ostream& out,
                            const std::vector<std::string>& comment) {
  for (const std::string& line : comment) out << "# " << line << '\n';
  for (const FunctionSampleTree& f : profile.functions) {
    out << f.name << ':' << f.total << ':' << f.head << '\n';
    write_tree(f, out, 1);
  }
  if (!out) throw ExportError("writing the LLVM sample profile failed");
}

void write_symbol_order(const LlvmSampleProfile& profile, std::ostream& out) {
  for (const FunctionSampleTree& f : profile.functions) {
    if (f.total != 0) out << f.name << '\n';
  }
  if (!out) throw ExportError("writing the symbol order failed");
}

}  // namespace hpd
