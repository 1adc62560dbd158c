// symbolize_profile: RawProfile -> Profile, resolving each unique (module, offset) once.
#include "hpd/symbolizer/convert.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace hpd {
namespace {

// A mapping the kernel makes that is no file: "[uprobes]" (the slots where uprobes single-step the
// instructions they displaced, and the uretprobe trampoline), "[vsyscall]", "[uprobes-trampoline]".
// Not "[vdso]" (an ELF image the recorder reads) nor "[anon]" (the process's own memory, e.g. JIT code).
bool is_kernel_special_mapping(const std::string& path) {
  return path.size() > 2 && path.front() == '[' && path.back() == ']' && path != "[vdso]" && path != "[anon]";
}

// Whether hpd recorded processes the user named (by pid, or a command it launched) with one of its own
// backends: not the whole system (--all, continuous mode), a cgroup, nor a perf.data file. Every
// thread such a recording saw is one the user asked for. From the targets recording_common.cpp
// writes: "pid N", "pids ...", the command, "PIDS while running CMD"; the others are "all processes[
// while running CMD]", "cgroup ..." and, for merged chunks, "continuous profile (...)".
bool records_named_processes(const RecordingInfo& info) {
  const auto starts = [&info](const char* prefix) { return info.target.rfind(prefix, 0) == 0; };
  return (info.backend == "perf" || info.backend == "bpf") && !starts("all processes") &&
         !starts("cgroup ") && !starts("continuous profile");
}

// perf marks context switches inside callchains with values from PERF_CONTEXT_MAX (-4095) up.
constexpr uint64_t kPerfContextMax = static_cast<uint64_t>(-4095);

std::string basename_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%" PRIx64, v);
  return buf;
}

// kJit: code a JIT runtime named in its perf map (module = index into RawProfile::jit_symbols).
enum class AddressKind : uint8_t { kModule, kUnmapped, kKernel, kJit };

struct AddressKey {
  AddressKind kind;
  uint32_t module;
  uint64_t value;
  bool nudged = false;  // a return address, looked up one byte back (value is already decremented)
  bool operator==(const AddressKey&) const = default;
};

struct AddressKeyHash {
  size_t operator()(const AddressKey& k) const {
    uint64_t h = k.value * 0x9E3779B97F4A7C15ULL;
    h ^= (static_cast<uint64_t>(k.module) << 9 | static_cast<uint64_t>(k.nudged) << 8 |
          static_cast<uint64_t>(k.kind)) *
         0xC2B2AE3D27D4EB4FULL;
    return static_cast<size_t>(h ^ (h >> 31));
  }
};

// One frame of a resolved address, before a category is chosen; frame indices per category are
// interned on first use.
struct FrameSpec {
  Frame frame;
  uint32_t interned[kCategoryCount] = {kNoIndex, kNoIndex, kNoIndex, kNoIndex, kNoIndex};
};

// One unique address: what to look up, then which frames it became (outermost inline level first).
struct UniqueAddress {
  AddressKey key;
  uint32_t first_spec = 0;
  uint32_t spec_count = 0;
  // A return address's callee as the call site names it: into Converter::callee_code_; kNoIndex =
  // unknown (see Symbolizer::call_site_callees).
  uint32_t callee_code = kNoIndex;
  bool found = false;        // the symbolizer found the address's function (a symbol or debug information)
  int64_t rel_address = -1;  // lib-relative, as looked up; -1 = none
};

// A raw stack as seen by one process in one mapping epoch, for one kind of sample: the frames of
// off-CPU samples are in the Idle category, those of samples waiting for a CPU in Waiting for CPU.
struct StackInstance {
  uint32_t raw_stack;
  int32_t pid;
  SampleKind kind;
  uint32_t epoch;
  uint32_t addresses_begin;  // into Converter::instance_addresses_, root first
  uint32_t user_count;       // the first user_count are user addresses, the rest kernel
  uint32_t addresses_end;
  uint32_t profile_stack = kNoIndex;
};

struct InstanceKey {
  uint32_t raw_stack;
  int32_t pid;
  uint32_t epoch_kind;  // epoch << 2 | kind
  bool operator==(const InstanceKey&) const = default;
};

struct InstanceKeyHash {
  size_t operator()(const InstanceKey& k) const {
    uint64_t h =
        (static_cast<uint64_t>(k.raw_stack) << 32 | static_cast<uint32_t>(k.pid)) * 0x9E3779B97F4A7C15ULL;
    h ^= k.epoch_kind * 0xC2B2AE3D27D4EB4FULL;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

// Per process: the distinct times at which mappings appeared. find_mapping() gives the same
// answer for every time between two of them, so (raw stack, pid, epoch) identifies a resolution.
struct ProcessView {
  const RawProcess* process = nullptr;
  std::vector<uint64_t> mapping_times;  // sorted, distinct, non-zero
  std::vector<uint32_t> jit;            // into RawProfile::jit_symbols, by start; the later of equal starts
  uint32_t epoch(uint64_t time_ns) const {
    if (mapping_times.empty()) return 0;
    return static_cast<uint32_t>(std::upper_bound(mapping_times.begin(), mapping_times.end(), time_ns) -
                                 mapping_times.begin());
  }
};

class Converter {
 public:
  Converter(const RawProfile& raw, Symbolizer& symbolizer, const ConvertOptions& options)
      : raw_(raw), symbolizer_(symbolizer), options_(options) {}

  Profile run() {
    out_.meta.recording = raw_.info;
    out_.meta.lost = raw_.lost;
    index_processes();
    std::vector<uint32_t> sum_instance;
    std::vector<uint32_t> sample_instance = collect_instances(sum_instance);
    std::vector<std::pair<uint32_t, uint32_t>> edge_addresses = collect_call_edges();
    std::vector<uint32_t> latency_addresses = collect_call_latency();
    std::vector<uint32_t> allocation_instance = collect_allocations();
    resolve_all();
    for (StackInstance& inst : instances_) build_stack(inst);
    build_threads(sample_instance, sum_instance);
    build_call_edges(edge_addresses);
    build_call_latency(latency_addresses);
    build_allocations(allocation_instance);
    build_mip_counts();
    return std::move(out_);
  }

 private:
  void index_processes() {
    for (const RawProcess& p : raw_.processes) {
      ProcessView& view = processes_[p.pid];
      view.process = &p;
      for (const RawMapping& m : p.mappings) {
        if (m.time_ns != 0) view.mapping_times.push_back(m.time_ns);
      }
      std::sort(view.mapping_times.begin(), view.mapping_times.end());
      view.mapping_times.erase(std::unique(view.mapping_times.begin(), view.mapping_times.end()),
                               view.mapping_times.end());
    }
    for (uint32_t i = 0; i < raw_.jit_symbols.size(); ++i) {
      auto it = processes_.find(raw_.jit_symbols[i].pid);
      if (it != processes_.end()) it->second.jit.push_back(i);
    }
    for (auto& [pid, view] : processes_) {
      // A runtime that moves code writes a new line for the same address: the last one is current.
      std::stable_sort(view.jit.begin(), view.jit.end(), [&](uint32_t a, uint32_t b) {
        return raw_.jit_symbols[a].start < raw_.jit_symbols[b].start;
      });
      std::vector<uint32_t> kept;
      for (uint32_t i : view.jit) {
        if (!kept.empty() && raw_.jit_symbols[kept.back()].start == raw_.jit_symbols[i].start) {
          kept.back() = i;
        } else {
          kept.push_back(i);
        }
      }
      view.jit = std::move(kept);
    }
  }

  // The perf-map symbol of the process that covers `address`, or kNoIndex.
  uint32_t jit_symbol(const ProcessView& view, uint64_t address) const {
    auto it = std::upper_bound(view.jit.begin(), view.jit.end(), address,
                               [&](uint64_t a, uint32_t i) { return a < raw_.jit_symbols[i].start; });
    // Blobs may overlap (one written over another's memory): look back a few for one that covers.
    for (int back = 0; back < 8 && it != view.jit.begin(); ++back) {
      --it;
      const RawJitSymbol& s = raw_.jit_symbols[*it];
      if (address - s.start < s.size) return *it;
    }
    return kNoIndex;
  }

  const ProcessView* view_of(int32_t pid) {
    if (pid == last_pid_ && last_view_ != nullptr) return last_view_;
    auto it = processes_.find(pid);
    last_pid_ = pid;
    last_view_ = it == processes_.end() ? &no_process_ : &it->second;
    return last_view_;
  }

  // The stack instance of a sample (or of a sum of samples, at its first sample's time); new
  // instances' addresses are collected on the way. kNoIndex for a sample without a stack.
  uint32_t instance_of(uint32_t stack, int32_t pid, SampleKind kind, uint64_t time_ns) {
    if (stack == kNoIndex || stack >= raw_.stacks.size()) return kNoIndex;
    const ProcessView* view = view_of(pid);
    const uint32_t epoch = view->epoch(time_ns);
    // Fast path: the common case is one process and one epoch per raw stack.
    const uint32_t first = first_by_stack_[stack];
    if (first != kNoIndex) {
      const StackInstance& f = instances_[first];
      if (f.pid == pid && f.kind == kind && f.epoch == epoch) return first;
    }
    const InstanceKey key{stack, pid, epoch << 2 | static_cast<uint32_t>(kind)};
    auto [it, inserted] = instance_index_.try_emplace(key, static_cast<uint32_t>(instances_.size()));
    if (inserted) {
      add_instance(stack, pid, time_ns, *view, kind, epoch);
      if (first == kNoIndex) first_by_stack_[stack] = it->second;
    }
    return it->second;
  }

  // Maps every sample, and every sum of released samples, to a stack instance (first the sums: they
  // are the earlier samples).
  std::vector<uint32_t> collect_instances(std::vector<uint32_t>& sum_instance) {
    first_by_stack_.assign(raw_.stacks.size(), kNoIndex);
    sum_instance.resize(raw_.released.size());
    for (size_t i = 0; i < raw_.released.size(); ++i) {
      const RawSampleSum& s = raw_.released[i];
      sum_instance[i] = instance_of(s.stack, s.pid, s.kind, s.first_ns);
    }
    std::vector<uint32_t> sample_instance(raw_.samples.size(), kNoIndex);
    for (size_t i = 0; i < raw_.samples.size(); ++i) {
      const RawSample& s = raw_.samples[i];
      sample_instance[i] = instance_of(s.stack, s.pid, s.kind, s.time_ns);
    }
    return sample_instance;
  }

  void add_instance(uint32_t stack, int32_t pid, uint64_t time_ns, const ProcessView& view, SampleKind kind,
                    uint32_t epoch) {
    StackInstance inst{stack, pid, kind, epoch, static_cast<uint32_t>(instance_addresses_.size()), 0, 0};
    const auto kernel = raw_.stacks.kernel_frames(stack);
    const auto user = raw_.stacks.user_frames(stack);
    // Return addresses are looked up one byte back, exact instruction pointers as they are. The user
    // leaf is the interrupted instruction, or after a system call the instruction after `syscall`,
    // a return address (the stack says which). The kernel leaf of an on-CPU sample is the
    // interrupted kernel instruction; an off-CPU stack's kernel frames are all return addresses.
    const bool user_leaf_exact = raw_.stacks[stack].user_leaf == UserLeaf::kInterrupted;
    const bool kernel_leaf_exact = !is_off_cpu_interval(kind);
    for (size_t k = user.size(); k-- > 0;) {
      const bool exact = k == 0 && user_leaf_exact;
      instance_addresses_.push_back(user_address(view, user[k], exact, time_ns));
    }
    inst.user_count = static_cast<uint32_t>(instance_addresses_.size() - inst.addresses_begin);
    if (options_.kernel_frames) {
      for (size_t k = kernel.size(); k-- > 0;) {
        if (kernel[k] >= kPerfContextMax) continue;
        instance_addresses_.push_back(kernel_address(kernel[k], k == 0 && kernel_leaf_exact));
      }
    }
    inst.addresses_end = static_cast<uint32_t>(instance_addresses_.size());
    instances_.push_back(inst);
  }

  uint32_t intern_address(const AddressKey& key) {
    auto [it, inserted] = address_index_.try_emplace(key, static_cast<uint32_t>(addresses_.size()));
    if (inserted) addresses_.push_back(UniqueAddress{key});
    return it->second;
  }

  uint32_t user_address(const ProcessView& view, uint64_t address, bool exact, uint64_t time_ns) {
    const RawMapping* m = view.process != nullptr ? view.process->find_mapping(address, time_ns) : nullptr;
    // JIT code lives in anonymous memory (or memory no record described): its perf map names it.
    if (!view.jit.empty() &&
        (m == nullptr || m->module >= raw_.modules.size() || raw_.modules[m->module].path == "[anon]")) {
      const uint32_t jit = jit_symbol(view, exact || address == 0 ? address : address - 1);
      if (jit != kNoIndex) return intern_address(AddressKey{AddressKind::kJit, jit, 0});
    }
    if (m == nullptr || m->module >= raw_.modules.size()) {
      return intern_address(AddressKey{AddressKind::kUnmapped, 0, address});
    }
    uint64_t offset = address - m->start + m->file_offset;
    // Return addresses are looked up (and shown) one byte back, inside the call instruction.
    const bool nudged = !exact && address > m->start;
    if (nudged) offset -= 1;
    if (module_refs_.find(m->module) == module_refs_.end()) {
      const RawModule& rm = raw_.modules[m->module];
      ModuleRef ref;
      ref.path = rm.path;
      ref.build_id = rm.build_id;
      ref.image = rm.image;
      if (rm.file) ref.held_fd = rm.file->fd();
      // /proc/PID/... only helps while the process lives; a recycled pid could show another file.
      if (view.process != nullptr && view.process->end_ns == 0) {
        ref.pid = view.process->pid;
        ref.map_start = m->start;
        ref.map_end = m->end;
      }
      module_refs_.emplace(m->module, std::move(ref));
    }
    return intern_address(AddressKey{AddressKind::kModule, m->module, offset, nudged});
  }

  uint32_t kernel_address(uint64_t address, bool exact) {
    if (!kernel_loaded_) {
      kernel_loaded_ = true;
      if (options_.kernel_symbols) {
        kernel_ = options_.kernel_symbols;
      } else if (!raw_.kernel_symbols.empty()) {
        // The lines the recording kept of the kallsyms it ran under (a capture read back): right in
        // any boot, and for BPF programs and modules unloaded since.
        auto kept = std::make_shared<KernelSymbols>();
        kept->load_text(raw_.kernel_symbols);
        kernel_ = std::move(kept);
      } else {
        auto loaded = std::make_shared<KernelSymbols>();
        loaded->load(options_.kallsyms_path);
        kernel_ = std::move(loaded);
      }
      kernel_ok_ = !kernel_->empty();
    }
    return intern_address(AddressKey{AddressKind::kKernel, 0, exact || address == 0 ? address : address - 1});
  }

  // Call edges: the caller side is a return address (looked up one byte back), the callee an entry.
  std::vector<std::pair<uint32_t, uint32_t>> collect_call_edges() {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    out.reserve(raw_.call_edges.size());
    for (const RawCallEdge& e : raw_.call_edges) {
      const ProcessView* view = view_of(e.pid);
      out.emplace_back(user_address(*view, e.caller_address, false, UINT64_MAX),
                       user_address(*view, e.callee_address, true, UINT64_MAX));
    }
    return out;
  }

  // Call latency: keyed by the callee address, as the edges' callee side.
  std::vector<uint32_t> collect_call_latency() {
    std::vector<uint32_t> out;
    out.reserve(raw_.call_latency.size());
    for (const RawCallLatency& l : raw_.call_latency)
      out.push_back(user_address(*view_of(l.pid), l.callee_address, true, UINT64_MAX));
    return out;
  }

  // Sampled allocations: their stacks are all return addresses (kAfterSyscall leaves), resolved with
  // the process's mappings as they were at the end (the log has no times).
  std::vector<uint32_t> collect_allocations() {
    out_.meta.alloc = raw_.alloc;
    std::vector<uint32_t> out;
    out.reserve(raw_.allocations.size());
    for (const RawAllocation& a : raw_.allocations)
      out.push_back(instance_of(a.stack, a.pid, SampleKind::kOnCpu, UINT64_MAX));
    return out;
  }

  void build_allocations(const std::vector<uint32_t>& allocation_instance) {
    out_.allocations.reserve(raw_.allocations.size());
    for (size_t i = 0; i < raw_.allocations.size(); ++i) {
      const RawAllocation& a = raw_.allocations[i];
      const uint32_t inst = allocation_instance[i];
      out_.allocations.push_back(
          Allocation{a.pid, a.tid, inst == kNoIndex ? kNoIndex : instances_[inst].profile_stack, a.address,
                     a.size, a.freed, a.tracked, a.time_ns, a.free_time_ns, a.free_tid});
    }
  }

  uint32_t module_lib(uint32_t module, const ModuleInfo* info) {
    auto it = module_libs_.find(module);
    if (it != module_libs_.end()) return it->second;
    const RawModule& rm = raw_.modules[module];
    Lib lib;
    lib.name = basename_of(rm.path);
    lib.path = rm.path;
    lib.debug_name = lib.name;
    lib.debug_path = info != nullptr && !info->debug_path.empty() ? info->debug_path : rm.path;
    // A file reached through /proc (a held descriptor, map_files) is known by its recorded path.
    if (lib.debug_path.starts_with("/proc/")) lib.debug_path = rm.path;
    lib.build_id = !rm.build_id.empty() || info == nullptr ? rm.build_id : info->build_id;
    lib.is_kernel = rm.is_kernel;
    const uint32_t index = out_.intern_lib(lib);
    module_libs_.emplace(module, index);
    return index;
  }

  // The "library" of a process's JIT code (named from its perf map or jitdump): "[jit]", one per
  // process so that each keeps its own path.
  uint32_t jit_lib(int32_t pid) {
    auto it = jit_libs_.find(pid);
    if (it != jit_libs_.end()) return it->second;
    Lib lib;
    lib.name = lib.debug_name = "[jit]";
    lib.path = lib.debug_path = "[jit pid " + std::to_string(pid) + "]";
    const uint32_t index = out_.intern_lib(lib);
    jit_libs_.emplace(pid, index);
    return index;
  }

  uint32_t kernel_lib() {
    if (kernel_lib_ != kNoIndex) return kernel_lib_;
    Lib lib;
    lib.name = lib.path = lib.debug_name = lib.debug_path = "[kernel.kallsyms]";
    for (const RawModule& rm : raw_.modules) {
      if (rm.is_kernel) {
        lib.build_id = rm.build_id;
        break;
      }
    }
    lib.is_kernel = true;
    kernel_lib_ = out_.intern_lib(lib);
    return kernel_lib_;
  }

  void add_location_frames(UniqueAddress& ua, const Location& loc, uint32_t lib,
                           const std::string& fallback_name, int64_t frame_address) {
    ua.first_spec = static_cast<uint32_t>(specs_.size());
    if (!loc.found || loc.frames.empty()) {
      FrameSpec spec;
      spec.frame.func = out_.intern_func(fallback_name, {}, lib);
      spec.frame.lib = lib;
      spec.frame.address = frame_address;
      specs_.push_back(spec);
      ua.spec_count = 1;
      return;
    }
    // The native symbol keeps the ELF version the frames leave out (the name as the symbol table has it).
    const uint32_t native =
        out_.intern_native_symbol(lib, loc.symbol_address, loc.symbol_size, loc.symbol + loc.symbol_version);
    const size_t levels = std::min<size_t>(loc.frames.size(), 256);  // inline_depth is 8 bits
    for (size_t d = 0; d < levels; ++d) {
      const SourceFrame& sf = loc.frames[d];
      FrameSpec spec;
      spec.frame.func = out_.intern_func(sf.function.empty() ? fallback_name : sf.function, sf.file, lib);
      spec.frame.native_symbol = native;
      spec.frame.lib = lib;
      spec.frame.address = frame_address;
      spec.frame.line = sf.line;
      spec.frame.column = sf.column;
      spec.frame.inline_depth = static_cast<uint8_t>(d);
      specs_.push_back(spec);
    }
    ua.spec_count = static_cast<uint32_t>(levels);
  }

  // Resolves every unique address: one Symbolizer::resolve batch per module.
  void resolve_all() {
    std::unordered_map<uint32_t, std::vector<uint32_t>> by_module;  // module -> unique address ids
    for (uint32_t id = 0; id < addresses_.size(); ++id) {
      if (addresses_[id].key.kind == AddressKind::kModule) by_module[addresses_[id].key.module].push_back(id);
    }
    // Deterministic order of libs and strings: by module index.
    std::vector<uint32_t> modules;
    modules.reserve(by_module.size());
    for (const auto& [module, ids] : by_module) modules.push_back(module);
    std::sort(modules.begin(), modules.end());
    for (uint32_t module : modules) {
      const std::vector<uint32_t>& ids = by_module[module];
      if (is_kernel_special_mapping(raw_.modules[module].path)) {
        // No file and no symbols to miss: each of its addresses is one frame named by the mapping.
        const uint32_t lib = module_lib(module, nullptr);
        for (const uint32_t id : ids)
          add_location_frames(addresses_[id], Location{}, lib, raw_.modules[module].path,
                              static_cast<int64_t>(addresses_[id].key.value));
        continue;
      }
      const ModuleRef& ref = module_refs_.at(module);
      std::vector<uint64_t> offsets;
      offsets.reserve(ids.size());
      for (uint32_t id : ids) offsets.push_back(addresses_[id].key.value);
      const ModuleInfo& info = symbolizer_.module_info(ref);
      std::vector<Location> locs = symbolizer_.resolve(ref, offsets);
      std::vector<bool> retried(ids.size(), false);
      retry_unfound_return_addresses(ref, ids, locs, retried);
      find_call_site_callees(ref, ids, locs, retried);
      const uint32_t lib = module_lib(module, &info);
      if (!info.readable) out_.meta.missing_modules.push_back(raw_.modules[module].path);
      const std::string base = basename_of(raw_.modules[module].path);
      for (size_t i = 0; i < ids.size(); ++i) {
        const Location& loc = locs[i];
        add_location_frames(addresses_[ids[i]], loc, lib, base + "+" + hex(loc.rel_address),
                            static_cast<int64_t>(loc.rel_address));
        addresses_[ids[i]].found = loc.found;
        addresses_[ids[i]].rel_address = static_cast<int64_t>(loc.rel_address);
      }
    }
    bool kernel_missing_noted = false;
    for (UniqueAddress& ua : addresses_) {
      if (ua.key.kind == AddressKind::kUnmapped) {
        add_location_frames(ua, Location{}, kNoIndex, hex(ua.key.value), -1);
      } else if (ua.key.kind == AddressKind::kJit) {
        const RawJitSymbol& symbol = raw_.jit_symbols[ua.key.module];
        add_location_frames(ua, Location{}, jit_lib(symbol.pid), symbol.name, -1);
      } else if (ua.key.kind == AddressKind::kKernel) {
        const uint32_t lib = kernel_lib();
        const uint64_t address = ua.key.value;
        if (!kernel_ok_) {
          if (!kernel_missing_noted) out_.meta.missing_modules.push_back("[kernel.kallsyms]");
          kernel_missing_noted = true;
          add_location_frames(ua, Location{}, lib, hex(address), -1);
          continue;
        }
        const Location loc = kernel_->resolve(address);
        const int64_t rel = address >= kernel_->base() ? static_cast<int64_t>(loc.rel_address) : -1;
        add_location_frames(ua, loc, lib, hex(address), rel);
      }
    }
  }

  // A user leaf taken for a return address (after a system call; in captures that do not say, every
  // user leaf under kernel frames) may still be an interrupted instruction. When that was a
  // function's first byte, one byte back lies in the padding before it (or in no function at all)
  // and nothing is found: the address itself, found, is then the better answer. A real return
  // address is never at a function's first byte unless the call ended the function before it, and
  // that call's byte does lie in a function.
  void retry_unfound_return_addresses(const ModuleRef& ref, const std::vector<uint32_t>& ids,
                                      std::vector<Location>& locs, std::vector<bool>& retried) {
    std::vector<size_t> retry;
    std::vector<uint64_t> offsets;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (locs[i].found || !addresses_[ids[i]].key.nudged) continue;
      retry.push_back(i);
      offsets.push_back(addresses_[ids[i]].key.value + 1);
    }
    if (retry.empty()) return;
    std::vector<Location> exact = symbolizer_.resolve(ref, offsets);
    for (size_t k = 0; k < retry.size(); ++k) {
      if (exact[k].found) {
        locs[retry[k]] = std::move(exact[k]);
        retried[retry[k]] = true;
      }
    }
  }

  // The callee each found return address's call site names (a return address is one whose lookup
  // was nudged and stayed so).
  void find_call_site_callees(const ModuleRef& ref, const std::vector<uint32_t>& ids,
                              const std::vector<Location>& locs, const std::vector<bool>& retried) {
    if (!unwound_by_cfi_) return;
    std::vector<uint32_t> asked;
    std::vector<uint64_t> offsets;
    for (size_t i = 0; i < ids.size(); ++i) {
      const UniqueAddress& ua = addresses_[ids[i]];
      if (!ua.key.nudged || !locs[i].found || retried[i]) continue;
      asked.push_back(ids[i]);
      offsets.push_back(ua.key.value);
    }
    if (asked.empty()) return;
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> code =
        symbolizer_.call_site_callees(ref, offsets);
    for (size_t k = 0; k < asked.size(); ++k) {
      if (code[k].empty()) continue;
      addresses_[asked[k]].callee_code = static_cast<uint32_t>(callee_code_.size());
      callee_code_.push_back(std::move(code[k]));
    }
  }

  // Whether the edge from `caller` (a return address) to `callee` (the address below it) is a tail
  // call: the caller's call site names a function, and `callee` lies outside its code. Both must be
  // found in one module; anything less is not known, and not marked.
  bool is_tail_call_edge(const UniqueAddress& caller, const UniqueAddress& callee) const {
    if (caller.callee_code == kNoIndex || caller.key.kind != AddressKind::kModule ||
        callee.key.kind != AddressKind::kModule || callee.key.module != caller.key.module || !callee.found ||
        callee.rel_address < 0)
      return false;
    const auto address = static_cast<uint64_t>(callee.rel_address);
    for (const auto& [low, high] : callee_code_[caller.callee_code]) {
      if (address >= low && address < high) return false;
    }
    return true;
  }

  uint32_t frame_of(FrameSpec& spec, Category category) {
    uint32_t& slot = spec.interned[static_cast<int>(category)];
    if (slot == kNoIndex) {
      Frame f = spec.frame;
      f.category = category;
      slot = out_.intern_frame(f);
    }
    return slot;
  }

  void build_stack(StackInstance& inst) {
    uint32_t prefix = kNoIndex;
    for (uint32_t i = inst.addresses_begin; i < inst.addresses_end; ++i) {
      const bool user = i - inst.addresses_begin < inst.user_count;
      const Category category = inst.kind == SampleKind::kOffCpu    ? Category::kIdle
                                : inst.kind == SampleKind::kWaitCpu ? Category::kWaitCpu
                                : user                              ? Category::kUser
                                                                    : Category::kKernel;
      const UniqueAddress& ua = addresses_[instance_addresses_[i]];
      // The edge into this address's outer frame from the user frame above it (its caller).
      const bool tail_call =
          user && i > inst.addresses_begin && is_tail_call_edge(addresses_[instance_addresses_[i - 1]], ua);
      for (uint32_t s = 0; s < ua.spec_count; ++s) {
        prefix =
            out_.intern_stack(prefix, frame_of(specs_[ua.first_spec + s], category), tail_call && s == 0);
      }
    }
    inst.profile_stack = prefix;
  }

  static uint64_t thread_key(int32_t pid, int32_t tid) {
    return static_cast<uint64_t>(static_cast<uint32_t>(pid)) << 32 | static_cast<uint32_t>(tid);
  }

  // One Thread per RawThread that has samples or lost data (in RawProfile order), then one per
  // (pid, tid) that has samples but no RawThread. A RawThread without samples stays too when the
  // recording took processes the user named (records_named_processes): it existed, blocked or idle
  // (the perf_event backend samples only CPU time without --off-cpu), and gets its track with its
  // name and lifetime and no sample. A system-wide, cgroup or perf.data recording may know thousands
  // of threads that never ran: those are left out there. One whose records were all lost stays, so
  // the loss is not hidden.
  void build_threads(const std::vector<uint32_t>& sample_instance,
                     const std::vector<uint32_t>& sum_instance) {
    std::unordered_map<uint64_t, uint32_t> sample_counts;
    for (const RawSample& s : raw_.samples) ++sample_counts[thread_key(s.pid, s.tid)];
    std::unordered_map<uint64_t, uint32_t> sum_counts;
    for (const RawSampleSum& s : raw_.released) ++sum_counts[thread_key(s.pid, s.tid)];
    // Threads that made sampled allocations have a thread of their own too (their allocations go
    // there), whether or not they were sampled on the CPU.
    std::unordered_set<uint64_t> allocating;
    for (const RawAllocation& a : raw_.allocations) allocating.insert(thread_key(a.pid, a.tid));
    std::unordered_map<uint64_t, uint32_t> thread_index;
    const bool keep_unsampled = records_named_processes(raw_.info);
    auto add_thread = [&](int32_t pid, int32_t tid, const RawThread* rt) {
      Thread t;
      t.pid = pid;
      t.tid = tid;
      const ProcessView* view = view_of(pid);
      if (view->process != nullptr) {
        t.process_name = view->process->name;
        t.process_cgroup = view->process->cgroup;
      }
      t.name = rt != nullptr && !rt->name.empty() ? rt->name
               : !t.process_name.empty()          ? t.process_name
                                                  : "thread " + std::to_string(tid);
      t.is_main = pid == tid;
      if (rt != nullptr) {
        t.start_ns = rt->start_ns;
        t.end_ns = rt->end_ns;
        t.lost = rt->lost;
      }
      t.samples.reserve(sample_counts[thread_key(pid, tid)]);
      t.sample_sums.reserve(sum_counts[thread_key(pid, tid)]);
      thread_index.emplace(thread_key(pid, tid), static_cast<uint32_t>(out_.threads.size()));
      out_.threads.push_back(std::move(t));
    };
    for (const RawThread& rt : raw_.threads) {
      const uint64_t key = thread_key(rt.pid, rt.tid);
      const bool lost_any = rt.lost.lost_records != 0 || rt.lost.throttle_events != 0 ||
                            rt.lost.stack_failures != 0 || rt.lost.truncated_stacks != 0;
      if ((keep_unsampled || sample_counts.count(key) != 0 || sum_counts.count(key) != 0 || lost_any ||
           allocating.count(key) != 0) &&
          thread_index.count(key) == 0)
        add_thread(rt.pid, rt.tid, &rt);
    }
    const auto thread_of = [&](int32_t pid, int32_t tid) {
      auto it = thread_index.find(thread_key(pid, tid));
      if (it == thread_index.end()) {
        add_thread(pid, tid, nullptr);
        it = thread_index.find(thread_key(pid, tid));
      }
      return it->second;
    };
    for (size_t i = 0; i < raw_.released.size(); ++i) {
      const RawSampleSum& s = raw_.released[i];
      SampleSum out;
      out.stack = sum_instance[i] == kNoIndex ? kNoIndex : instances_[sum_instance[i]].profile_stack;
      out.kind = s.kind;
      out.stack_end = s.stack_end;
      out.samples = s.samples;
      out.cpu_delta_ns = s.cpu_delta_ns;
      out.off_cpu_ns = s.off_cpu_ns;
      out.first_ns = s.first_ns;
      out.last_ns = s.last_ns;
      out_.threads[thread_of(s.pid, s.tid)].sample_sums.push_back(out);
    }
    for (size_t i = 0; i < raw_.samples.size(); ++i) {
      const RawSample& s = raw_.samples[i];
      const uint32_t thread = thread_of(s.pid, s.tid);
      Sample out;
      out.time_ns = s.time_ns;
      out.stack = sample_instance[i] == kNoIndex ? kNoIndex : instances_[sample_instance[i]].profile_stack;
      out.cpu_delta_ns = s.cpu_delta_ns;
      out.off_cpu_ns = s.off_cpu_ns;
      out.kind = s.kind;
      out.stack_end = s.stack_end;
      out_.threads[thread].samples.push_back(out);
    }
    for (Thread& t : out_.threads) {
      if (!std::is_sorted(t.samples.begin(), t.samples.end(),
                          [](const Sample& a, const Sample& b) { return a.time_ns < b.time_ns; })) {
        std::stable_sort(t.samples.begin(), t.samples.end(),
                         [](const Sample& a, const Sample& b) { return a.time_ns < b.time_ns; });
      }
    }
  }

  void build_call_edges(const std::vector<std::pair<uint32_t, uint32_t>>& edge_addresses) {
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

  // One entry per (process, function): addresses of one function (several call sites of mcount in
  // an inlined copy, say) are summed.
  void build_call_latency(const std::vector<uint32_t>& latency_addresses) {
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

  // How to open `module` for MIP counts of `pid`: the ref the stacks used, else one built here.
  ModuleRef mip_module_ref(uint32_t module, int32_t pid) {
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

  // MIP counts: the last snapshot per (pid, module). Each function is named the way sampled frames
  // name it (the symbolizer's outer function at its entry), so its counts and its samples meet in
  // one Func; where the symbolizer has nothing there, the demangled MIP name stands in.
  void build_mip_counts() {
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

  // Exporters hang per-process data on the main thread, so a process with counts but no samples
  // (it ran too briefly to be sampled) still gets one.
  void add_main_thread_if_missing(int32_t pid) {
    for (const Thread& t : out_.threads) {
      if (t.pid == pid) return;
    }
    Thread t;
    t.pid = t.tid = pid;
    t.is_main = true;
    const ProcessView* view = view_of(pid);
    if (view->process != nullptr) {
      t.process_name = view->process->name;
      t.start_ns = view->process->start_ns;
      t.end_ns = view->process->end_ns;
    }
    if (const RawThread* rt = raw_.find_thread(pid, pid); rt != nullptr) {
      t.name = rt->name;
      if (rt->start_ns != 0) t.start_ns = rt->start_ns;
      if (rt->end_ns != 0) t.end_ns = rt->end_ns;
    }
    if (t.name.empty()) t.name = !t.process_name.empty() ? t.process_name : "thread " + std::to_string(pid);
    out_.threads.push_back(std::move(t));
  }

  const RawProfile& raw_;
  Symbolizer& symbolizer_;
  const ConvertOptions& options_;
  Profile out_;

  std::unordered_map<int32_t, ProcessView> processes_;
  ProcessView no_process_;
  int32_t last_pid_ = 0;
  const ProcessView* last_view_ = nullptr;

  std::vector<StackInstance> instances_;
  std::unordered_map<InstanceKey, uint32_t, InstanceKeyHash> instance_index_;
  std::vector<uint32_t> first_by_stack_;      // raw stack -> its first instance
  std::vector<uint32_t> instance_addresses_;  // unique address ids, per instance root first
  std::vector<UniqueAddress> addresses_;
  std::unordered_map<AddressKey, uint32_t, AddressKeyHash> address_index_;
  std::vector<FrameSpec> specs_;
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> callee_code_;  // by UniqueAddress::callee_code
  // Tail calls are told only in stacks unwound by CFI (cfi, dwarf): a frame-pointer walk loses the
  // caller of a function that keeps no frame pointer, which would look the same.
  const bool unwound_by_cfi_ =
      raw_.info.call_graph.ends_with("cfi") || raw_.info.call_graph.ends_with("dwarf");

  std::unordered_map<uint32_t, ModuleRef> module_refs_;  // raw module -> how to open it
  std::unordered_map<uint32_t, uint32_t> module_libs_;   // raw module -> Profile lib
  std::unordered_map<int32_t, uint32_t> jit_libs_;       // pid -> Profile lib of its perf map
  std::shared_ptr<const KernelSymbols> kernel_;          // read when the first kernel address is met
  bool kernel_loaded_ = false;
  bool kernel_ok_ = false;
  uint32_t kernel_lib_ = kNoIndex;
};

}  // namespace

Profile symbolize_profile(const RawProfile& raw, Symbolizer& symbolizer, const ConvertOptions& options) {
  return Converter(raw, symbolizer, options).run();
}

size_t profile_thread_count(const RawProfile& raw) {
  // As build_threads and build_mip_counts decide: every (pid, tid) with samples, sums of released
  // samples or (for a RawThread) lost data, or every RawThread of a recording of named processes,
  // then a main thread for each process with MIP counts and none of those.
  std::unordered_set<uint64_t> threads;
  std::unordered_set<int32_t> pids;
  const auto add = [&](int32_t pid, int32_t tid) {
    threads.insert(static_cast<uint64_t>(static_cast<uint32_t>(pid)) << 32 | static_cast<uint32_t>(tid));
    pids.insert(pid);
  };
  for (const RawSample& s : raw.samples) add(s.pid, s.tid);
  for (const RawSampleSum& s : raw.released) add(s.pid, s.tid);
  const bool keep_unsampled = records_named_processes(raw.info);
  for (const RawThread& t : raw.threads) {
    if (keep_unsampled || t.lost.lost_records != 0 || t.lost.throttle_events != 0 ||
        t.lost.stack_failures != 0 || t.lost.truncated_stacks != 0)
      add(t.pid, t.tid);
  }
  size_t count = threads.size();
  for (const RawMipSnapshot& s : raw.mip_snapshots) {
    if (s.module < raw.modules.size() && pids.insert(s.pid).second) ++count;
  }
  return count;
}

}  // namespace hpd
