// hpd's programs and maps used again by the next recording (bpf_reuse.h).
#include "bpf/bpf_reuse.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <numeric>

namespace hpd::bpf_recording {

namespace {

bool writable_global(const bpf_map* map) {
  return bpf_map__is_internal(map) && (bpf_map__map_flags(map) & BPF_F_RDONLY_PROG) == 0;
}

std::string failed(const bpf_map* map, const std::string& what, int err) {
  return std::string("cannot ") + what + " of the eBPF map " + bpf_map__name(map) + ": " + errno_text(err);
}

// Deletes every key; then the map must be empty.
std::string empty_keyed(const bpf_map* map) {
  const int fd = bpf_map__fd(map);
  const size_t key_size = bpf_map__key_size(map);
  std::vector<uint8_t> keys;
  std::vector<uint8_t> next(key_size);
  const void* prev = nullptr;
  // The keys first, then their deletion: a key deleted while listed would restart the listing.
  for (;;) {
    if (bpf_map_get_next_key(fd, prev, next.data()) != 0) {
      if (errno == ENOENT) break;
      return failed(map, "list the keys", errno);
    }
    keys.insert(keys.end(), next.begin(), next.end());
    prev = keys.data() + keys.size() - key_size;
  }
  for (size_t at = 0; at < keys.size(); at += key_size) {
    if (bpf_map_delete_elem(fd, keys.data() + at) != 0 && errno != ENOENT)
      return failed(map, "delete a key", errno);
  }
  if (bpf_map_get_next_key(fd, nullptr, next.data()) == 0) return failed(map, "empty", ENOTEMPTY);
  if (errno != ENOENT) return failed(map, "list the keys", errno);
  return "";
}

// Writes zeros to every entry, in one call when the kernel takes a batch.
std::string zero_array(const bpf_map* map) {
  const int fd = bpf_map__fd(map);
  const uint32_t entries = bpf_map__max_entries(map);
  size_t value_size = bpf_map__value_size(map);
  if (bpf_map__type(map) == BPF_MAP_TYPE_PERCPU_ARRAY) {
    const int possible = libbpf_num_possible_cpus();
    if (possible <= 0) return failed(map, "count the CPUs", -possible);
    value_size = (value_size + 7) / 8 * 8 * static_cast<size_t>(possible);
  }
  std::vector<uint32_t> keys(entries);
  std::iota(keys.begin(), keys.end(), 0u);
  const std::vector<uint8_t> zeros(value_size * entries, 0);
  uint32_t count = entries;
  if (bpf_map_update_batch(fd, keys.data(), zeros.data(), &count, nullptr) == 0 && count == entries)
    return "";
  for (const uint32_t key : keys) {
    if (bpf_map_update_elem(fd, &key, zeros.data(), BPF_ANY) != 0) return failed(map, "zero an entry", errno);
  }
  return "";
}

// The slots of a map of descriptors (cgroups, perf events) cleared.
std::string clear_slots(const bpf_map* map) {
  const int fd = bpf_map__fd(map);
  for (uint32_t key = 0; key < bpf_map__max_entries(map); ++key) {
    if (bpf_map_delete_elem(fd, &key) != 0 && errno != ENOENT) return failed(map, "clear a slot", errno);
  }
  return "";
}

int drop_record(void*, void*, size_t) {
  return 0;
}

// Reads the ring's records to its producer's position, dropping them; then none may be left.
std::string drain_ring(const bpf_map* map) {
  RingReader ring(ring_buffer__new(bpf_map__fd(map), drop_record, nullptr, nullptr));
  if (!ring) return failed(map, "read", errno);
  if (ring_buffer__consume(ring.get()) < 0) return failed(map, "drain", errno);
  const int left = ring_buffer__consume(ring.get());
  if (left != 0) return failed(map, "drain", left < 0 ? -left : EAGAIN);
  return "";
}

std::string restore_global(const bpf_map* map, const GlobalsAtLoad& globals) {
  const auto it = std::find_if(globals.sections.begin(), globals.sections.end(),
                               [&](const auto& s) { return s.first == bpf_map__name(map); });
  if (it == globals.sections.end() || it->second.size() != bpf_map__value_size(map))
    return std::string("no copy of the eBPF map ") + bpf_map__name(map) + " as it was loaded";
  const uint32_t key = 0;
  if (bpf_map_update_elem(bpf_map__fd(map), &key, it->second.data(), BPF_ANY) != 0)
    return failed(map, "restore the values", errno);
  return "";
}

}  // namespace

GlobalsAtLoad globals_at_load(const profile_bpf* skel) {
  GlobalsAtLoad out;
  const bpf_map* map = nullptr;
  bpf_object__for_each_map(map, skel->obj) {
    if (!writable_global(map)) continue;
    std::vector<uint8_t> bytes(bpf_map__value_size(map));
    const uint32_t key = 0;
    if (bpf_map_lookup_elem(bpf_map__fd(map), &key, bytes.data()) != 0) continue;  // reset refuses it
    out.sections.emplace_back(bpf_map__name(map), std::move(bytes));
  }
  return out;
}

CfiMaps::Fds cfi_map_fds(const profile_bpf* skel, const LoadConfig& c) {
  CfiMaps::Fds fds;
  fds.rows_fd = bpf_map__fd(skel->maps.cfi_rows);
  fds.row_capacity = c.cfi_rows;
  fds.rules_fd = bpf_map__fd(skel->maps.cfi_rules);
  fds.rule_capacity = bpf_map__max_entries(skel->maps.cfi_rules);
  fds.index_fd = bpf_map__fd(skel->maps.cfi_index);
  fds.index_capacity = c.cfi_index;
  fds.procs_fd = bpf_map__fd(skel->maps.proc_mappings);
  return fds;
}

std::string reset_for_reuse(profile_bpf* skel, const LoadConfig& c, const GlobalsAtLoad& globals,
                            CfiMapArrays& arrays) {
  if (c.cfi && (arrays.rows == nullptr || arrays.rules == nullptr || arrays.index == nullptr)) {
    try {
      arrays = CfiMaps::map_arrays(cfi_map_fds(skel, c));
    } catch (const std::exception& e) {
      return e.what();
    }
  }
  const bpf_map* map = nullptr;
  bpf_object__for_each_map(map, skel->obj) {
    std::string why;
    switch (bpf_map__type(map)) {
      case BPF_MAP_TYPE_HASH:
      case BPF_MAP_TYPE_LRU_HASH:
      case BPF_MAP_TYPE_PERCPU_HASH:
      case BPF_MAP_TYPE_LRU_PERCPU_HASH:
      case BPF_MAP_TYPE_STACK_TRACE: why = empty_keyed(map); break;
      case BPF_MAP_TYPE_ARRAY:
      case BPF_MAP_TYPE_PERCPU_ARRAY:
        if (bpf_map__is_internal(map)) {
          if (writable_global(map)) why = restore_global(map, globals);
          // .rodata and .kconfig are frozen, and part of the LoadConfig.
        } else if (c.cfi && map == skel->maps.cfi_rows) {
          std::memset(arrays.rows, 0, arrays.rows_bytes);
        } else if (c.cfi && map == skel->maps.cfi_index) {
          std::memset(arrays.index, 0, arrays.index_bytes);
        } else if (c.cfi && map == skel->maps.cfi_rules) {
          std::memset(arrays.rules, 0, arrays.rules_bytes);
        } else {
          why = zero_array(map);
        }
        break;
      case BPF_MAP_TYPE_CGROUP_ARRAY:
      case BPF_MAP_TYPE_PERF_EVENT_ARRAY: why = clear_slots(map); break;
      case BPF_MAP_TYPE_RINGBUF: why = drain_ring(map); break;
      default:
        why = std::string("the eBPF map ") + bpf_map__name(map) + " is of a type hpd does not reset (" +
              std::to_string(bpf_map__type(map)) + ")";
    }
    if (!why.empty()) return why;
  }
  return "";
}

}  // namespace hpd::bpf_recording
