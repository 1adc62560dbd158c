// ModuleCache: every module asked for, by build-id and path (or path and process): its facts (ModuleInfo)
// kept for good, its tables (LoadedModule) in a least-recently-used cache under a byte cap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hpd/symbolizer/symbolizer.h"
#include "loaded_module.h"

namespace hpd {

class ModuleCache {
 public:
  struct Entry {
    ModuleInfo info;
    std::unique_ptr<LoadedModule> loaded;  // null when unreadable or evicted
    bool attempted = false;
    size_t bytes = 0;
    size_t lookups_since_measure = 0;
    std::list<std::string>::iterator lru;  // valid while loaded
  };
  // Builds a module's tables and fills its facts; nullptr when it cannot be read.
  using Loader = std::function<std::unique_ptr<LoadedModule>(const ModuleRef&, ModuleInfo&)>;

  ModuleCache(uint64_t cap_bytes, Loader load) : cap_bytes_(cap_bytes), load_(std::move(load)) {}

  // The module's entry, loaded unless it could not be read (a known failure is not retried) or
  // was evicted and cannot be read again. Entries are never erased: references stay valid.
  Entry& get(const ModuleRef& ref) {
    // Callers resolving one address at a time ask for the same module again and again, and
    // building its key string each time shows in profiles.
    if (last_entry_ != nullptr && last_entry_->loaded && is_last(ref)) {
      lru_.splice(lru_.begin(), lru_, last_entry_->lru);  // touch
      return *last_entry_;
    }
    return find_or_load(ref);
  }

  // Re-measures an entry whose tables grew (demangled names and DWARF units are cached lazily).
  // Measuring walks the module's tables, so callers that resolve one address at a time (hpctl
  // symbolize reading stdin) re-measure only every kLookupsPerMeasure lookups; batches always.
  static constexpr size_t kLookupsPerMeasure = 256;
  void remeasure(Entry& e, size_t lookups) {
    if (!e.loaded) return;
    e.lookups_since_measure += lookups;
    if (lookups <= 1 && e.lookups_since_measure < kLookupsPerMeasure) return;
    measure(e);
  }

  uint64_t bytes_used() const { return bytes_used_; }
  // The facts of every module asked for.
  std::vector<ModuleInfo> infos() const {
    std::vector<ModuleInfo> out;
    out.reserve(entries_.size());
    for (const auto& [key, e] : entries_) out.push_back(e.info);
    return out;
  }
  size_t cached_modules() const { return lru_.size(); }

 private:
  static std::string key_of(const ModuleRef& ref);
  bool is_last(const ModuleRef& ref) const {
    return ref.build_id == last_ref_.build_id && ref.path == last_ref_.path &&
           (!ref.build_id.empty() || ref.pid == last_ref_.pid);
  }
  Entry& find_or_load(const ModuleRef& ref);
  void measure(Entry& e);
  void evict_over_cap(const Entry* keep);

  uint64_t cap_bytes_;
  Loader load_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // most recently used first
  uint64_t bytes_used_ = 0;
  // The entry of the previous get() and what it was asked with.
  Entry* last_entry_ = nullptr;
  ModuleRef last_ref_;
};

}  // namespace hpd
