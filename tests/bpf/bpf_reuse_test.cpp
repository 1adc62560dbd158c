// Privileged (loads hpd's eBPF object): reset_for_reuse (collect/src/bpf/bpf_reuse.h), which hpd runs on
// a session's programs and maps before the next client's recording uses them. Every map of a loaded
// object is written as a recording would leave it (entries in each hash map, bytes in each array, the
// globals changed, records in the ring), then reset: each map must read as it did right after the load.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bpf/bpf_load.h"
#include "bpf/bpf_reuse.h"
#include "bpf/cfi_maps.h"
#include "hpd/base/proc_files.h"

namespace hpd::bpf_recording {
namespace {

size_t value_bytes(const bpf_map* map) {
  size_t size = bpf_map__value_size(map);
  const auto type = bpf_map__type(map);
  if (type == BPF_MAP_TYPE_PERCPU_ARRAY || type == BPF_MAP_TYPE_PERCPU_HASH ||
      type == BPF_MAP_TYPE_LRU_PERCPU_HASH)
    size = (size + 7) / 8 * 8 * static_cast<size_t>(libbpf_num_possible_cpus());
  return size;
}

bool is_keyed(const bpf_map* map) {
  switch (bpf_map__type(map)) {
    case BPF_MAP_TYPE_HASH:
    case BPF_MAP_TYPE_LRU_HASH:
    case BPF_MAP_TYPE_PERCPU_HASH:
    case BPF_MAP_TYPE_LRU_PERCPU_HASH: return true;
    default: return false;
  }
}

bool is_array(const bpf_map* map) {
  return bpf_map__type(map) == BPF_MAP_TYPE_ARRAY || bpf_map__type(map) == BPF_MAP_TYPE_PERCPU_ARRAY;
}

bool frozen(const bpf_map* map) {
  return (bpf_map__map_flags(map) & BPF_F_RDONLY_PROG) != 0;
}

// The keys of an array written and read: its first, its middle and its last entry.
std::vector<uint32_t> probe_keys(const bpf_map* map) {
  const uint32_t n = bpf_map__max_entries(map);
  std::vector<uint32_t> keys = {0, n / 2, n - 1};
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

std::vector<uint8_t> read_entry(const bpf_map* map, uint32_t key) {
  std::vector<uint8_t> value(value_bytes(map));
  EXPECT_EQ(bpf_map_lookup_elem(bpf_map__fd(map), &key, value.data()), 0) << bpf_map__name(map);
  return value;
}

class Reuse : public ::testing::Test {
 protected:
  void SetUp() override {
    RecordOptions options;
    options.target.pids = {1};
    options.call_graph = CallGraph::kCfi;
    config_ = load_config_of(options, PerfPrivileges{}, online_cpus().size());
    config_.off_cpu = true;
    config_.attach_state = true;
    LibbpfLogCapture log;
    skel_ = load_skeleton_for(config_, log);
    ASSERT_TRUE(skel_);
    globals_ = globals_at_load(skel_.get());
    arrays_ = CfiMaps::map_arrays(bpf_map__fd(skel_->maps.cfi_rows), config_.cfi_rows,
                                  bpf_map__fd(skel_->maps.cfi_index), config_.cfi_index);
  }

  // Writes every map as a recording leaves it: a key in each hash map, 0x5a bytes over the probed entries
  // of each array (through the mapping for the CFI arrays), the globals changed, records in the ring.
  void dirty() {
    bpf_map* map = nullptr;
    bpf_object__for_each_map(map, skel_->obj) {
      const int fd = bpf_map__fd(map);
      if (is_keyed(map)) {
        std::vector<uint8_t> key(bpf_map__key_size(map), 0x5a);
        const std::vector<uint8_t> value(value_bytes(map), 0x5a);
        ASSERT_EQ(bpf_map_update_elem(fd, key.data(), value.data(), BPF_ANY), 0) << bpf_map__name(map);
        key[0] = 0x5b;
        ASSERT_EQ(bpf_map_update_elem(fd, key.data(), value.data(), BPF_ANY), 0) << bpf_map__name(map);
      } else if (is_array(map) && !frozen(map)) {
        const std::vector<uint8_t> value(value_bytes(map), 0x5a);
        for (const uint32_t key : probe_keys(map))
          ASSERT_EQ(bpf_map_update_elem(fd, &key, value.data(), BPF_ANY), 0) << bpf_map__name(map);
      }
    }
    std::fill(arrays_.rows, arrays_.rows + arrays_.rows_bytes, 0x5a);
    std::fill(arrays_.index, arrays_.index + arrays_.index_bytes, 0x5a);
    skel_->bss->client_uid = 1234;
  }

  std::vector<std::string> differences() {
    std::vector<std::string> out;
    bpf_map* map = nullptr;
    bpf_object__for_each_map(map, skel_->obj) {
      const int fd = bpf_map__fd(map);
      const std::string name = bpf_map__name(map);
      if (is_keyed(map)) {
        std::vector<uint8_t> key(bpf_map__key_size(map));
        if (bpf_map_get_next_key(fd, nullptr, key.data()) == 0) out.push_back(name + " has keys");
      } else if (is_array(map) && bpf_map__is_internal(map)) {
        if (frozen(map)) continue;
        const auto it = std::find_if(globals_.sections.begin(), globals_.sections.end(),
                                     [&](const auto& s) { return s.first == name; });
        if (it == globals_.sections.end() || read_entry(map, 0) != it->second)
          out.push_back(name + " differs from its bytes at load");
      } else if (is_array(map)) {
        for (const uint32_t key : probe_keys(map)) {
          const std::vector<uint8_t> value = read_entry(map, key);
          if (std::any_of(value.begin(), value.end(), [](uint8_t b) { return b != 0; }))
            out.push_back(name + "[" + std::to_string(key) + "] is not zero");
        }
      }
    }
    if (std::any_of(arrays_.rows, arrays_.rows + arrays_.rows_bytes, [](uint8_t b) { return b != 0; }))
      out.push_back("the CFI row array is not zero");
    if (std::any_of(arrays_.index, arrays_.index + arrays_.index_bytes, [](uint8_t b) { return b != 0; }))
      out.push_back("the CFI index array is not zero");
    return out;
  }

  LoadConfig config_;
  Skeleton skel_;
  GlobalsAtLoad globals_;
  CfiMapArrays arrays_;
};

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& l : lines) text += "\n  " + l;
  return text;
}

// Every map the dirtying wrote reads, after the reset, as it did after the load; and the dirtying did
// change each (so that the check is not vacuous).
TEST_F(Reuse, ResetPutsEveryMapBackAsLoaded) {
  ASSERT_EQ(globals_.sections.size(), 1u) << "profile.bpf.c's writable globals are one .bss";
  EXPECT_EQ(skel_->bss->client_uid, 0u);
  dirty();
  const std::vector<std::string> dirty_maps = differences();
  bpf_map* map = nullptr;
  bpf_object__for_each_map(map, skel_->obj) {
    if (!is_keyed(map) && !(is_array(map) && !frozen(map))) continue;
    const std::string name = bpf_map__name(map);
    EXPECT_TRUE(std::any_of(
        dirty_maps.begin(), dirty_maps.end(),
        [&](const std::string& d) { return d.starts_with(name + " ") || d.starts_with(name + "["); }))
        << "the dirtying left " << name << " as it was loaded";
  }
  EXPECT_EQ(dirty_maps.size() >= 2 ? dirty_maps[dirty_maps.size() - 2] : "", "the CFI row array is not zero");
  const std::string why = reset_for_reuse(skel_.get(), config_, globals_, arrays_);
  EXPECT_EQ(why, "");
  EXPECT_EQ(differences(), std::vector<std::string>{}) << joined(differences());
  EXPECT_EQ(skel_->bss->client_uid, 0u);
}

// The ring: records left in it are read and dropped by the reset, so a reader made afterwards (the next
// session's) finds none. (hpd_warm_ring fills it with discarded records, which a reader skips: the
// consumer position must still reach the producer's.)
TEST_F(Reuse, ResetDrainsTheRing) {
  if (!config_.warm_ring) GTEST_SKIP() << "the kernel cannot run hpd_warm_ring";
  bpf_test_run_opts run{};
  run.sz = sizeof run;
  ASSERT_EQ(bpf_prog_test_run_opts(bpf_program__fd(skel_->progs.hpd_warm_ring), &run), 0);
  ASSERT_GT(run.retval, 0u);
  const auto positions = [&] {
    const int fd = bpf_map__fd(skel_->maps.events);
    const long page = sysconf(_SC_PAGESIZE);
    void* consumer = mmap(nullptr, page, PROT_READ, MAP_SHARED, fd, 0);
    void* producer = mmap(nullptr, page, PROT_READ, MAP_SHARED, fd, page);
    EXPECT_NE(consumer, MAP_FAILED);
    EXPECT_NE(producer, MAP_FAILED);
    const auto pos = std::make_pair(*static_cast<volatile unsigned long*>(consumer),
                                    *static_cast<volatile unsigned long*>(producer));
    munmap(consumer, page);
    munmap(producer, page);
    return pos;
  };
  const auto before = positions();
  EXPECT_LT(before.first, before.second) << "hpd_warm_ring left no record in the ring";
  EXPECT_EQ(reset_for_reuse(skel_.get(), config_, globals_, arrays_), "");
  const auto after = positions();
  EXPECT_EQ(after.first, after.second) << "records left in the ring";
}

}  // namespace
}  // namespace hpd::bpf_recording
