// `hpctl convert --format llvm-sample|symbol-order`: the on-CPU samples of one binary located by
// the symbolizer's SampleLineReader (linkage names, declaration lines, discriminators) and written
// by the export layer's LLVM sample profile writer, after checking that the binary is the one
// recorded (its build-id).
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "convert_output.h"
#include "hpd/base/demangle.h"
#include "hpd/base/elf.h"
#include "hpd/base/output_file.h"
#include "hpd/export/llvm_sample.h"
#include "hpd/symbolizer/sample_lines.h"

namespace hpd::cli {
namespace {

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string describe_lib(const Lib& lib) {
  return lib.path + " (build-id " + (lib.build_id.empty() ? std::string("none") : lib.build_id) + ")";
}

// On-CPU samples by the address their leaf (user) frame executes, per lib.
std::vector<std::unordered_map<int64_t, uint64_t>> leaf_samples(const Profile& p) {
  std::vector<std::unordered_map<int64_t, uint64_t>> by_lib(p.libs.size());
  const auto add = [&](uint32_t stack, uint64_t count) {
    if (stack == kNoIndex || count == 0) return;
    const Frame& leaf = p.frames[p.stacks[stack].frame];
    if (leaf.lib == kNoIndex || leaf.address < 0 || p.libs[leaf.lib].is_kernel) return;
    by_lib[leaf.lib][leaf.address] += count;
  };
  for (const Thread& t : p.threads) {
    for (const Sample& s : t.samples) {
      if (s.kind == SampleKind::kOnCpu) add(s.stack, 1);
    }
    for (const SampleSum& s : t.sample_sums) {
      if (s.kind == SampleKind::kOnCpu) add(s.stack, s.samples);
    }
  }
  return by_lib;
}

uint64_t total_of(const std::unordered_map<int64_t, uint64_t>& m) {
  uint64_t sum = 0;
  for (const auto& [address, count] : m) sum += count;
  return sum;
}

// The lib the profile is for: the one `binary` is (by build-id), else the one with most samples.
uint32_t choose_lib(const Profile& p, const std::vector<std::unordered_map<int64_t, uint64_t>>& samples,
                    const std::string& binary, std::string& binary_build_id) {
  std::vector<std::string> recorded;
  for (uint32_t i = 0; i < p.libs.size(); ++i) {
    if (!p.libs[i].is_kernel && !samples[i].empty()) recorded.push_back(describe_lib(p.libs[i]));
  }
  const auto list = [&] {
    std::string s;
    for (const std::string& r : recorded) s += (s.empty() ? "" : ", ") + r;
    return s.empty() ? std::string("no user code") : s;
  };
  if (!binary.empty()) {
    const std::optional<std::string> id = file_build_id(binary);
    if (!id) throw std::runtime_error("cannot read '" + binary + "' as an ELF file");
    if (id->empty())
      throw std::runtime_error(
          "'" + binary +
          "' has no build-id, so it cannot be matched to the recording: link it with -Wl,--build-id");
    binary_build_id = *id;
    uint32_t best = kNoIndex;
    for (uint32_t i = 0; i < p.libs.size(); ++i) {
      if (p.libs[i].build_id == *id && (best == kNoIndex || total_of(samples[i]) > total_of(samples[best])))
        best = i;
    }
    if (best == kNoIndex || samples[best].empty()) {
      throw std::runtime_error(
          "the recording has no samples of '" + binary + "' (build-id " + *id +
          "): it is another binary, or was rebuilt since the recording; the recording has samples in " +
          list());
    }
    return best;
  }
  uint32_t best = kNoIndex;
  for (uint32_t i = 0; i < p.libs.size(); ++i) {
    if (p.libs[i].is_kernel || samples[i].empty() || p.libs[i].name.starts_with("[")) continue;
    if (best == kNoIndex || total_of(samples[i]) > total_of(samples[best])) best = i;
  }
  if (best == kNoIndex) throw std::runtime_error("the recording has no on-CPU samples in a binary's code");
  return best;
}

uint64_t image_base_of(const std::string& path) {
  const OpenedElf elf = OpenedElf::open(path);
  if (!elf) throw std::runtime_error("cannot read '" + path + "': " + elf.error());
  uint64_t low = UINT64_MAX;
  for (const ElfSegment& s : elf.view().load_segments()) low = std::min(low, s.vaddr);
  return low == UINT64_MAX ? 0 : low & ~uint64_t{0xfff};
}

// The exact call edges (--calls) between functions of lib `li`, by linkage name: the recording's
// function names are demangled, so each linkage name of the binary's DWARF is demangled to match.
std::vector<NamedCallEdge> call_edges_of(const Profile& p, uint32_t li, SampleLineReader& reader) {
  std::vector<NamedCallEdge> out;
  if (p.call_edges.empty()) return out;
  std::unordered_map<std::string, std::string> linkage;  // demangled -> linkage name
  for (const auto& [name, line] : reader.declaration_lines()) linkage.try_emplace(demangle(name), name);
  const auto name_of = [&](uint32_t func) -> std::string {
    if (func == kNoIndex || func >= p.funcs.size() || p.funcs[func].lib != li) return {};
    const auto it = linkage.find(p.strings[p.funcs[func].name]);
    return it == linkage.end() ? std::string() : it->second;
  };
  for (const CallEdge& e : p.call_edges) {
    NamedCallEdge named{name_of(e.caller_func), name_of(e.callee_func), e.count};
    if (!named.caller.empty() && !named.callee.empty()) out.push_back(std::move(named));
  }
  return out;
}

}  // namespace

void write_llvm_sample(const Profile& p, const ConvertArgs& args, const std::string& format) {
  const auto samples = leaf_samples(p);
  std::string binary_build_id;
  const uint32_t li = choose_lib(p, samples, args.binary, binary_build_id);
  const Lib& lib = p.libs[li];
  std::string binary = args.binary;
  if (binary.empty()) {
    // The recorded binary where it was: it must still be the build that ran.
    binary = lib.path;
    const std::optional<std::string> id = file_build_id(binary);
    if (!id) {
      throw std::runtime_error("cannot read the recorded binary '" + binary +
                               "'; give the binary that ran with --binary PATH");
    }
    if (!lib.build_id.empty() && *id != lib.build_id) {
      throw std::runtime_error(
          "'" + binary + "' has build-id " + (id->empty() ? "none" : *id) + ", the recording's has " +
          lib.build_id +
          ": it was rebuilt since the recording (a stale profile would not match it); give "
          "the binary that ran with --binary PATH");
    }
    binary_build_id = *id;
  }
  // Debug information: the binary's own, else the debug file the recording was symbolized from.
  std::string error;
  std::unique_ptr<SampleLineReader> reader = SampleLineReader::open(binary, &error);
  if (!reader && !lib.debug_path.empty() && lib.debug_path != binary) {
    std::string debug_error;
    reader = SampleLineReader::open(lib.debug_path, &debug_error);
  }
  if (!reader) throw std::runtime_error(error);
  const uint64_t image_base = image_base_of(binary);

  std::vector<SampledSite> sites;
  std::map<std::string, FunctionEntry> entries;
  std::map<uint64_t, std::string> entry_names;  // function entries to locate
  sites.reserve(samples[li].size());
  for (const auto& [address, count] : samples[li]) {
    const SampleLineAnswer answer = reader->locate(static_cast<uint64_t>(address) + image_base);
    SampledSite& site = sites.emplace_back();
    site.samples = count;
    if (!answer.found) continue;
    for (const SampleLineLevel& l : answer.levels)
      site.levels.push_back({l.name, l.decl_line, l.line, l.discriminator});
    entry_names.emplace(answer.function_entry, answer.levels.front().name);
  }
  for (const auto& [entry, name] : entry_names) {
    const SampleLineAnswer answer = reader->locate(entry);
    if (answer.found && !answer.levels.empty() && answer.levels.front().name == name)
      entries[name] = {answer.levels.front().line, answer.levels.front().discriminator};
  }
  const LlvmSampleProfile profile = build_llvm_sample_profile(sites, entries);

  std::ostringstream text;
  std::vector<NamedCallEdge> edges;
  if (format == "llvm-sample") {
    std::vector<std::string> comment{"hpd sample profile of " + base_name(binary) + ", build-id " +
                                     binary_build_id};
    for (std::string& line : declaration_line_comments(profile)) comment.push_back(std::move(line));
    write_llvm_sample_text(profile, text, comment);
  } else if (format == "llvm-sample-binary") {
    write_llvm_sample_extbinary(profile, text);
  } else {
    edges = call_edges_of(p, li, *reader);
    write_symbol_order(profile, text, edges);
  }
  const std::string bytes = std::move(text).str();
  if (args.output == "-") {
    std::cout << bytes;
    std::cout.flush();
  } else {
    OutputFile file(args.output, OutputWrite::kReplace);
    file.write(bytes.data(), bytes.size());
    file.commit();
  }
  if (!args.quiet) {
    std::fprintf(stderr, "hpctl: %s of %s: %zu functions, %llu samples", format.c_str(), binary.c_str(),
                 profile.functions.size(), static_cast<unsigned long long>(profile.samples));
    if (profile.unlocated != 0)
      std::fprintf(stderr, " (%llu without a source line)",
                   static_cast<unsigned long long>(profile.unlocated));
    if (!edges.empty()) std::fprintf(stderr, ", ordered by %zu exact call edges", edges.size());
    std::fprintf(stderr, "\n");
  }
}

}  // namespace hpd::cli
