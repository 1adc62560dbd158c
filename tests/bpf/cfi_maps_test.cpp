// Privileged (creates BPF maps): CfiMaps on the page Linux 6.18 maps as [uprobes-trampoline] (and on the
// return probes' trampoline of its [uprobes] page, at the end). The real
// page cannot be read from outside its process (calls_pid_latency_test records through it), so these
// tests hand CfiMaps a page of this process under that name: with the kernel's code it gets the rows
// (published with the bias of the page, and CfiMaps::walk_stack steps out of it to the return address
// the call pushed); with a byte changed, or a mapping of another size, no rows and the reason in the
// summary's without-table list.
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "bpf/cfi_maps.h"
#include "hpd/base/proc_maps.h"
#include "hpd/base/unique_fd.h"
#include "hpd/unwind/cfi_table.h"
#include "own_return_address.h"
#include "temp_dir.h"

namespace hpd {
namespace {

constexpr uint8_t kCode[] = {0x51, 0x41, 0x53, 0x50, 0x48, 0xc7, 0xc0, 0x50, 0x01, 0x00,
                             0x00, 0x0f, 0x05, 0x58, 0x41, 0x5b, 0x59, 0xc3, 0xcc};

struct Maps {
  UniqueFd rows, rules, index, procs;
  std::unique_ptr<CfiMaps> cfi;
  bool open(uint32_t row_capacity = 1024, uint32_t index_capacity = 256,
            uint32_t rule_capacity = HPD_CFI_RULES) {
    LIBBPF_OPTS(bpf_map_create_opts, mmapable, .map_flags = BPF_F_MMAPABLE);
    rows.reset(bpf_map_create(BPF_MAP_TYPE_ARRAY, "t_rows", 4, sizeof(hpd_cfi_row), row_capacity, &mmapable));
    rules.reset(
        bpf_map_create(BPF_MAP_TYPE_ARRAY, "t_rules", 4, sizeof(hpd_cfi_rule), rule_capacity, &mmapable));
    index.reset(
        bpf_map_create(BPF_MAP_TYPE_ARRAY, "t_index", 4, sizeof(hpd_cfi_bucket), index_capacity, &mmapable));
    procs.reset(bpf_map_create(BPF_MAP_TYPE_HASH, "t_procs", 4, sizeof(hpd_proc_mappings), 8, nullptr));
    if (!rows || !rules || !index || !procs) return false;
    CfiMaps::Fds fds;
    fds.rows_fd = rows.get();
    fds.row_capacity = row_capacity;
    fds.rules_fd = rules.get();
    fds.rule_capacity = rule_capacity;
    fds.index_fd = index.get();
    fds.index_capacity = index_capacity;
    fds.procs_fd = procs.get();
    cfi = std::make_unique<CfiMaps>(fds);
    return true;
  }
  // The mapping published for process `pid` (this one by default) at `start`.
  hpd_proc_mapping published(uint64_t start, int32_t pid = ::getpid()) const {
    auto value = std::make_unique<hpd_proc_mappings>();
    hpd_proc_mapping out{};
    if (bpf_map_lookup_elem(procs.get(), &pid, value.get()) != 0) return out;
    for (uint32_t i = 0; i < value->count && i < HPD_MAX_PROC_MAPPINGS; ++i)
      if (value->mappings[i].start == start) out = value->mappings[i];
    return out;
  }
};

// A page of this process holding `code`.
struct Page {
  uint8_t* bytes = static_cast<uint8_t*>(
      ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  explicit Page(std::vector<uint8_t> code) {
    if (bytes != MAP_FAILED) std::memcpy(bytes, code.data(), code.size());
  }
  ~Page() {
    if (bytes != MAP_FAILED) ::munmap(bytes, 4096);
  }
  uint64_t start() const { return reinterpret_cast<uint64_t>(bytes); }
};

std::string without_table(const CfiMaps& cfi) {
  std::string text;
  for (const std::string& line : cfi.stats().without_table) text += line + "\n";
  return text;
}

// The page, mapped under `name` at `file_offset` (no offset into the page: the rows are at offsets from
// its start), is published with `rows` rows and the page's start as its bias, and nothing is pending.
void expect_published(Maps& maps, const Page& page, const char* name, uint64_t file_offset, uint32_t rows) {
  maps.cfi->add_mapping(::getpid(), page.start(), 4096, file_offset, name, nullptr, 0);
  maps.cfi->poll();
  EXPECT_EQ(without_table(*maps.cfi), "");
  const hpd_proc_mapping m = maps.published(page.start());
  EXPECT_EQ(m.end, page.start() + 4096);
  EXPECT_EQ(m.row_count, rows);
  EXPECT_EQ(m.bias, page.start());
  EXPECT_EQ(m.flags & HPD_MAPPING_PENDING, 0u);
}

// Walked from each (offset into the page, sp that many slots into `slots`): the walk steps out of the
// page to `ret` and ends there (rbp 0), without a frame-pointer step.
void expect_walks_out(Maps& maps, const Page& page, std::span<const uint64_t> slots, uint64_t ret,
                      const std::vector<std::pair<uint64_t, uint64_t>>& offset_skip) {
  const std::span<const uint8_t> stack(reinterpret_cast<const uint8_t*>(slots.data()), slots.size_bytes());
  const uint64_t sp = 0x7ffd0000;
  for (const auto& [offset, skip] : offset_skip) {
    SCOPED_TRACE(offset);
    const CfiMaps::StackWalk w =
        maps.cfi->walk_stack(::getpid(), page.start() + offset, sp + 8 * skip, 0, stack.subspan(8 * skip));
    EXPECT_EQ(w.ips, (std::vector<uint64_t>{page.start() + offset, ret}));
    EXPECT_EQ(w.end, HPD_USER_END_FP_ZERO);
    EXPECT_EQ(w.fp_frames, 0u);
    EXPECT_FALSE(w.pending);
  }
}

TEST(CfiMapsUprobeTrampoline, TheKernelsCodeGetsRowsAndTheWalkStepsOutOfIt) {
  Maps maps;
  ASSERT_TRUE(maps.open()) << std::strerror(errno);
  Page page(std::vector<uint8_t>(std::begin(kCode), std::end(kCode)));
  ASSERT_NE(page.bytes, MAP_FAILED);
  // As perf's mmap records name it (cut to 16 bytes), at a file offset that is no offset into the page.
  expect_published(maps, page, "[uprobes-trampo", 0x3ff000, 8);

  // Stopped after the syscall (pc +0xd): rax, r11, rcx and the return address are on the stack, so the
  // caller's pc is the fourth slot; after `pop %rax` (+0xe) the third; at the ret (+0x11) the first.
  const uint64_t ret = 0x1234567;  // in no mapping: the walk goes on by frame pointer, rbp 0 ends it
  const uint64_t slots[6] = {11, 22, 33, ret, 0, 0};
  expect_walks_out(maps, page, slots, ret, {{0xd, 0}, {0xe, 1}, {0x11, 3}});
}

TEST(CfiMapsUprobeTrampoline, OtherCodeGetsNoRowsAndTheSummarySaysWhy) {
  Maps maps;
  ASSERT_TRUE(maps.open()) << std::strerror(errno);
  std::vector<uint8_t> code(std::begin(kCode), std::end(kCode));
  code[0x10] = 0x5a;  // pop %rdx
  Page page(code);
  ASSERT_NE(page.bytes, MAP_FAILED);
  MapsEntry entry;
  entry.start = page.start();
  entry.end = page.start() + 4096;
  entry.readable = entry.executable = true;
  entry.path = "[uprobes-trampoline]";
  maps.cfi->add_process_maps(::getpid(), {entry});
  maps.cfi->poll();
  EXPECT_NE(
      without_table(*maps.cfi).find("[uprobes-trampoline]: its code differs (byte 0x10 is 0x5a, not 0x59"),
      std::string::npos)
      << without_table(*maps.cfi);
  EXPECT_EQ(maps.published(page.start()).row_count, 0u);
}

TEST(CfiMapsUprobeTrampoline, AMappingOfAnotherSizeGetsNoRows) {
  Maps maps;
  ASSERT_TRUE(maps.open()) << std::strerror(errno);
  maps.cfi->add_mapping(::getpid(), 0x3fe000, 8192, 0, "[uprobes-trampo", nullptr, 0);
  maps.cfi->poll();
  EXPECT_NE(without_table(*maps.cfi).find("[uprobes-trampoline]: a mapping of 8192 bytes"), std::string::npos)
      << without_table(*maps.cfi);
  EXPECT_EQ(maps.published(0x3fe000).row_count, 0u);
}

// The return probes' trampoline at the start of the [uprobes] page (push rax, rcx, r11; the uretprobe
// syscall, which writes the original return address where rax was; pop r11, rcx; ret) gets its rows
// under the name the kernel gives the page, in /proc/PID/maps as in perf's mmap records; the walk steps
// out of it to the address the syscall wrote (the eBPF walk takes it from the thread's pending return
// instance before the syscall ran, which user space cannot see). Another code gets none, said why.
constexpr uint8_t kUretprobeCode[] = {0x50, 0x51, 0x41, 0x53, 0x48, 0xc7, 0xc0, 0x4f, 0x01,
                                      0x00, 0x00, 0x0f, 0x05, 0x41, 0x5b, 0x59, 0xc3, 0xcc};

TEST(CfiMapsUretprobeTrampoline, TheKernelsCodeGetsRowsAndTheWalkStepsOutOfIt) {
  Maps maps;
  ASSERT_TRUE(maps.open()) << std::strerror(errno);
  Page page(std::vector<uint8_t>(std::begin(kUretprobeCode), std::end(kUretprobeCode)));
  ASSERT_NE(page.bytes, MAP_FAILED);
  expect_published(maps, page, "[uprobes]", 0x1000, 7);

  // After the syscall (pc +0xd): r11, rcx and the original return address are on the stack; after
  // `pop %r11` (+0xf) two slots are left; at the ret (+0x10) one.
  const uint64_t ret = 0x1234567;  // in no mapping: the walk goes on by frame pointer, rbp 0 ends it
  const uint64_t slots[5] = {11, 22, ret, 0, 0};
  expect_walks_out(maps, page, slots, ret, {{0xd, 0}, {0xf, 1}, {0x10, 2}});
}

TEST(CfiMapsUretprobeTrampoline, OtherCodeGetsNoRowsAndTheSummarySaysWhy) {
  Maps maps;
  ASSERT_TRUE(maps.open()) << std::strerror(errno);
  std::vector<uint8_t> code(std::begin(kUretprobeCode), std::end(kUretprobeCode));
  code[0] = 0x51;  // push %rcx first: the optimized uprobes' trampoline, not this one
  Page page(code);
  ASSERT_NE(page.bytes, MAP_FAILED);
  MapsEntry entry;
  entry.start = page.start();
  entry.end = page.start() + 4096;
  entry.readable = entry.executable = true;
  entry.path = "[uprobes]";
  maps.cfi->add_process_maps(::getpid(), {entry});
  maps.cfi->poll();
  EXPECT_NE(without_table(*maps.cfi).find("[uprobes]: its code differs (byte 0x0 is 0x51, not 0x50"),
            std::string::npos)
      << without_table(*maps.cfi);
  EXPECT_EQ(maps.published(page.start()).row_count, 0u);
}

// Two programs' tables (ls, sort) and maps for them: room for the index buckets of both, and for the rows
// of one of them, not both (open_with_room_for_one), or of both with `rule_capacity` distinct rules
// (open_with_room_for_both).
struct TwoPrograms {
  const std::string a = "/usr/bin/ls", b = "/usr/bin/sort";
  std::shared_ptr<const CfiTable> table_a = compile_cfi_table({a}, "", {});
  std::shared_ptr<const CfiTable> table_b = compile_cfi_table({b}, "", {});
  size_t rows_a = table_a->rows.size(), rows_b = table_b->rows.size();
  Maps maps;
  // Each false (with a failure) when a table has no rows or the maps cannot be made.
  bool open_with_room_for_one() {
    return open(static_cast<uint32_t>(std::max(rows_a, rows_b) + std::min(rows_a, rows_b) / 2),
                HPD_CFI_RULES);
  }
  bool open_with_room_for_both(uint32_t rule_capacity = HPD_CFI_RULES) {
    return open(static_cast<uint32_t>(rows_a + rows_b), rule_capacity);
  }
  // `path` mapped by process `pid` at `start`, once its table is in (or refused): what is published.
  hpd_proc_mapping map_file(int32_t pid, uint64_t start, const std::string& path) {
    maps.cfi->add_mapping(pid, start, 1 << 20, 0, path, nullptr, 0);
    maps.cfi->wait_for_tables(60000);
    return maps.published(start, pid);
  }

 private:
  bool open(uint32_t row_capacity, uint32_t rule_capacity) {
    EXPECT_FALSE(table_a->rows.empty()) << table_a->error;
    EXPECT_FALSE(table_b->rows.empty()) << table_b->error;
    if (table_a->rows.empty() || table_b->rows.empty()) return false;
    const auto buckets = static_cast<uint32_t>(table_a->index.buckets.size() + table_b->index.buckets.size());
    const bool opened = maps.open(row_capacity, buckets, rule_capacity);
    EXPECT_TRUE(opened) << std::strerror(errno);
    return opened;
  }
};

// A collection that outlives its processes (continuous mode: an hour) must not hold every table it
// ever compiled. In a row map that holds one of two programs' tables: the first program's process
// exits, the second's maps its file, the first table is evicted and let go (the recording holds one
// table, not two); when a third process maps the first file again, its table comes back (asked for
// again) and is published whole.
TEST(CfiMapsEviction, ATableNoProcessMapsIsLetGoAndComesBackWhenMappedAgain) {
  TwoPrograms two;
  ASSERT_TRUE(two.open_with_room_for_one());
  Maps& maps = two.maps;
  const std::string &a = two.a, &b = two.b;
  const size_t rows_a = two.rows_a, rows_b = two.rows_b;
  constexpr uint64_t kStart = 0x500000000000;
  const auto map_file = [&](int32_t pid, const std::string& path) { return two.map_file(pid, kStart, path); };
  constexpr int32_t kFirst = 0x7ffff001, kSecond = 0x7ffff002, kThird = 0x7ffff003;
  EXPECT_EQ(map_file(kFirst, a).row_count, rows_a) << without_table(*maps.cfi);
  EXPECT_EQ(maps.cfi->tables_held(), 1u);
  maps.cfi->exit(kFirst);
  EXPECT_EQ(map_file(kSecond, b).row_count, rows_b) << without_table(*maps.cfi);
  EXPECT_EQ(maps.cfi->stats().modules_evicted, 1u);
  EXPECT_EQ(maps.cfi->stats().tables_released, 1u);
  EXPECT_EQ(maps.cfi->tables_held(), 1u) << "the evicted table of a module no process maps is still held";
  maps.cfi->exit(kSecond);
  EXPECT_EQ(map_file(kThird, a).row_count, rows_a) << without_table(*maps.cfi);
  EXPECT_EQ(maps.cfi->stats().tables_released, 2u);
  EXPECT_EQ(maps.cfi->tables_held(), 1u);
  EXPECT_EQ(maps.cfi->stats().modules_refused, 0u);
}

// A module refused for lack of room is walked by frame pointer; its table is not held for the rest of the
// collection (a collection of an hour with a full row map would hold one per module refused), but asked
// for again when the module is mapped again and room may be made by then. In a row map that holds one of
// two programs' tables, one process maps both: the second is refused, and the recording holds only the
// first's table. Mapped again while nothing has changed, it is not asked for again; once the first
// process has exited, a second maps it: its table comes back, evicts the first, and is published whole.
TEST(CfiMapsEviction, ATableRefusedForLackOfRoomIsNotHeldAndComesBackWhenRoomIsMade) {
  TwoPrograms two;
  ASSERT_TRUE(two.open_with_room_for_one());
  Maps& maps = two.maps;
  const std::string &a = two.a, &b = two.b;
  const auto &table_a = two.table_a, &table_b = two.table_b;
  const size_t rows_a = two.rows_a, rows_b = two.rows_b;
  constexpr uint64_t kStartA = 0x500000000000, kStartB = 0x510000000000, kStartB2 = 0x520000000000;
  constexpr int32_t kFirst = 0x7ffff011, kSecond = 0x7ffff012;
  const auto map_file = [&](int32_t pid, uint64_t start, const std::string& path) {
    return two.map_file(pid, start, path);
  };
  EXPECT_EQ(map_file(kFirst, kStartA, a).row_count, rows_a) << without_table(*maps.cfi);
  const uint64_t held_one = maps.cfi->table_bytes_held();
  EXPECT_EQ(held_one, CfiTableCache::kept_bytes(*table_a));
  const hpd_proc_mapping refused = map_file(kFirst, kStartB, b);
  EXPECT_EQ(refused.row_count, 0u);
  EXPECT_EQ(refused.flags & HPD_MAPPING_PENDING, 0u) << "walked by frame pointer, not waiting";
  EXPECT_EQ(maps.cfi->stats().modules_refused, 1u);
  EXPECT_NE(without_table(*maps.cfi).find(b + ": the CFI row map is full"), std::string::npos)
      << without_table(*maps.cfi);
  std::printf("tables held with %s refused: %zu, %llu bytes (%s's table alone: %llu bytes, %s's: %llu)\n",
              b.c_str(), maps.cfi->tables_held(),
              static_cast<unsigned long long>(maps.cfi->table_bytes_held()), a.c_str(),
              static_cast<unsigned long long>(held_one), b.c_str(),
              static_cast<unsigned long long>(CfiTableCache::kept_bytes(*table_b)));
  EXPECT_EQ(maps.cfi->tables_held(), 1u) << "the refused table is let go";
  EXPECT_EQ(maps.cfi->table_bytes_held(), held_one);

  // Mapped again with nothing changed: no room could be made, its table is not asked for again.
  const CfiMapStats before = maps.cfi->stats();
  EXPECT_EQ(map_file(kFirst, kStartB2, b).row_count, 0u);
  const CfiMapStats after = maps.cfi->stats();
  EXPECT_EQ(after.tables_kept + after.tables_compiled + after.tables_from_disk,
            before.tables_kept + before.tables_compiled + before.tables_from_disk);
  EXPECT_EQ(maps.cfi->tables_held(), 1u);

  // The first process gone, another maps the refused file: its table comes back, in the room made. It
  // is this recording's own table asked for again, not one kept from an earlier recording (the summary's
  // "tables kept by hpd from earlier recordings"), though it is found among the tables kept.
  maps.cfi->exit(kFirst);
  EXPECT_EQ(map_file(kSecond, kStartB, b).row_count, rows_b) << without_table(*maps.cfi);
  EXPECT_EQ(maps.cfi->stats().tables_kept, after.tables_kept);
  EXPECT_NE(without_table(*maps.cfi).find("loaded later, when room was made"), std::string::npos)
      << without_table(*maps.cfi);
  EXPECT_EQ(maps.cfi->stats().modules_refused, 1u);
  EXPECT_EQ(maps.cfi->tables_held(), 1u);
  EXPECT_EQ(maps.cfi->table_bytes_held(), CfiTableCache::kept_bytes(*table_b));
}

// The summary's advice (`--cfi-rows N would have held the tables refused beside those loaded`) counts the
// rows wanted at once: a refused table stops counting once no process maps its module. In a row map that
// holds one of two programs' tables, a process maps both (the second refused: both wanted at once) and
// exits; a second maps the first again and a copy of the second under another name, refused in turn.
// Wanted at once: the first table and the copy's, not the second's as well, which nobody maps any longer.
TEST(CfiMapsEviction, ARefusedTableNoProcessMapsNoLongerCountsInTheRowsWanted) {
  TwoPrograms two;
  ASSERT_TRUE(two.open_with_room_for_one());
  Maps& maps = two.maps;
  hpd::testing::TempDir dir("hpd-cfi-rows-wanted");
  const std::string copy = dir.path() + "/sort-copy";
  std::error_code error;
  ASSERT_TRUE(std::filesystem::copy_file(two.b, copy, error)) << error.message();
  constexpr uint64_t kStartA = 0x500000000000, kStartB = 0x510000000000;
  constexpr int32_t kFirst = 0x7ffff021, kSecond = 0x7ffff022;
  EXPECT_EQ(two.map_file(kFirst, kStartA, two.a).row_count, two.rows_a) << without_table(*maps.cfi);
  EXPECT_EQ(two.map_file(kFirst, kStartB, two.b).row_count, 0u);
  EXPECT_EQ(maps.cfi->stats().rows_wanted, two.rows_a + two.rows_b);
  maps.cfi->exit(kFirst);
  EXPECT_EQ(two.map_file(kSecond, kStartA, two.a).row_count, two.rows_a) << without_table(*maps.cfi);
  EXPECT_EQ(two.map_file(kSecond, kStartB, copy).row_count, 0u) << without_table(*maps.cfi);
  EXPECT_EQ(maps.cfi->stats().modules_refused, 2u) << without_table(*maps.cfi);
  EXPECT_EQ(maps.cfi->stats().rows_wanted, two.rows_a + two.rows_b)
      << "the first table and the copy's: " << two.rows_a << " + " << two.rows_b;
}

// A table's distinct rules (what a row says of its frame, without its pc).
std::set<std::tuple<int32_t, int16_t, uint8_t, uint8_t>> rules_of(const CfiTable& table) {
  std::set<std::tuple<int32_t, int16_t, uint8_t, uint8_t>> out;
  for (const CfiRow& r : table.rows) out.emplace(r.cfa_offset, r.rbp_offset, r.cfa_kind, r.rbp_kind);
  return out;
}

// The rows of a module as the maps hold them (each row's pc, and its rule from the rule map), against its
// table.
void expect_rows_as_compiled(const Maps& maps, const hpd_proc_mapping& published, const CfiTable& table) {
  ASSERT_EQ(published.row_count, table.rows.size());
  size_t wrong = 0;
  for (uint32_t i = 0; i < published.row_count; ++i) {
    const uint32_t at = published.row_first + i;
    hpd_cfi_row row{};
    hpd_cfi_rule rule{};
    ASSERT_EQ(bpf_map_lookup_elem(maps.rows.get(), &at, &row), 0);
    ASSERT_EQ(bpf_map_lookup_elem(maps.rules.get(), &row.rule, &rule), 0)
        << "row " << i << " names rule " << row.rule;
    const CfiRow& want = table.rows[i];
    const bool same = row.pc == want.pc && rule.cfa_offset == want.cfa_offset &&
                      rule.rbp_offset == want.rbp_offset && rule.cfa_kind == want.cfa_kind &&
                      rule.rbp_kind == want.rbp_kind;
    if (!same && ++wrong <= 5)
      ADD_FAILURE() << "row " << i << ": pc " << row.pc << " rule " << row.rule << " (cfa kind "
                    << int(rule.cfa_kind) << " offset " << rule.cfa_offset << ", rbp kind "
                    << int(rule.rbp_kind) << " offset " << rule.rbp_offset << "), compiled: pc " << want.pc
                    << " (cfa kind " << int(want.cfa_kind) << " offset " << want.cfa_offset << ", rbp kind "
                    << int(want.rbp_kind) << " offset " << want.rbp_offset << ")";
  }
  EXPECT_EQ(wrong, 0u) << "of " << published.row_count << " rows";
}

// A row holds its pc and the index of its rule; each distinct rule of the loaded tables is stored once
// in the rule map. Two programs' tables loaded side by side: every row, read back from the maps, is the
// row compiled, and the rule map holds their distinct rules once (the rules the two share, once).
TEST(CfiMapsRules, EveryRowNamesItsRuleAndEachRuleIsStoredOnce) {
  TwoPrograms two;
  ASSERT_TRUE(two.open_with_room_for_both());
  constexpr int32_t kPid = 0x7ffff031;
  expect_rows_as_compiled(two.maps, two.map_file(kPid, 0x500000000000, two.a), *two.table_a);
  expect_rows_as_compiled(two.maps, two.map_file(kPid, 0x510000000000, two.b), *two.table_b);
  const auto rules_a = rules_of(*two.table_a), rules_b = rules_of(*two.table_b);
  auto both = rules_a;
  both.insert(rules_b.begin(), rules_b.end());
  const uint64_t in_map = two.maps.cfi->stats().rules;
  EXPECT_EQ(in_map, both.size());
  EXPECT_LT(both.size(), rules_a.size() + rules_b.size()) << "the two programs share no rule";
  std::printf("rows %zu + %zu, distinct rules %zu + %zu, in the rule map %llu\n", two.rows_a, two.rows_b,
              rules_a.size(), rules_b.size(), static_cast<unsigned long long>(in_map));
}

// A rule no loaded table names any more is given back; a table whose rules do not fit is refused like one
// whose rows do not, and the summary says it was the rule map. In maps with room for both programs' rows
// but for only as many distinct rules as the larger of the two has: one process maps both, the second is
// refused for its rules; once that process exits, another maps the second: the first table is evicted,
// its rules given back, and the second loads with its own rules alone in the map.
TEST(CfiMapsRules, ARuleMapThatIsFullRefusesATableAndItsEntriesComeBackWithEviction) {
  TwoPrograms two;
  const auto rules_a = rules_of(*two.table_a), rules_b = rules_of(*two.table_b);
  auto both = rules_a;
  both.insert(rules_b.begin(), rules_b.end());
  const auto rule_capacity = static_cast<uint32_t>(std::max(rules_a.size(), rules_b.size()));
  ASSERT_GT(both.size(), rule_capacity) << "each program's rules are the other's";
  ASSERT_TRUE(two.open_with_room_for_both(rule_capacity));
  const CfiMaps& cfi = *two.maps.cfi;
  constexpr int32_t kFirst = 0x7ffff041, kSecond = 0x7ffff042;
  constexpr uint64_t kStartA = 0x500000000000, kStartB = 0x510000000000;
  EXPECT_EQ(two.map_file(kFirst, kStartA, two.a).row_count, two.rows_a) << without_table(cfi);
  EXPECT_EQ(two.map_file(kFirst, kStartB, two.b).row_count, 0u);
  EXPECT_EQ(cfi.stats().rules, rules_a.size());
  EXPECT_EQ(cfi.stats().modules_refused, 1u);
  EXPECT_NE(without_table(cfi).find(two.b + ": the CFI row map is full (its rule map: "), std::string::npos)
      << without_table(cfi);

  two.maps.cfi->exit(kFirst);
  expect_rows_as_compiled(two.maps, two.map_file(kSecond, kStartB, two.b), *two.table_b);
  EXPECT_EQ(cfi.stats().rules, rules_b.size()) << "the evicted table's rules are still taken";
  EXPECT_EQ(cfi.stats().modules_evicted, 1u);
}

// The walk done again in user space (CfiMaps::walk_stack) takes the step the eBPF programs take
// (cfi_leaf_return_at_sp): a sampled pc in code no table covers (JIT code: anonymous memory) whose top
// of stack holds an address in a module with a table, right after a call instruction, steps there,
// where a frame-pointer step from it would lose the caller. A top of stack that is not such an address
// (a byte past it, or an address in no mapping) is not taken: the frame pointer is followed.
TEST(CfiMapsWalk, ALeafOfCodeWithoutATableStepsToTheReturnAddressAtTheTopOfItsStack) {
  const uint64_t ra = hpd::testing::own_return_address();
  std::optional<MapsEntry> own;
  for (const MapsEntry& e : read_proc_maps(::getpid()))
    if (e.executable && ra >= e.start && ra < e.end) own = e;
  ASSERT_TRUE(own.has_value());
  const std::shared_ptr<const CfiTable> table = compile_cfi_table({own->path}, "", {});
  ASSERT_FALSE(table->rows.empty()) << table->error;
  Maps maps;
  ASSERT_TRUE(maps.open(static_cast<uint32_t>(table->rows.size()),
                        static_cast<uint32_t>(table->index.buckets.size())))
      << std::strerror(errno);
  maps.cfi->add_mapping(::getpid(), own->start, own->end - own->start, own->offset, own->path, nullptr, 0);
  maps.cfi->wait_for_tables(60000);
  ASSERT_EQ(maps.published(own->start).row_count, table->rows.size()) << without_table(*maps.cfi);

  Page jit(std::vector<uint8_t>(64, 0x90));  // anonymous code: no table
  ASSERT_NE(jit.bytes, MAP_FAILED);
  const uint64_t pc = jit.start() + 0x10;
  const uint64_t sp = 0x7ffd0000;
  const auto walk = [&](uint64_t top) {
    const uint64_t slots[2] = {top, 0};
    return maps.cfi->walk_stack(
        ::getpid(), pc, sp, 0,
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(slots), sizeof slots));
  };
  const CfiMaps::StackWalk taken = walk(ra);
  ASSERT_GE(taken.ips.size(), 2u);
  EXPECT_EQ(taken.ips[0], pc);
  EXPECT_EQ(taken.ips[1], ra);
  EXPECT_EQ(taken.fp_frames, 0u);
  // Past the return address, the caller's CFA lies beyond the two slots copied.
  EXPECT_EQ(taken.end, HPD_USER_END_READ_FAULT);
  for (const uint64_t other : {ra + 1, uint64_t{0x1234567}}) {
    SCOPED_TRACE(other);
    const CfiMaps::StackWalk not_taken = walk(other);
    EXPECT_EQ(not_taken.ips, std::vector<uint64_t>{pc});
    // rbp 0 at the sampled frame is no frame: the frame-pointer step fails.
    EXPECT_EQ(not_taken.end, HPD_USER_END_FP_BROKEN);
  }
}

}  // namespace
}  // namespace hpd
