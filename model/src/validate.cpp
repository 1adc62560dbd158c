// One check of the Profile's invariants, so that exporters can index its tables without their own.
#include "hpd/model/validate.h"

#include <vector>

namespace hpd {

namespace {

std::string row_of(const char* table, size_t i) {
  return std::string(table) + " " + std::to_string(i);
}

// "refers to func 7 of 5"
std::string refers(const char* what, uint32_t index, size_t size) {
  return " refers to " + std::string(what) + " " + std::to_string(index) + " of " + std::to_string(size);
}

bool bad(uint32_t index, size_t size) {
  return index >= size;
}

bool bad_optional(uint32_t index, size_t size) {
  return index != kNoIndex && index >= size;
}

// Everything but the samples one by one (their sums included), in find_profile_violation's order.
std::optional<std::string> find_table_violation(const Profile& p) {
  const size_t strings = p.strings.size();
  const size_t libs = p.libs.size();
  const size_t funcs = p.funcs.size();
  for (size_t i = 0; i < funcs; ++i) {
    const Func& f = p.funcs[i];
    if (bad(f.name, strings)) return row_of("func", i) + "'s name" + refers("string", f.name, strings);
    if (bad_optional(f.file, strings))
      return row_of("func", i) + "'s file" + refers("string", f.file, strings);
    if (bad_optional(f.lib, libs)) return row_of("func", i) + refers("lib", f.lib, libs);
  }
  for (size_t i = 0; i < p.native_symbols.size(); ++i) {
    const NativeSymbol& s = p.native_symbols[i];
    if (bad(s.name, strings))
      return row_of("native symbol", i) + "'s name" + refers("string", s.name, strings);
    if (bad_optional(s.lib, libs)) return row_of("native symbol", i) + refers("lib", s.lib, libs);
  }
  for (size_t i = 0; i < p.frames.size(); ++i) {
    const Frame& f = p.frames[i];
    if (bad(f.func, funcs)) return row_of("frame", i) + refers("func", f.func, funcs);
    if (bad_optional(f.native_symbol, p.native_symbols.size()))
      return row_of("frame", i) + refers("native symbol", f.native_symbol, p.native_symbols.size());
    if (bad_optional(f.lib, libs)) return row_of("frame", i) + refers("lib", f.lib, libs);
    if (static_cast<int>(f.category) >= kCategoryCount)
      return row_of("frame", i) + " has the unknown category " + std::to_string(static_cast<int>(f.category));
  }
  for (size_t i = 0; i < p.stacks.size(); ++i) {
    const Stack& s = p.stacks[i];
    if (bad(s.frame, p.frames.size())) return row_of("stack", i) + refers("frame", s.frame, p.frames.size());
    if (s.prefix != kNoIndex && s.prefix >= i)
      return row_of("stack", i) + " has prefix " + std::to_string(s.prefix) + ", which does not precede it";
  }
  for (size_t i = 0; i < p.call_edges.size(); ++i) {
    const CallEdge& e = p.call_edges[i];
    if (bad(e.callee_func, funcs))
      return row_of("call edge", i) + "'s callee" + refers("func", e.callee_func, funcs);
    if (bad_optional(e.caller_func, funcs))
      return row_of("call edge", i) + "'s caller" + refers("func", e.caller_func, funcs);
  }
  for (size_t i = 0; i < p.call_latency.size(); ++i) {
    if (bad(p.call_latency[i].func, funcs))
      return row_of("call latency", i) + refers("func", p.call_latency[i].func, funcs);
  }
  for (size_t i = 0; i < p.allocations.size(); ++i) {
    if (bad_optional(p.allocations[i].stack, p.stacks.size()))
      return row_of("allocation", i) + refers("stack", p.allocations[i].stack, p.stacks.size());
  }
  for (size_t i = 0; i < p.mip_counts.size(); ++i) {
    if (bad(p.mip_counts[i].func, funcs))
      return row_of("MIP count", i) + refers("func", p.mip_counts[i].func, funcs);
  }
  // Sums of samples not kept one by one are few (per stack, not per sample): checked with the tables.
  for (const Thread& t : p.threads) {
    for (size_t i = 0; i < t.sample_sums.size(); ++i) {
      const SampleSum& sum = t.sample_sums[i];
      const std::string which = "sample sum " + std::to_string(i) + " of thread " + std::to_string(t.tid);
      if (bad_optional(sum.stack, p.stacks.size()))
        return which + refers("stack", sum.stack, p.stacks.size());
      if (static_cast<int>(sum.kind) >= kSampleKindCount)
        return which + " has the unknown kind " + std::to_string(static_cast<int>(sum.kind));
    }
  }
  return std::nullopt;
}

std::string sample_violation(const Profile& p, const Thread& t, size_t i) {
  const Sample& s = t.samples[i];
  const std::string which = "sample " + std::to_string(i) + " of thread " + std::to_string(t.tid);
  if (static_cast<int>(s.kind) >= kSampleKindCount)
    return which + " has the unknown kind " + std::to_string(static_cast<int>(s.kind));
  return which + refers("stack", s.stack, p.stacks.size());
}

}  // namespace

std::optional<std::string> find_profile_violation(const Profile& p) {
  if (auto violation = find_table_violation(p)) return violation;
  for (const Thread& t : p.threads) {
    for (size_t i = 0; i < t.samples.size(); ++i) {
      if (!valid_sample(p, t.samples[i])) return sample_violation(p, t, i);
    }
  }
  return std::nullopt;
}

void validate_tables(const Profile& profile) {
  if (auto violation = find_table_violation(profile))
    throw InvalidProfileError("invalid profile: " + *violation);
}

void throw_sample_violation(const Profile& profile, const Thread& thread, size_t sample) {
  throw InvalidProfileError("invalid profile: " + sample_violation(profile, thread, sample));
}

void validate(const Profile& profile) {
  if (auto violation = find_profile_violation(profile))
    throw InvalidProfileError("invalid profile: " + *violation);
}

}  // namespace hpd
