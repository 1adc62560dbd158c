// ModuleCache: modules keyed by build-id and path (or path and process), tables loaded on first use and
// evicted least recently used first once their measured bytes pass the cap.
#include "module_cache.h"

namespace hpd {

std::string ModuleCache::key_of(const ModuleRef& ref) {
  // Files without a build-id are told apart by path, and by process (a container's /usr/lib/x
  // is not the host's). Files with one by build-id and path: anyone can link a program with another's
  // build-id (-Wl,--build-id=0x...), and the first one loaded would name the other's addresses.
  if (!ref.build_id.empty()) return "b:" + ref.build_id + "#" + ref.path;
  return "p:" + ref.path + "#" + std::to_string(ref.pid);
}

ModuleCache::Entry& ModuleCache::find_or_load(const ModuleRef& ref) {
  const bool same_as_last = last_entry_ != nullptr && is_last(ref);
  Entry& e = same_as_last ? *last_entry_ : entries_.try_emplace(key_of(ref)).first->second;
  if (!same_as_last) {
    last_entry_ = &e;  // entries are never erased, so the pointer stays valid
    last_ref_ = ref;
  }
  if (e.loaded) {
    lru_.splice(lru_.begin(), lru_, e.lru);  // touch
    return e;
  }
  if (e.attempted && !e.info.readable) return e;  // a known failure; do not retry every call
  e.attempted = true;
  e.loaded = load_(ref, e.info);
  if (e.loaded) {
    lru_.push_front(key_of(ref));
    e.lru = lru_.begin();
    e.bytes = e.loaded->memory_bytes();
    bytes_used_ += e.bytes;
    evict_over_cap(&e);
  }
  return e;
}

void ModuleCache::measure(Entry& e) {
  e.lookups_since_measure = 0;
  const size_t now = e.loaded->memory_bytes();
  bytes_used_ = bytes_used_ - e.bytes + now;
  e.bytes = now;
  evict_over_cap(&e);
}

void ModuleCache::evict_over_cap(const Entry* keep) {
  while (bytes_used_ > cap_bytes_ && !lru_.empty()) {
    Entry& victim = entries_.at(lru_.back());
    if (&victim == keep) break;  // the module in use stays, even alone over the cap
    bytes_used_ -= victim.bytes;
    victim.bytes = 0;
    victim.loaded.reset();
    lru_.pop_back();
  }
}

}  // namespace hpd
