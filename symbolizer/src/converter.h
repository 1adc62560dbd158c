// symbolize_profile's Converter: one RawProfile to one Profile. Its parts are defined by what they do:
// convert.cpp runs them in order; convert_stacks.cpp collects each sample's stack instance and its
// unique addresses and builds the Profile's stacks; convert_resolve.cpp resolves the addresses (one
// Symbolizer batch per module) into frames and libs; convert_threads.cpp builds the threads and
// their samples; convert_counts.cpp the exact call counts, call latency, sampled allocations and MIP
// counts. Internal to hpd_symbolizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hpd/symbolizer/convert.h"

namespace hpd::conversion {

// Whether hpd recorded processes the user named (by pid, or a command it launched) with one of its own
// backends: not the whole system (--all, continuous mode), a cgroup, nor a perf.data file. Every
// thread such a recording saw is one the user asked for. From the targets recording_common.cpp
// writes: "pid N", "pids ...", the command, "PIDS while running CMD"; the others are "all processes[
// while running CMD]", "cgroup ..." and, for merged chunks, "continuous profile (...)".
bool records_named_processes(const RecordingInfo& info);

// perf marks context switches inside callchains with values from PERF_CONTEXT_MAX (-4095) up.
constexpr uint64_t kPerfContextMax = static_cast<uint64_t>(-4095);

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

  Profile run();

 private:
  void index_processes();

  // The perf-map symbol of the process that covers `address`, or kNoIndex.
  uint32_t jit_symbol(const ProcessView& view, uint64_t address) const;

  const ProcessView* view_of(int32_t pid);

  // The stack instance of a sample (or of a sum of samples, at its first sample's time); new
  // instances' addresses are collected on the way. kNoIndex for a sample without a stack.
  uint32_t instance_of(uint32_t stack, int32_t pid, SampleKind kind, uint64_t time_ns);

  // Maps every sample, and every sum of released samples, to a stack instance (first the sums: they
  // are the earlier samples).
  std::vector<uint32_t> collect_instances(std::vector<uint32_t>& sum_instance);

  void add_instance(uint32_t stack, int32_t pid, uint64_t time_ns, const ProcessView& view, SampleKind kind,
                    uint32_t epoch);

  uint32_t intern_address(const AddressKey& key);

  uint32_t user_address(const ProcessView& view, uint64_t address, bool exact, uint64_t time_ns);

  uint32_t kernel_address(uint64_t address, bool exact);

  // Call edges: the caller side is a return address (looked up one byte back), the callee an entry.
  std::vector<std::pair<uint32_t, uint32_t>> collect_call_edges();

  // Call latency: keyed by the callee address, as the edges' callee side.
  std::vector<uint32_t> collect_call_latency();

  // Sampled allocations: their stacks are all return addresses (kAfterSyscall leaves), resolved with
  // the process's mappings as they were at the end (the log has no times).
  std::vector<uint32_t> collect_allocations();

  void build_allocations(const std::vector<uint32_t>& allocation_instance);

  uint32_t module_lib(uint32_t module, const ModuleInfo* info);

  // The "library" of a process's JIT code (named from its perf map or jitdump): "[jit]", one per
  // process so that each keeps its own path.
  uint32_t jit_lib(int32_t pid);

  uint32_t kernel_lib();

  void add_location_frames(UniqueAddress& ua, const Location& loc, uint32_t lib,
                           const std::string& fallback_name, int64_t frame_address);

  // Resolves every unique address: one Symbolizer::resolve batch per module.
  void resolve_all();

  // A user leaf taken for a return address (after a system call; in captures that do not say, every
  // user leaf under kernel frames) may still be an interrupted instruction. When that was a
  // function's first byte, one byte back lies in the padding before it (or in no function at all)
  // and nothing is found: the address itself, found, is then the better answer. A real return
  // address is never at a function's first byte unless the call ended the function before it, and
  // that call's byte does lie in a function.
  void retry_unfound_return_addresses(const ModuleRef& ref, const std::vector<uint32_t>& ids,
                                      std::vector<Location>& locs, std::vector<bool>& retried);

  // The callee each found return address's call site names (a return address is one whose lookup
  // was nudged and stayed so).
  void find_call_site_callees(const ModuleRef& ref, const std::vector<uint32_t>& ids,
                              const std::vector<Location>& locs, const std::vector<bool>& retried);

  // Whether the edge from `caller` (a return address) to `callee` (the address below it) is a tail
  // call: the caller's call site names a function, and `callee` lies outside its code. Both must be
  // found in one module; anything less is not known, and not marked.
  bool is_tail_call_edge(const UniqueAddress& caller, const UniqueAddress& callee) const;

  uint32_t frame_of(FrameSpec& spec, Category category);

  void build_stack(StackInstance& inst);

  static uint64_t thread_key(int32_t pid, int32_t tid);

  // One Thread per RawThread that has samples or lost data (in RawProfile order), then one per
  // (pid, tid) that has samples but no RawThread. A RawThread without samples stays too when the
  // recording took processes the user named (records_named_processes): it existed, blocked or idle
  // (the perf_event backend samples only CPU time without --off-cpu), and gets its track with its
  // name and lifetime and no sample. A system-wide, cgroup or perf.data recording may know thousands
  // of threads that never ran: those are left out there. One whose records were all lost stays, so
  // the loss is not hidden.
  void build_threads(const std::vector<uint32_t>& sample_instance, const std::vector<uint32_t>& sum_instance);

  void build_call_edges(const std::vector<std::pair<uint32_t, uint32_t>>& edge_addresses);

  // One entry per (process, function): addresses of one function (several call sites of mcount in
  // an inlined copy, say) are summed.
  void build_call_latency(const std::vector<uint32_t>& latency_addresses);

  // How to open `module` for MIP counts of `pid`: the ref the stacks used, else one built here.
  ModuleRef mip_module_ref(uint32_t module, int32_t pid);

  // MIP counts: the last snapshot per (pid, module). Each function is named the way sampled frames
  // name it (the symbolizer's outer function at its entry), so its counts and its samples meet in
  // one Func; where the symbolizer has nothing there, the demangled MIP name stands in.
  void build_mip_counts();

  // Exporters hang per-process data on the main thread, so a process with counts but no samples
  // (it ran too briefly to be sampled) still gets one.
  void add_main_thread_if_missing(int32_t pid);

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

}  // namespace hpd::conversion
