// The unique addresses resolved, one Symbolizer batch per module, into frames and libs (converter.h).
#include "converter.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <unordered_set>

namespace hpd::conversion {

namespace {

// A mapping the kernel makes that is no file: "[uprobes]" (the slots where uprobes single-step the
// instructions they displaced, and the uretprobe trampoline), "[vsyscall]", "[uprobes-trampoline]".
// Not "[vdso]" (an ELF image the recorder reads) nor "[anon]" (the process's own memory, e.g. JIT code).
bool is_kernel_special_mapping(const std::string& path) {
  return path.size() > 2 && path.front() == '[' && path.back() == ']' && path != "[vdso]" && path != "[anon]";
}

std::string basename_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%" PRIx64, v);
  return buf;
}

}  // namespace

uint32_t Converter::module_lib(uint32_t module, const ModuleInfo* info) {
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

uint32_t Converter::jit_lib(int32_t pid) {
  auto it = jit_libs_.find(pid);
  if (it != jit_libs_.end()) return it->second;
  Lib lib;
  lib.name = lib.debug_name = "[jit]";
  lib.path = lib.debug_path = "[jit pid " + std::to_string(pid) + "]";
  const uint32_t index = out_.intern_lib(lib);
  jit_libs_.emplace(pid, index);
  return index;
}

uint32_t Converter::kernel_lib() {
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

void Converter::add_location_frames(UniqueAddress& ua, const Location& loc, uint32_t lib,
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

void Converter::resolve_all() {
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

void Converter::retry_unfound_return_addresses(const ModuleRef& ref, const std::vector<uint32_t>& ids,
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

void Converter::find_call_site_callees(const ModuleRef& ref, const std::vector<uint32_t>& ids,
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
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> code = symbolizer_.call_site_callees(ref, offsets);
  for (size_t k = 0; k < asked.size(); ++k) {
    if (code[k].empty()) continue;
    addresses_[asked[k]].callee_code = static_cast<uint32_t>(callee_code_.size());
    callee_code_.push_back(std::move(code[k]));
  }
}

bool Converter::is_tail_call_edge(const UniqueAddress& caller, const UniqueAddress& callee) const {
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

}  // namespace hpd::conversion
