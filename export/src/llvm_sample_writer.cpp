// LLVM sample profile (text) and symbol order writers: sampled inline chains folded into LLVM's
// FunctionSamples shape (body samples by line offset and discriminator, inlined call sites nested).
#include <algorithm>
#include <array>
#include <ostream>
#include <set>
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
    f->decl_line = site.levels.front().decl_line;
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
      next.decl_line = site.levels[i + 1].decl_line;
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

namespace {

void put_uleb(std::string& out, uint64_t v) {
  do {
    uint8_t byte = v & 0x7f;
    v >>= 7;
    if (v != 0) byte |= 0x80;
    out.push_back(static_cast<char>(byte));
  } while (v != 0);
}

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void collect_names(const FunctionSampleTree& f, std::set<std::string>& names) {
  names.insert(f.name);
  for (const auto& [key, callees] : f.inlined) {
    for (const auto& [name, callee] : callees) collect_names(callee, names);
  }
}

// LLVM's SampleProfileSummaryBuilder: every body record's count, callees' included.
struct Summary {
  uint64_t total = 0, max_count = 0, max_function_count = 0, num_counts = 0, num_functions = 0;
  std::map<uint64_t, uint64_t, std::greater<>> frequencies;  // count -> how many records have it
  void add(const FunctionSampleTree& f, bool callee) {
    if (!callee) {
      ++num_functions;
      max_function_count = std::max(max_function_count, f.head);
    }
    for (const auto& [key, count] : f.body) {
      total += count;
      max_count = std::max(max_count, count);
      ++num_counts;
      ++frequencies[count];
    }
    for (const auto& [key, callees] : f.inlined) {
      for (const auto& [name, c] : callees) add(c, true);
    }
  }
};

// The profile of one function after its head: name index, total, body, inlined call sites.
void put_body(std::string& out, const FunctionSampleTree& f, const std::map<std::string, uint64_t>& index) {
  put_uleb(out, index.at(f.name));
  put_uleb(out, f.total);
  put_uleb(out, f.body.size());
  for (const auto& [key, count] : f.body) {
    put_uleb(out, key.first);
    put_uleb(out, key.second);
    put_uleb(out, count);
    put_uleb(out, 0);  // call targets: none (no branch records)
  }
  uint64_t sites = 0;
  for (const auto& [key, callees] : f.inlined) sites += callees.size();
  put_uleb(out, sites);
  for (const auto& [key, callees] : f.inlined) {
    for (const auto& [name, callee] : callees) {  // by name, as LLVM's FunctionSamplesMap
      put_uleb(out, key.first);
      put_uleb(out, key.second);
      put_body(out, callee, index);
    }
  }
}

}  // namespace

void write_llvm_sample_extbinary(const LlvmSampleProfile& profile, std::ostream& out) {
  std::set<std::string> names;
  for (const FunctionSampleTree& f : profile.functions) collect_names(f, names);
  std::map<std::string, uint64_t> index;
  for (const std::string& name : names) index.emplace(name, index.size());

  Summary summary;
  for (const FunctionSampleTree& f : profile.functions) summary.add(f, false);
  std::string summary_section;
  put_uleb(summary_section, summary.total);
  put_uleb(summary_section, summary.max_count);
  put_uleb(summary_section, summary.max_function_count);
  put_uleb(summary_section, summary.num_counts);
  put_uleb(summary_section, summary.num_functions);
  // ProfileSummaryBuilder::DefaultCutoffs, per million; each entry: the smallest count among the
  // hottest records that make up that share of the total, and how many records that is.
  constexpr std::array<uint64_t, 16> kCutoffs = {10000,  100000, 200000, 300000, 400000, 500000,
                                                 600000, 700000, 800000, 900000, 950000, 990000,
                                                 999000, 999900, 999990, 999999};
  put_uleb(summary_section, kCutoffs.size());
  auto it = summary.frequencies.begin();
  unsigned __int128 sum = 0;
  uint64_t count = 0, seen = 0;
  for (const uint64_t cutoff : kCutoffs) {
    const unsigned __int128 desired = static_cast<unsigned __int128>(summary.total) * cutoff / 1000000;
    while (sum < desired && it != summary.frequencies.end()) {
      count = it->first;
      sum += static_cast<unsigned __int128>(it->first) * it->second;
      seen += it->second;
      ++it;
    }
    put_uleb(summary_section, cutoff);
    put_uleb(summary_section, count);
    put_uleb(summary_section, seen);
  }

  std::string name_section;
  put_uleb(name_section, names.size());
  for (const std::string& name : names) name_section.append(name).push_back('\0');
  std::string context_names;
  put_uleb(context_names, 0);

  std::string functions;
  std::vector<std::pair<uint64_t, uint64_t>> offsets;  // (name index, offset in the section)
  for (const FunctionSampleTree& f : profile.functions) {
    offsets.emplace_back(index.at(f.name), functions.size());
    put_uleb(functions, f.head);
    put_body(functions, f, index);
  }
  std::string offset_table;
  put_uleb(offset_table, offsets.size());
  for (const auto& [name, offset] : offsets) {
    put_uleb(offset_table, name);
    put_uleb(offset_table, offset);
  }

  // SecType: 1 summary, 2 name table, 6 context name table, 4 function offsets, 32 profiles,
  // 3 profile symbol list, 5 function metadata; listed in that order (LLVM 14's default layout),
  // stored in the order written below.
  struct Section {
    uint64_t type;
    const std::string* bytes;
    uint64_t offset = 0;
  };
  const std::string empty;
  std::array<Section, 7> written = {{{1, &summary_section},
                                     {2, &name_section},
                                     {6, &context_names},
                                     {32, &functions},
                                     {3, &empty},
                                     {4, &offset_table},
                                     {5, &empty}}};
  std::string header;
  put_uleb(header, 0x5350524f46343204ull);  // SPMagic(SPF_Ext_Binary)
  put_uleb(header, 103);                    // SPVersion()
  const uint64_t body_start = header.size() + 8 + written.size() * 32;
  uint64_t at = body_start;
  for (Section& s : written) {
    s.offset = at;
    at += s.bytes->size();
  }
  put_u64(header, written.size());
  for (const uint64_t type : {1, 2, 6, 4, 32, 3, 5}) {
    for (const Section& s : written) {
      if (s.type != type) continue;
      put_u64(header, s.type);
      put_u64(header, 0);  // flags
      put_u64(header, s.offset);
      put_u64(header, s.bytes->size());
    }
  }
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const Section& s : written) out.write(s.bytes->data(), static_cast<std::streamsize>(s.bytes->size()));
  if (!out) throw ExportError("writing the LLVM sample profile failed");
}

namespace {
void collect_declaration_lines(const FunctionSampleTree& f, std::map<std::string, uint32_t>& out) {
  out.emplace(f.name, f.decl_line);
  for (const auto& [key, callees] : f.inlined) {
    for (const auto& [name, callee] : callees) collect_declaration_lines(callee, out);
  }
}
}  // namespace

std::vector<std::string> declaration_line_comments(const LlvmSampleProfile& profile) {
  std::map<std::string, uint32_t> lines;
  for (const FunctionSampleTree& f : profile.functions) collect_declaration_lines(f, lines);
  std::vector<std::string> out;
  for (const auto& [name, line] : lines) {
    if (line != 0) out.push_back("decl-line " + name + " " + std::to_string(line));
  }
  return out;
}

std::vector<std::string> symbol_order(const LlvmSampleProfile& profile,
                                      const std::vector<NamedCallEdge>& edges) {
  std::map<std::string, uint64_t> samples, calls_in;
  for (const FunctionSampleTree& f : profile.functions) {
    if (f.total != 0) samples[f.name] += f.total;
  }
  // The edges summed per (caller, callee); recursion orders nothing.
  std::map<std::pair<std::string, std::string>, uint64_t> summed;
  for (const NamedCallEdge& e : edges) {
    if (e.caller.empty() || e.callee.empty() || e.caller == e.callee || e.count == 0) continue;
    summed[{e.caller, e.callee}] += e.count;
    calls_in[e.callee] += e.count;
    samples.try_emplace(e.caller, 0);
    samples.try_emplace(e.callee, 0);
  }
  std::vector<std::string> hot;
  for (const auto& [name, n] : samples) hot.push_back(name);
  const auto count_of = [](const std::map<std::string, uint64_t>& m, const std::string& name) {
    const auto it = m.find(name);
    return it == m.end() ? uint64_t{0} : it->second;
  };
  std::stable_sort(hot.begin(), hot.end(), [&](const std::string& a, const std::string& b) {
    const uint64_t sa = count_of(samples, a), sb = count_of(samples, b);
    if (sa != sb) return sa > sb;
    return count_of(calls_in, a) > count_of(calls_in, b);
  });
  // Each callee's most frequent caller (ties: the hotter caller, then the first by name).
  std::map<std::string, std::pair<std::string, uint64_t>> best_caller;
  for (const auto& [key, count] : summed) {
    auto [it, inserted] = best_caller.try_emplace(key.second, key.first, count);
    if (!inserted &&
        (count > it->second.second ||
         (count == it->second.second && count_of(samples, key.first) > count_of(samples, it->second.first))))
      it->second = {key.first, count};
  }
  std::map<std::string, size_t> cluster_of;
  std::vector<std::vector<std::string>> clusters;
  for (const std::string& name : hot) {
    cluster_of[name] = clusters.size();
    clusters.push_back({name});
  }
  // The callees by the count of their heaviest incoming edge, most first (ties: hottest first):
  // the most frequent calls are joined first, so that they end up adjacent.
  std::vector<std::string> callees;
  for (const std::string& name : hot) {
    if (best_caller.count(name)) callees.push_back(name);
  }
  std::stable_sort(callees.begin(), callees.end(), [&](const std::string& a, const std::string& b) {
    return best_caller.at(a).second > best_caller.at(b).second;
  });
  for (const std::string& callee : callees) {
    const auto best = best_caller.find(callee);
    const size_t to = cluster_of.at(best->second.first), from = cluster_of.at(callee);
    if (to == from) continue;
    for (const std::string& moved : clusters[from]) {
      clusters[to].push_back(moved);
      cluster_of[moved] = to;
    }
    clusters[from].clear();
  }
  struct Ranked {
    uint64_t samples = 0, calls = 0;
    size_t first = 0;  // the cluster's index: its first function's rank in `hot`
  };
  std::vector<Ranked> ranked;
  for (size_t i = 0; i < clusters.size(); ++i) {
    if (clusters[i].empty()) continue;
    Ranked r{0, 0, i};
    for (const std::string& name : clusters[i]) {
      r.samples += count_of(samples, name);
      r.calls += count_of(calls_in, name);
    }
    ranked.push_back(r);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    if (a.samples != b.samples) return a.samples > b.samples;
    return a.calls > b.calls;
  });
  std::vector<std::string> out;
  for (const Ranked& r : ranked) {
    for (const std::string& name : clusters[r.first]) out.push_back(name);
  }
  return out;
}

void write_symbol_order(const LlvmSampleProfile& profile, std::ostream& out,
                        const std::vector<NamedCallEdge>& edges) {
  for (const std::string& name : symbol_order(profile, edges)) out << name << '\n';
  if (!out) throw ExportError("writing the symbol order failed");
}

}  // namespace hpd
