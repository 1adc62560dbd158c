// Each sample's stack instance and its unique addresses, and the Profile's stacks built from them
// (converter.h).
#include "converter.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <unordered_set>

namespace hpd::conversion {

void Converter::index_processes() {
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

uint32_t Converter::jit_symbol(const ProcessView& view, uint64_t address) const {
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

const ProcessView* Converter::view_of(int32_t pid) {
  if (pid == last_pid_ && last_view_ != nullptr) return last_view_;
  auto it = processes_.find(pid);
  last_pid_ = pid;
  last_view_ = it == processes_.end() ? &no_process_ : &it->second;
  return last_view_;
}

uint32_t Converter::instance_of(uint32_t stack, int32_t pid, SampleKind kind, uint64_t time_ns) {
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

std::vector<uint32_t> Converter::collect_instances(std::vector<uint32_t>& sum_instance) {
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

void Converter::add_instance(uint32_t stack, int32_t pid, uint64_t time_ns, const ProcessView& view,
                             SampleKind kind, uint32_t epoch) {
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

uint32_t Converter::intern_address(const AddressKey& key) {
  auto [it, inserted] = address_index_.try_emplace(key, static_cast<uint32_t>(addresses_.size()));
  if (inserted) addresses_.push_back(UniqueAddress{key});
  return it->second;
}

uint32_t Converter::user_address(const ProcessView& view, uint64_t address, bool exact, uint64_t time_ns) {
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

uint32_t Converter::kernel_address(uint64_t address, bool exact) {
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

uint32_t Converter::frame_of(FrameSpec& spec, Category category) {
  uint32_t& slot = spec.interned[static_cast<int>(category)];
  if (slot == kNoIndex) {
    Frame f = spec.frame;
    f.category = category;
    slot = out_.intern_frame(f);
  }
  return slot;
}

void Converter::build_stack(StackInstance& inst) {
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
      prefix = out_.intern_stack(prefix, frame_of(specs_[ua.first_spec + s], category), tail_call && s == 0);
    }
  }
  inst.profile_stack = prefix;
}

}  // namespace hpd::conversion
