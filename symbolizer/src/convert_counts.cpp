// Exact call counts, call latency, sampled allocations and MIP counts (converter.h).
#include "converter.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <unordered_set>

namespace hpd::conversion {

std::vector<std::pair<uint32_t, uint32_t>> Converter::collect_call_edges() {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  out.reserve(raw_.call_edges.size());
  for (const RawCallEdge& e : raw_.call_edges) {
    const ProcessView* view = view_of(e.pid);
    out.emplace_back(user_address(*view, e.caller_address, false, UINT64_MAX),
                     user_address(*view, e.callee_address, true, UINT64_MAX));
  }
  return out;
}

std::vector<uint32_t> Converter::collect_call_latency() {
  std::vector<uint32_t> out;
  out.reserve(raw_.call_latency.size());
  for (const RawCallLatency& l : raw_.call_latency)
    out.push_back(user_address(*view_of(l.pid), l.callee_address, true, UINT64_MAX));
  return out;
}

std::vector<uint32_t> Converter::collect_allocations() {
  out_.meta.alloc = raw_.alloc;
  std::vector<uint32_t> out;
  out.reserve(raw_.allocations.size());
  for (const RawAllocation& a : raw_.allocations)
    out.push_back(instance_of(a.stack, a.pid, SampleKind::kOnCpu, UINT64_MAX));
  return out;
}

void Converter::build_allocations(const std::vector<uint32_t>& allocation_instance) {
  out_.allocations.reserve(raw_.allocations.size());
  for (size_t i = 0; i < raw_.allocations.size(); ++i) {
    const RawAllocation& a = raw_.allocations[i];
    const uint32_t inst = allocation_instance[i];
    out_.allocations.push_back(
        Allocation{a.pid, a.tid, inst == kNoIndex ? kNoIndex : instances_[inst].profile_stack, a.address,
                   a.size, a.freed, a.tracked, a.time_ns, a.free_time_ns, a.free_tid});
  }
}

void Converter::build_call_edges(const std::vector<std::pair<uint32_t, uint32_t>>& edge_addresses) {
  for (size_t i = 0; i < raw_.call_edges.size(); ++i) {
    const RawCallEdge& e = raw_.call_edges[i];
    const UniqueAddress& caller = addresses_[edge_addresses[i].first];
    const UniqueAddress& callee = addresses_[edge_addresses[i].second];
    CallEdge edge;
    edge.pid = e.pid;
    // The call site belongs to the innermost inlined function at the caller address.
    edge.caller_func =
        caller.spec_count > 0 ? specs_[caller.first_spec + caller.spec_count - 1].frame.func : kNoIndex;
    edge.callee_func = specs_[callee.first_spec].frame.func;
    edge.count = e.count;
    out_.call_edges.push_back(edge);
  }
}

void Converter::build_call_latency(const std::vector<uint32_t>& latency_addresses) {
  std::map<std::pair<int32_t, uint32_t>, size_t> index;
  for (size_t i = 0; i < raw_.call_latency.size(); ++i) {
    const RawCallLatency& l = raw_.call_latency[i];
    const UniqueAddress& callee = addresses_[latency_addresses[i]];
    const uint32_t func = specs_[callee.first_spec].frame.func;
    auto [it, inserted] = index.try_emplace({l.pid, func}, out_.call_latency.size());
    if (inserted) out_.call_latency.push_back(CallLatency{l.pid, func, 0, 0, 0, 0, {}});
    out_.call_latency[it->second].merge(
        CallLatency{l.pid, func, l.calls, l.sum_ns, l.outer_ns, l.max_ns, l.histogram});
  }
}

ModuleRef Converter::mip_module_ref(uint32_t module, int32_t pid) {
  if (auto it = module_refs_.find(module); it != module_refs_.end()) return it->second;
  const RawModule& rm = raw_.modules[module];
  ModuleRef ref;
  ref.path = rm.path;
  ref.build_id = rm.build_id;
  const ProcessView* view = view_of(pid);
  if (view->process != nullptr && view->process->end_ns == 0) {
    for (const RawMapping& m : view->process->mappings) {
      if (m.module == module && m.unmapped_ns == 0) {
        ref.pid = pid;
        ref.map_start = m.start;
        ref.map_end = m.end;
        break;
      }
    }
  }
  return ref;
}

void Converter::build_mip_counts() {
  std::map<std::pair<int32_t, uint32_t>, size_t> last;
  for (size_t i = 0; i < raw_.mip_snapshots.size(); ++i) {
    const RawMipSnapshot& s = raw_.mip_snapshots[i];
    if (s.module >= raw_.modules.size()) continue;
    auto [it, inserted] = last.emplace(std::make_pair(s.pid, s.module), i);
    if (!inserted && raw_.mip_snapshots[it->second].time_ns <= s.time_ns) it->second = i;
  }
  for (const auto& [key, index] : last) {
    const RawMipSnapshot& snap = raw_.mip_snapshots[index];
    const ModuleRef ref = mip_module_ref(snap.module, snap.pid);
    const ModuleInfo& info = symbolizer_.module_info(ref);
    const uint32_t lib = module_lib(snap.module, &info);
    auto& missing = out_.meta.missing_modules;
    if (!info.readable && std::find(missing.begin(), missing.end(), ref.path) == missing.end())
      missing.push_back(ref.path);
    std::vector<uint64_t> vaddrs;
    vaddrs.reserve(snap.functions.size());
    for (const RawMipFunction& f : snap.functions) vaddrs.push_back(f.address);
    std::vector<Location> locs;
    if (info.readable) locs = symbolizer_.resolve_vaddrs(ref, vaddrs);
    for (size_t i = 0; i < snap.functions.size(); ++i) {
      const RawMipFunction& f = snap.functions[i];
      const Location* loc = i < locs.size() ? &locs[i] : nullptr;
      const bool at_entry = loc != nullptr && f.address != 0 && loc->found && !loc->frames.empty() &&
                            loc->symbol_address + info.image_base == f.address;
      MipCount c;
      c.pid = snap.pid;
      c.func = at_entry ? out_.intern_func(loc->frames[0].function, loc->frames[0].file, lib)
                        : out_.intern_func(demangle(f.name), {}, lib);
      c.calls = f.call_count;
      c.first_call = f.first_call;
      c.blocks_covered = f.blocks_covered;
      c.blocks_total = f.blocks_total;
      c.never_called = f.call_count == 0;
      c.counts_calls = snap.counts_calls;
      c.time_ns = snap.time_ns;
      out_.mip_counts.push_back(c);
    }
    add_main_thread_if_missing(snap.pid);
  }
}

}  // namespace hpd::conversion
