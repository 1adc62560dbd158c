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
#include <chrono>
#include <cstdint>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bpf/bpf_load.h"
#include "bpf/bpf_preloader.h"
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
    arrays_ = CfiMaps::map_arrays(cfi_map_fds(skel_.get(), config_));
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
    std::fill(arrays_.rules, arrays_.rules + arrays_.rules_bytes, 0x5a);
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
    if (std::any_of(arrays_.rules, arrays_.rules + arrays_.rules_bytes, [](uint8_t b) { return b != 0; }))
      out.push_back("the CFI rule array is not zero");
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
  const std::vector<std::string> arrays_dirty(dirty_maps.end() - std::min<size_t>(dirty_maps.size(), 3),
                                              dirty_maps.end());
  EXPECT_EQ(arrays_dirty,
            (std::vector<std::string>{"the CFI row array is not zero", "the CFI rule array is not zero",
                                      "the CFI index array is not zero"}));
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

// The id the kernel gave a program: the same id is the same loaded program.
uint32_t program_id(const bpf_program* program) {
  bpf_prog_info info{};
  uint32_t length = sizeof info;
  EXPECT_EQ(bpf_obj_get_info_by_fd(bpf_program__fd(program), &info, &length), 0);
  return info.id;
}

template <typename Condition>
bool wait_for(Condition condition) {
  for (int i = 0; i < 2400; ++i) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return condition();
}

// hpd's Preloader: a skeleton given back is reset and taken again by the next recording of its kind (the
// same programs, nothing loaded); one whose reset fails (here: given back without the copy of its globals
// at load) is destroyed, never handed out, and a fresh one is loaded in its place.
TEST(Preloader, AGivenBackSkeletonIsReusedAndOneThatCannotBeResetIsReplaced) {
  RecordOptions options;
  options.target.pids = {1};
  const LoadConfig c = load_config_of(options, PerfPrivileges{}, online_cpus().size());
  Preloader& preloader = Preloader::instance();
  ASSERT_TRUE(preloader.load_now(c)) << preloader.status().error;
  ASSERT_EQ(preloader.status().loads, 1u);

  CfiMapArrays arrays;
  GlobalsAtLoad globals;
  Skeleton first = preloader.take(c, &arrays, &globals);
  ASSERT_TRUE(first);
  const uint32_t first_id = program_id(first->progs.hpd_on_cpu);
  first->bss->client_uid = 1234;
  preloader.give_back(c, std::move(first), std::move(arrays), std::move(globals));
  ASSERT_TRUE(wait_for([&] { return preloader.status().reuses == 1 && preloader.status().ready; }));
  Skeleton again = preloader.take(c, &arrays, &globals);
  ASSERT_TRUE(again);
  EXPECT_EQ(program_id(again->progs.hpd_on_cpu), first_id) << "not the skeleton given back";
  EXPECT_EQ(again->bss->client_uid, 0u) << "the globals were not reset";
  EXPECT_EQ(preloader.status().loads, 1u);

  // Given back without its globals' copy: the reset refuses it.
  preloader.give_back(c, std::move(again), std::move(arrays), GlobalsAtLoad{});
  ASSERT_TRUE(wait_for([&] {
    const PreparedRecordingStatus s = preloader.status();
    return s.reset_failures == 1 && s.loads == 2 && s.ready;
  })) << preloader.status().reset_error;
  const PreparedRecordingStatus s = preloader.status();
  EXPECT_EQ(s.reuses, 1u);
  EXPECT_NE(s.reset_error.find("no copy of the eBPF map"), std::string::npos) << s.reset_error;
  Skeleton fresh = preloader.take(c, &arrays, &globals);
  ASSERT_TRUE(fresh);
  EXPECT_NE(program_id(fresh->progs.hpd_on_cpu), first_id) << "the skeleton whose reset failed was kept";
  preloader.stop();
}

// The ring of a system-wide cfi recording: eight times the samples' own, and stack copies of samples whose
// tables are pending may fill it but for twice that (a pid target's: half of its ring). The loaded
// programs take the bound as it was chosen.
TEST(LoadConfig, SystemWideCfiRingLeavesRoomForCopiesAndTwiceTheSamplesRing) {
  RecordOptions pid;
  pid.target.pids = {1};
  pid.call_graph = CallGraph::kCfi;
  const LoadConfig p = load_config_of(pid, PerfPrivileges{}, online_cpus().size());
  EXPECT_EQ(p.copies_below, p.ring_bytes / 2);
  RecordOptions all;
  all.target.all_processes = true;
  all.call_graph = CallGraph::kCfi;
  const LoadConfig a = load_config_of(all, PerfPrivileges{}, online_cpus().size());
  ASSERT_EQ(a.filter_mode, static_cast<uint32_t>(HPD_FILTER_ALL));
  // The samples' own ring is the pid target's (the same rate and CPUs).
  EXPECT_EQ(a.ring_bytes, std::min<uint32_t>(8 * p.ring_bytes, 64u << 20));
  EXPECT_EQ(a.copies_below, std::max(a.ring_bytes / 2, a.ring_bytes - 2 * p.ring_bytes));
  EXPECT_GT(a.copies_below, a.ring_bytes / 2);  // unless the samples' own ring is 16 MiB (hundreds of CPUs)
  LibbpfLogCapture log;
  Skeleton skel = load_skeleton_for(a, log);
  ASSERT_TRUE(skel) << log.tail();
  EXPECT_EQ(skel->rodata->copies_below_bytes, a.copies_below);
  EXPECT_EQ(bpf_map__max_entries(skel->maps.events), a.ring_bytes);
}

// The hypervisor steal clock's place (vmlinux's BTF, read on a thread of its own beside the first load's
// verifier): one answer for every caller, from any thread, and on a KVM guest whose host steals from it
// (kvm-clock available, steal in /proc/stat) an answer, without which a runtime brought up to a sample
// counts the steal as the thread's.
TEST(StealClock, OneAnswerForEveryCallerAndFoundOnAKvmGuestTheHostStealsFrom) {
  std::vector<std::future<std::optional<int64_t>>> answers;
  for (int i = 0; i < 4; ++i) answers.push_back(std::async(std::launch::async, steal_clock_from_run_queue));
  const std::optional<int64_t> place = steal_clock_from_run_queue();
  for (auto& answer : answers) EXPECT_EQ(answer.get(), place);
  const std::string clocks =
      read_small_file("/sys/devices/system/clocksource/clocksource0/available_clocksource").value_or("");
  const std::optional<uint64_t> steal = read_host_steal_ns();
  if (clocks.find("kvm-clock") != std::string::npos && steal.value_or(0) > 0) {
    ASSERT_TRUE(place.has_value()) << "a KVM guest with " << *steal / 1e6 << " ms of steal: no steal clock";
    EXPECT_NE(*place, 0);
  }
}

}  // namespace
}  // namespace hpd::bpf_recording
