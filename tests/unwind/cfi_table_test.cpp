// CFI table compiler tests: rows agree with the DWARF unwinder's per-pc rules (CfiModule::rule_at) on
// libc, libstdc++ and fixture binaries over many pcs; a table walk (the algorithm of the eBPF walker,
// bpf/cfi_walk.bpf.h) over this process's own stack, captured inside glibc's qsort callback and in a
// signal handler, gives the same frames as the DWARF unwinder; damaged files give errors, not crashes.
#include <gtest/gtest.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "cfi_module.h"
#include "dwarf_expr.h"
#include "hpd/unwind/cfi_table.h"
#include "hpd/unwind/unwinder.h"
#include "unwind_test_support.h"

using namespace hpd;
using namespace hpd::unwind_test;
using hpd::unwind_detail::CfiModule;
using hpd::unwind_detail::FrameRule;
using hpd::unwind_detail::RuleKind;

namespace {

const char* const kLibc = "/lib/x86_64-linux-gnu/libc.so.6";
const char* const kLibstdcxx = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6";

std::string fixture(const char* name) {
  return std::string(HPD_UNWIND_FIXTURE_DIR) + "/" + name;
}

struct Agreement {
  uint64_t pcs = 0;
  std::map<int, uint64_t> by_kind;
  std::vector<std::string> mismatches;
};

// What rule_at says about `pc`, checked against the table's row.
void check_pc(CfiModule& module, const CfiTable& table, uint64_t pc, Agreement& a) {
  bool hit = false;
  const FrameRule* rule = module.rule_at(pc, &hit);
  const CfiRow* row = table.find(pc);
  const int kind = row == nullptr ? 0 : row->cfa_kind;
  ++a.pcs;
  ++a.by_kind[kind];
  char where[64];
  std::snprintf(where, sizeof where, "pc 0x%" PRIx64 ": ", pc);
  auto bad = [&](const std::string& what) {
    if (a.mismatches.size() < 20) a.mismatches.push_back(where + what);
  };
  if (rule == nullptr) {
    if (kind != static_cast<int>(CfaKind::kNone)) bad("no CFI rule, but row kind " + std::to_string(kind));
    return;
  }
  const auto& ra = rule->regs[unwind_detail::kRaReg];
  const auto& bp = rule->regs[unwind_detail::kBpReg];
  if (ra.kind == RuleKind::kUndefined) {
    if (kind != static_cast<int>(CfaKind::kOutermost)) bad("RA undefined, row kind " + std::to_string(kind));
    return;
  }
  if (kind == static_cast<int>(CfaKind::kSignal)) {
    if (!rule->signal_frame) bad("signal row without the CIE's S");
    return;
  }
  if (kind == static_cast<int>(CfaKind::kPlt)) {
    // The row's formula and the DWARF expression must agree on every rip of a 16-byte entry.
    if (!rule->cfa.is_expr) return bad("PLT row for a non-expression CFA");
    for (uint64_t low = 0; low < 16; ++low) {
      uint64_t regs[17] = {};
      regs[7] = 0x7ffc0000;
      regs[16] = (pc & ~15ull) | low;
      unwind_detail::ExprEnv env;
      env.regs = regs;
      env.valid = (1u << 7) | (1u << 16);
      uint64_t cfa = 0;
      if (unwind_detail::evaluate(module.ops(rule->cfa.expr_begin, rule->cfa.expr_len), env, false, &cfa) !=
          unwind_detail::ReadStatus::kOk)
        return bad("PLT expression does not evaluate");
      const uint64_t mine = regs[7] + static_cast<uint64_t>(row->cfa_offset) +
                            ((regs[16] & 15) >= uint64_t(row->rbp_offset) ? 8 : 0);
      if (mine != cfa) return bad("PLT formula disagrees at rip&15=" + std::to_string(low));
    }
    return;
  }
  if (ra.kind == RuleKind::kRegister && ra.reg == 5 && ra.offset == 0 && !rule->cfa.is_expr &&
      rule->cfa.reg == 7) {
    // The return address in rdi (glibc's vfork).
    if (kind != static_cast<int>(CfaKind::kRspRaInRdi))
      return bad("RA in rdi, row kind " + std::to_string(kind));
    if (row->cfa_offset != rule->cfa.offset) return bad("CFA offset disagrees (RA in rdi)");
    return;
  }
  const bool simple = !rule->cfa.is_expr && (rule->cfa.reg == 7 || rule->cfa.reg == 6) &&
                      ra.kind == RuleKind::kOffset && ra.offset == -8;
  if (!simple) {
    if (kind != static_cast<int>(CfaKind::kUnsupported))
      bad("complex rule, row kind " + std::to_string(kind));
    return;
  }
  const int want = rule->cfa.reg == 7 ? static_cast<int>(CfaKind::kRsp) : static_cast<int>(CfaKind::kRbp);
  if (kind != want) return bad("CFA register disagrees: row kind " + std::to_string(kind));
  if (row->cfa_offset != rule->cfa.offset) return bad("CFA offset disagrees");
  if (bp.kind == RuleKind::kSameValue) {
    if (row->rbp_kind != static_cast<uint8_t>(RbpKind::kSame)) bad("rbp should be unchanged");
  } else if (bp.kind == RuleKind::kOffset) {
    if (row->rbp_kind != static_cast<uint8_t>(RbpKind::kAtCfa) || row->rbp_offset != bp.offset)
      bad("saved rbp disagrees");
  } else if (row->rbp_kind != static_cast<uint8_t>(RbpKind::kUndefined)) {
    bad("rbp rule should be undefined");
  }
}

// Every row start, the byte before and after it, and random pcs over the covered range.
Agreement agree(const std::string& path, const CfiTable& table, size_t random_pcs) {
  Agreement a;
  auto module = CfiModule::open_file({path}, "", "/usr/lib/debug", true, 1 << 20);
  EXPECT_TRUE(module->summary().opened) << module->summary().error;
  if (table.rows.empty()) return a;
  for (const CfiRow& r : table.rows) {
    check_pc(*module, table, r.pc, a);
    if (r.pc > 0) check_pc(*module, table, r.pc - 1, a);
    check_pc(*module, table, r.pc + 1, a);
  }
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<uint64_t> dist(table.rows.front().pc, table.rows.back().pc + 64);
  for (size_t i = 0; i < random_pcs; ++i) check_pc(*module, table, dist(rng), a);
  return a;
}

void expect_agreement(const std::string& path, size_t min_rows) {
  SCOPED_TRACE(path);
  const auto table = compile_cfi_table({path}, "", {});
  ASSERT_TRUE(table->error.empty()) << table->error;
  EXPECT_GE(table->rows.size(), min_rows);
  const Agreement a = agree(path, *table, 50000);
  std::string kinds;
  for (const auto& [k, n] : a.by_kind) kinds += " kind" + std::to_string(k) + "=" + std::to_string(n);
  std::printf("%s: %zu rows (%" PRIu64 " CFI rows, %" PRIu64 " FDEs, %" PRIu64
              " unsupported, %.1f KiB, %.1f ms); %" PRIu64 " pcs checked:%s\n",
              path.c_str(), table->rows.size(), table->cfi_rows, table->fdes, table->unsupported_rows,
              table->bytes() / 1024.0, table->build_ns / 1e6, a.pcs, kinds.c_str());
  EXPECT_GT(a.pcs, 50000u);
  EXPECT_GT(a.by_kind.count(static_cast<int>(CfaKind::kRsp)), 0u);
  for (const std::string& m : a.mismatches) ADD_FAILURE() << m;
}

}  // namespace

TEST(CfiTable, LibcAgreesWithDwarfRules) {
  expect_agreement(kLibc, 10000);
  const auto table = compile_cfi_table({kLibc}, "", {});
  // glibc's few special frames: _start/clone3 (outermost), __restore_rt (signal), PLT entries, vfork (its
  // return address in rdi across the system call).
  size_t outermost = 0, signal = 0, plt = 0, ra_in_rdi = 0;
  for (const CfiRow& r : table->rows) {
    outermost += r.cfa_kind == static_cast<uint8_t>(CfaKind::kOutermost);
    signal += r.cfa_kind == static_cast<uint8_t>(CfaKind::kSignal);
    plt += r.cfa_kind == static_cast<uint8_t>(CfaKind::kPlt);
    ra_in_rdi += r.cfa_kind == static_cast<uint8_t>(CfaKind::kRspRaInRdi);
  }
  EXPECT_GE(outermost, 1u);
  EXPECT_EQ(signal, 1u);
  EXPECT_GE(plt, 1u);
  EXPECT_GE(ra_in_rdi, 1u);
}

// ld.so's entry point (_start, then _dl_start_user, from which _dl_init runs the libraries'
// constructors) has no CFI: the kernel starts it at the exec, on the process's first stack, and nothing
// called it. The module's rules and its table both say so (return address undefined; an outermost row)
// from the entry point to the next FDE, which keeps its own rule. A program whose _start has CFI
// (glibc's crt1) has no such range.
TEST(CfiTable, AnEntryPointWithoutCfiIsTheOutermostFrame) {
  const std::string ld_so = std::filesystem::canonical("/lib64/ld-linux-x86-64.so.2").string();
  auto module = CfiModule::open_file({ld_so}, "", "/usr/lib/debug", true, 1 << 20);
  ASSERT_TRUE(module->summary().opened) << module->summary().error;
  const uint64_t entry = module->entry();
  ASSERT_NE(entry, 0u);
  FrameRule raw;
  ASSERT_FALSE(module->row_for_table(false, entry, &raw)) << "ld.so's entry point has CFI on this machine";
  uint64_t end = entry;  // the first pc past the entry point that an FDE covers
  while (end < entry + CfiModule::kEntryGapMaxBytes && !module->row_for_table(false, end, &raw)) ++end;
  ASSERT_GT(end, entry + 8) << "more than _start's two instructions";
  const CfiModule::PcRange gap = module->entry_without_cfi();
  EXPECT_EQ(gap.start, entry);
  EXPECT_EQ(gap.end, end);
  bool hit = false;
  for (const uint64_t pc : {entry, entry + 3, end - 1}) {
    const FrameRule* rule = module->rule_at(pc, &hit);
    ASSERT_NE(rule, nullptr) << std::hex << pc;
    EXPECT_EQ(rule->regs[unwind_detail::kRaReg].kind, RuleKind::kUndefined) << std::hex << pc;
  }
  const auto table = compile_cfi_table({ld_so}, "", {});
  ASSERT_TRUE(table->error.empty()) << table->error;
  for (uint64_t pc = entry; pc < end; ++pc) {
    const CfiRow* row = table->find_indexed(pc);
    ASSERT_NE(row, nullptr) << std::hex << pc;
    EXPECT_EQ(row->cfa_kind, static_cast<uint8_t>(CfaKind::kOutermost)) << std::hex << pc;
  }
  const CfiRow* before = table->find(entry - 1);
  EXPECT_TRUE(before == nullptr || before->cfa_kind != static_cast<uint8_t>(CfaKind::kOutermost));
  if (end < entry + CfiModule::kEntryGapMaxBytes) {
    const CfiRow* next = table->find(end);
    ASSERT_NE(next, nullptr);
    EXPECT_NE(next->cfa_kind, static_cast<uint8_t>(CfaKind::kOutermost)) << "the next FDE keeps its rule";
  }
  const Agreement a = agree(ld_so, *table, 20000);
  EXPECT_GT(a.by_kind.count(static_cast<int>(CfaKind::kOutermost)), 0u);
  for (const std::string& m : a.mismatches) ADD_FAILURE() << m;

  auto program = CfiModule::open_file({fixture("chain_gcc")}, "", "/usr/lib/debug", true, 1 << 20);
  ASSERT_TRUE(program->summary().opened) << program->summary().error;
  ASSERT_TRUE(program->row_for_table(false, program->entry(), &raw));
  const CfiModule::PcRange none = program->entry_without_cfi();
  EXPECT_EQ(none.start, none.end);
}

TEST(CfiTable, LibstdcxxAgreesWithDwarfRules) {
  expect_agreement(kLibstdcxx, 10000);
}

TEST(CfiTable, FixturesAgreeWithDwarfRules) {
  expect_agreement(fixture("chain_gcc"), 10);
  expect_agreement(fixture("chain_clang"), 10);
  expect_agreement(fixture("memcpy_fp"), 10);
}

TEST(CfiTable, CacheCompilesOncePerModule) {
  CfiTableCache cache;
  const auto a = cache.get(kLibc, "", {kLibc});
  const auto b = cache.get(kLibc, "", {kLibc});
  EXPECT_EQ(a.get(), b.get());
  // A table found by path is filed under its build-id too: an mmap record that names the build-id
  // finds it without compiling again.
  ASSERT_FALSE(a->build_id.empty());
  const auto c = cache.get("/some/other/path/libc.so.6", a->build_id, {kLibc});
  EXPECT_EQ(a.get(), c.get());
  EXPECT_EQ(cache.size(), 2u);
}

// A table of `rows` empty rows, to fill a CfiTableCache.
std::shared_ptr<CfiTable> table_of(size_t rows) {
  auto t = std::make_shared<CfiTable>();
  t->rows.resize(rows);
  return t;
}

// The tables kept are bounded (hpd keeps them across recordings): past the bound the least recently
// used are dropped, a table just looked up stays, a dropped one is made again when asked for, and a
// table larger than the whole bound is kept alone.
TEST(CfiTable, CacheDropsTheLeastRecentlyUsedPastItsBound) {
  const uint64_t one = CfiTableCache::kept_bytes(*table_of(1000));
  CfiTableCache cache({}, 3 * one);
  int made = 0;
  const auto get = [&](CfiTableCache& c, const std::string& build_id) {
    return c.get("", build_id, [&]() -> std::shared_ptr<const CfiTable> {
      ++made;
      return table_of(1000);
    });
  };
  for (const char* id : {"aa", "bb", "cc"}) ASSERT_NE(get(cache, id), nullptr);
  EXPECT_EQ(made, 3);
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.bytes(), 3 * one);
  EXPECT_EQ(cache.evicted(), 0u);
  ASSERT_NE(cache.find("", "aa"), nullptr);  // aa used again: bb is now the least recently used
  ASSERT_NE(get(cache, "dd"), nullptr);
  EXPECT_EQ(made, 4);
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.evicted(), 1u);
  EXPECT_LE(cache.bytes(), cache.limit_bytes());
  EXPECT_EQ(cache.find("", "bb"), nullptr);
  EXPECT_NE(cache.find("", "aa"), nullptr);
  EXPECT_NE(cache.find("", "cc"), nullptr);
  EXPECT_NE(cache.find("", "dd"), nullptr);
  ASSERT_NE(get(cache, "bb"), nullptr);  // made again, and another one dropped for it
  EXPECT_EQ(made, 5);
  EXPECT_EQ(cache.evicted(), 2u);
  EXPECT_LE(cache.bytes(), cache.limit_bytes());

  CfiTableCache small({}, one / 2);
  ASSERT_NE(get(small, "ee"), nullptr);
  EXPECT_EQ(small.size(), 1u);
  ASSERT_NE(get(small, "ff"), nullptr);
  EXPECT_EQ(small.size(), 1u);
  EXPECT_EQ(small.find("", "ee"), nullptr);
  EXPECT_NE(small.find("", "ff"), nullptr);
  // hpd's own set: the documented bound.
  EXPECT_EQ(CfiTableCache().limit_bytes(), 128ull << 20);
}

// A smaller bound (hpd.conf's max_kept_unwind_tables_mb, on SIGHUP) drops the least recently used
// tables at once, down to it; a larger one drops nothing; usage() reads the four figures together.
TEST(CfiTable, CacheShrinksAtOnceToANewBound) {
  const uint64_t one = CfiTableCache::kept_bytes(*table_of(1000));
  CfiTableCache cache({}, 10 * one);
  for (const char* id : {"aa", "bb", "cc", "dd"})
    ASSERT_NE(cache.get("", id, [&]() -> std::shared_ptr<const CfiTable> { return table_of(1000); }),
              nullptr);
  ASSERT_NE(cache.find("", "aa"), nullptr);  // bb is now the least recently used, then cc
  EXPECT_EQ(cache.set_limit_bytes(20 * one), 0u);
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_EQ(cache.set_limit_bytes(2 * one + one / 2), 2u);
  const CfiTableCache::Usage usage = cache.usage();
  EXPECT_EQ(usage.tables, 2u);
  EXPECT_EQ(usage.bytes, 2 * one);
  EXPECT_EQ(usage.limit_bytes, 2 * one + one / 2);
  EXPECT_EQ(usage.evicted, 2u);
  EXPECT_EQ(cache.find("", "bb"), nullptr);
  EXPECT_EQ(cache.find("", "cc"), nullptr);
  EXPECT_NE(cache.find("", "aa"), nullptr);
  EXPECT_NE(cache.find("", "dd"), nullptr);
  // Below a single table: the last one used stays, alone.
  EXPECT_EQ(cache.set_limit_bytes(one / 2), 1u);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_NE(cache.find("", "dd"), nullptr);
}

// The index gives the row the full search gives, for every byte from below the first row to past the
// last, and keeps its promises: at most a quarter as many buckets as rows, a few rows per bucket.
void expect_index_agrees(const std::string& path) {
  const auto table = compile_cfi_table({path}, "", {});
  ASSERT_FALSE(table->rows.empty()) << path << ": " << table->error;
  const CfiIndex& index = table->index;
  ASSERT_FALSE(index.buckets.empty());
  EXPECT_EQ(index.base, table->rows.front().pc);
  EXPECT_LE(index.buckets.size(), std::max<size_t>(1, table->rows.size() / 4));
  uint64_t mismatches = 0, pcs = 0, searched = 0, widest = 0;
  const uint64_t end = uint64_t{table->rows.back().pc} + 64;
  for (uint64_t pc = index.base >= 64 ? index.base - 64 : 0; pc < end; ++pc, ++pcs) {
    if (table->find(pc) != table->find_indexed(pc)) ++mismatches;
    const CfiBucket b = index.bucket_of(pc);
    searched += b.count;
    widest = std::max<uint64_t>(widest, b.count);
  }
  std::printf("%s: %zu rows, %zu buckets of %u bytes, %.2f rows searched per pc on average (widest %" PRIu64
              "), %" PRIu64 " pcs\n",
              path.c_str(), table->rows.size(), index.buckets.size(), 1u << index.shift,
              double(searched) / double(pcs), widest, pcs);
  EXPECT_EQ(mismatches, 0u) << path;
  EXPECT_LT(double(searched) / double(pcs), 16.0) << path;  // the full search covers thousands of rows
}

TEST(CfiTable, IndexFindsTheRowsTheFullSearchFinds) {
  expect_index_agrees(kLibc);
  expect_index_agrees(kLibstdcxx);
  expect_index_agrees(fixture("chain_gcc"));
  expect_index_agrees(fixture("memcpy_fp"));
  // Tiny tables: one bucket.
  std::vector<CfiRow> one = {CfiRow{0x1000, 8, 0, 1, 0}, CfiRow{0x1010, 0, 0, 0, 0}};
  const CfiIndex small = build_cfi_index(one);
  ASSERT_EQ(small.buckets.size(), 1u);
  EXPECT_EQ(small.buckets[0].first, 0u);
  EXPECT_EQ(small.buckets[0].count, 2u);
  EXPECT_TRUE(build_cfi_index({}).buckets.empty());
}

TEST(CfiTable, BadFilesGiveErrorsNotCrashes) {
  const auto missing = compile_cfi_table({"/nonexistent/libnothing.so"}, "", {});
  EXPECT_TRUE(missing->rows.empty());
  EXPECT_FALSE(missing->error.empty());
  const auto wrong_id = compile_cfi_table({kLibc}, "00112233", {});
  EXPECT_TRUE(wrong_id->rows.empty());
  EXPECT_NE(wrong_id->error.find("build-id"), std::string::npos) << wrong_id->error;

  // A copy of libc cut in half (its .eh_frame beyond the cut) and one with random bytes over its
  // .eh_frame_hdr and .eh_frame: whatever comes out, no crash, and lookups stay in bounds.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("cfi_table_test." + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ifstream in(kLibc, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  {
    std::ofstream cut(dir / "cut.so", std::ios::binary);
    cut.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  const auto truncated = compile_cfi_table({(dir / "cut.so").string()}, "", {});
  // The section headers are at the end of the file: nothing can be read, and the table says why.
  EXPECT_TRUE(truncated->rows.empty());
  EXPECT_FALSE(truncated->error.empty());
  std::printf("truncated libc: %zu rows, error: %s\n", truncated->rows.size(), truncated->error.c_str());

  std::mt19937 rng(7);
  for (int round = 0; round < 4; ++round) {
    std::string damaged = bytes;
    // Debian 12's libc: .eh_frame_hdr at 0x1a1b2c, then .eh_frame up to 0x1ce610.
    for (int i = 0; i < 4000; ++i) damaged[0x1a1b2c + (rng() % 0x2cae0)] = static_cast<char>(rng());
    const auto path = dir / ("damaged" + std::to_string(round) + ".so");
    {
      std::ofstream out(path, std::ios::binary);
      out.write(damaged.data(), static_cast<std::streamsize>(damaged.size()));
    }
    const auto t = compile_cfi_table({path.string()}, "", {});
    for (uint64_t pc = 0; pc < 0x200000; pc += 4099) (void)t->find(pc);
    std::printf("damaged libc %d: %zu rows, error: %s\n", round, t->rows.size(), t->error.c_str());
  }
  std::filesystem::remove_all(dir);
}

// ---- A table walk over this process's stack, against the DWARF unwinder.

namespace {

struct SelfStack {
  UserRegs regs;
  std::vector<uint8_t> stack;
};

#define CAPTURE_IP_SP_BP(r)                                                                  \
  asm volatile(                                                                              \
      "lea 0(%%rip), %%rax\n\tmov %%rax, 0(%0)\n\tmov %%rsp, 8(%0)\n\tmov %%rbp, 16(%0)\n\t" \
      "mov %%rbx, 24(%0)\n\tmov %%r12, 32(%0)\n\tmov %%r13, 40(%0)\n\tmov %%r14, 48(%0)\n\t" \
      "mov %%r15, 56(%0)\n\t"                                                                \
      :                                                                                      \
      : "r"(r)                                                                               \
      : "rax", "memory")

uint64_t stack_end_of(uint64_t sp) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    uint64_t start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64, &start, &end) == 2 && sp >= start && sp < end)
      return end;
  }
  return sp;
}

__attribute__((noinline)) void keep_stack(const uint64_t* r, SelfStack* out) {
  out->regs = UserRegs{};
  const DwarfReg order[] = {DwarfReg::kRip, DwarfReg::kRsp, DwarfReg::kRbp, DwarfReg::kRbx,
                            DwarfReg::kR12, DwarfReg::kR13, DwarfReg::kR14, DwarfReg::kR15};
  for (size_t i = 0; i < 8; ++i) out->regs.set(order[i], r[i]);
  const uint64_t n = std::min<uint64_t>(stack_end_of(r[1]) - r[1], 1u << 20);
  copy_raw_stack(r[1], n, out->stack);
}

SelfStack g_in_qsort;
SelfStack g_in_signal;
volatile int g_sink;

__attribute__((noinline)) void capture_here(SelfStack* out) {
  uint64_t r[8];
  CAPTURE_IP_SP_BP(r);
  keep_stack(r, out);
  g_sink = g_sink + 1;
}

int compare_and_capture(const void* a, const void* b) {
  if (g_in_qsort.stack.empty()) capture_here(&g_in_qsort);
  return *static_cast<const int*>(a) - *static_cast<const int*>(b);
}

void on_signal(int) {
  capture_here(&g_in_signal);
  g_sink = g_sink + 2;
}

// The eBPF walker's algorithm (bpf/cfi_walk.bpf.h) over a stack copy: rows where the module has a
// table, the frame pointer where it has none. Returns how it ended: "root", "read", "unsupported",
// "no-cfi", "unmapped", "fp", "deep".
std::string table_walk(const RawProcess& process, const std::vector<RawModule>& modules, const SelfStack& s,
                       std::vector<uint64_t>& out) {
  CfiTableCache cache;
  auto read = [&](uint64_t address, uint64_t* v) {
    const uint64_t sp0 = s.regs.sp();
    if (address < sp0 || address + 8 > sp0 + s.stack.size()) return false;
    std::memcpy(v, s.stack.data() + (address - sp0), 8);
    return true;
  };
  uint64_t ip = s.regs.ip(), sp = s.regs.sp(), bp = s.regs.bp();
  bool exact = true;
  out.assign(1, ip);
  for (int depth = 0; depth < 256; ++depth) {
    const uint64_t pc = exact ? ip : ip - 1;
    const RawMapping* m = process.find_mapping(pc, 0);
    if (m == nullptr) return "unmapped";
    const std::string& path = modules[m->module].path;
    std::shared_ptr<const CfiTable> table;
    uint64_t vaddr = 0;
    if (path.front() == '/') {
      table = cache.get(path, "", {path});
      if (!table->vaddr_of(pc - m->start + m->file_offset, &vaddr)) table.reset();
    }
    const CfiRow* row = table != nullptr ? table->find(vaddr) : nullptr;
    uint64_t cfa = 0, ra = 0, next_bp = bp;
    bool next_exact = false;
    if (row == nullptr || row->cfa_kind == static_cast<uint8_t>(CfaKind::kNone)) {
      if (bp == 0) return "root";
      uint64_t saved = 0;
      if (!read(bp, &saved) || !read(bp + 8, &ra)) return "read";
      cfa = bp + 16;
      next_bp = saved;
    } else {
      switch (static_cast<CfaKind>(row->cfa_kind)) {
        case CfaKind::kOutermost: return "root";
        case CfaKind::kNone: break;  // handled above
        case CfaKind::kUnsupported: return "unsupported";
        case CfaKind::kRspRaInRdi: return "unsupported";  // this walk has no rdi (glibc's vfork only)
        case CfaKind::kRsp: cfa = sp + row->cfa_offset; break;
        case CfaKind::kRbp: cfa = bp + row->cfa_offset; break;
        case CfaKind::kPlt:
          cfa = sp + row->cfa_offset + ((ip & 15) >= uint64_t(row->rbp_offset) ? 8 : 0);
          break;
        case CfaKind::kSignal:
          if (!read(sp + kSigframeRsp, &cfa) || !read(sp + kSigframeRip, &ra) ||
              !read(sp + kSigframeRbp, &next_bp))
            return "read";
          next_exact = true;
          break;
      }
      if (row->cfa_kind != static_cast<uint8_t>(CfaKind::kSignal)) {
        if (!read(cfa - 8, &ra)) return "read";
        if (row->rbp_kind == static_cast<uint8_t>(RbpKind::kAtCfa) && !read(cfa + row->rbp_offset, &next_bp))
          return "read";
        if (row->rbp_kind == static_cast<uint8_t>(RbpKind::kUndefined)) next_bp = 0;
      }
    }
    if (ra == 0) return "root";
    if (!next_exact && !exact && cfa <= sp) return "stack did not grow";
    out.push_back(ra);
    ip = ra;
    sp = cfa;
    bp = next_bp;
    exact = next_exact;
  }
  return "deep";
}

void expect_same_walk(const SelfStack& s, const char* where, const char* must_contain) {
  SCOPED_TRACE(where);
  ASSERT_FALSE(s.stack.empty());
  std::vector<RawModule> modules;
  const RawProcess process = process_from_maps(getpid(), modules);
  Unwinder unwinder;
  std::vector<uint64_t> dwarf;
  const StackEnd end = unwinder.unwind(UnwindContext{&process, &modules, 0}, s.regs,
                                       StackCopy{s.regs.sp(), s.stack, 0}, dwarf);
  std::vector<uint64_t> table;
  const std::string how = table_walk(process, modules, s, table);
  StackSymbolizer symbolizer;
  const auto names = symbolizer.symbolize(process, modules, table);
  std::printf("%s: table walk %zu frames (%s), DWARF unwinder %zu frames (%s): %s\n", where, table.size(),
              how.c_str(), dwarf.size(), to_string(end), describe(names).c_str());
  EXPECT_EQ(end, StackEnd::kComplete);
  EXPECT_EQ(how, "root");
  EXPECT_EQ(table, dwarf);
  bool found = false;
  for (const SymFrame& f : names) found = found || f.function.find(must_contain) != std::string::npos;
  EXPECT_TRUE(found) << must_contain << " not in " << describe(names);
}

}  // namespace

TEST(CfiTable, WalkInsideQsortMatchesDwarfUnwinder) {
  int values[64];
  for (int i = 0; i < 64; ++i) values[i] = (i * 37) % 64;
  g_in_qsort.stack.clear();
  std::qsort(values, 64, sizeof values[0], compare_and_capture);
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer replaces qsort with its own (in libasan), so the library frame the walk must
  // cross is that one, not glibc's msort.
  expect_same_walk(g_in_qsort, "qsort callback", "__interceptor_qsort");
#else
  expect_same_walk(g_in_qsort, "qsort callback", "msort");
#endif
}

TEST(CfiTable, WalkThroughSignalFrameMatchesDwarfUnwinder) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  struct sigaction old {};
  ASSERT_EQ(sigaction(SIGUSR2, &sa, &old), 0);
  raise(SIGUSR2);
  sigaction(SIGUSR2, &old, nullptr);
  expect_same_walk(g_in_signal, "signal handler", "pthread_kill");
}

namespace {

// Each pc of `cfa_at` has the row CFA = rsp + its value (rbp untouched), found through the index as
// through the full search.
void expect_rsp_rows(const CfiTable& t, const std::map<uint64_t, int32_t>& cfa_at) {
  for (const auto& [pc, cfa] : cfa_at) {
    SCOPED_TRACE(pc);
    for (const CfiRow* row : {t.find(pc), t.find_indexed(pc)}) {
      ASSERT_NE(row, nullptr);
      EXPECT_EQ(row->cfa_kind, static_cast<uint8_t>(CfaKind::kRsp));
      EXPECT_EQ(row->cfa_offset, cfa);
      EXPECT_EQ(row->rbp_kind, static_cast<uint8_t>(RbpKind::kSame));
    }
  }
}

}  // namespace

// The rows written for Linux's [uprobes-trampoline] page: at each instruction the CFA is rsp plus
// what the pushes before it put on the stack (and the call's return address), through the index as
// through the full search; nothing is covered past the ret. The code check takes any syscall number
// and refuses any other byte.
TEST(CfiTable, UprobeTrampolineRowsFollowItsPushesAndPops) {
  const auto t = uprobe_trampoline_cfi_table();
  ASSERT_NE(t, nullptr);
  const std::map<uint64_t, int32_t> cfa_at = {{0x0, 8},  {0x1, 16}, {0x3, 24},  {0x4, 32}, {0xb, 32},
                                              {0xd, 32}, {0xe, 24}, {0x10, 16}, {0x11, 8}};
  expect_rsp_rows(*t, cfa_at);
  for (const uint64_t pc : {0x12, 0x13, 0x100, 0xfff}) {
    const CfiRow* row = t->find_indexed(pc);
    EXPECT_TRUE(row == nullptr || row->cfa_kind == static_cast<uint8_t>(CfaKind::kNone)) << pc;
  }
  uint64_t vaddr = 1;
  EXPECT_TRUE(t->vaddr_of(0, &vaddr));
  EXPECT_EQ(vaddr, 0u);

  std::vector<uint8_t> code = {0x51, 0x41, 0x53, 0x50, 0x48, 0xc7, 0xc0, 0x4f, 0x01, 0x00,
                               0x00, 0x0f, 0x05, 0x58, 0x41, 0x5b, 0x59, 0xc3, 0xcc, 0x00};
  std::string why;
  EXPECT_TRUE(is_uprobe_trampoline_code(code, &why)) << why;
  code[8] = 0x7f;  // another syscall number
  EXPECT_TRUE(is_uprobe_trampoline_code(code, &why)) << why;
  code[13] = 0x5a;  // pop %rdx
  EXPECT_FALSE(is_uprobe_trampoline_code(code, &why));
  EXPECT_NE(why.find("byte 0xd is 0x5a"), std::string::npos) << why;
  EXPECT_FALSE(is_uprobe_trampoline_code(std::span<const uint8_t>(code.data(), 10), &why));
}

// The rows written for the return probes' trampoline at the start of Linux's [uprobes] page: entered
// by the ret of the function whose return address the kernel replaced, so the CFA (that slot + 8) is
// rsp itself at the first instruction, then rsp plus what the pushes put below it and back as the pops
// go; nothing is covered from the int3 on (the page's other slots hold displaced instructions). The
// code check takes any syscall number and refuses any other byte.
TEST(CfiTable, UretprobeTrampolineRowsFollowItsPushesAndPops) {
  const auto t = uretprobe_trampoline_cfi_table();
  ASSERT_NE(t, nullptr);
  const std::map<uint64_t, int32_t> cfa_at = {{0x0, 0},  {0x1, 8},  {0x2, 16}, {0x4, 24},
                                              {0xb, 24}, {0xd, 24}, {0xf, 16}, {0x10, 8}};
  expect_rsp_rows(*t, cfa_at);
  for (const uint64_t pc : {0x11, 0x12, 0x80, 0xfff}) {
    const CfiRow* row = t->find_indexed(pc);
    EXPECT_TRUE(row == nullptr || row->cfa_kind == static_cast<uint8_t>(CfaKind::kNone)) << pc;
  }

  std::vector<uint8_t> code = {0x50, 0x51, 0x41, 0x53, 0x48, 0xc7, 0xc0, 0x4f, 0x01, 0x00,
                               0x00, 0x0f, 0x05, 0x41, 0x5b, 0x59, 0xc3, 0xcc, 0x00};
  std::string why;
  EXPECT_TRUE(is_uretprobe_trampoline_code(code, &why)) << why;
  code[7] = 0x50;  // another syscall number
  EXPECT_TRUE(is_uretprobe_trampoline_code(code, &why)) << why;
  code[15] = 0x5a;  // pop %rdx
  EXPECT_FALSE(is_uretprobe_trampoline_code(code, &why));
  EXPECT_NE(why.find("byte 0xf is 0x5a"), std::string::npos) << why;
  EXPECT_FALSE(is_uretprobe_trampoline_code(std::span<const uint8_t>(code.data(), 10), &why));
  // The optimized uprobes' trampoline is other code.
  EXPECT_FALSE(is_uprobe_trampoline_code(code, &why));
}

#if defined(__SANITIZE_ADDRESS__)
// libasan's (gcc 12 ships no <sanitizer/allocator_interface.h> declaring it).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

namespace {

// The bytes malloc has handed out and not taken back, in this process: glibc's count, or under
// AddressSanitizer (whose allocator replaces glibc's, so mallinfo sees none of it) the sanitizer's.
uint64_t heap_in_use() {
#if defined(__SANITIZE_ADDRESS__)
  return __sanitizer_get_current_allocated_bytes();
#else
  return ::mallinfo2().uordblks;
#endif
}

}  // namespace

// A kept table counts what it holds: the heap a compiled table keeps once its compile's transients
// are freed, measured by malloc itself, is what CfiTableCache::kept_bytes counts against the bound
// (max_kept_unwind_tables_mb), within a few allocation headers. A table that kept the slack of the
// rows' growth (up to twice their number) would hold up to twice what it counts.
TEST(CfiTable, AKeptTableCountsTheHeapItHolds) {
  // The first compile sets up what libelf and libdw keep for the process: not the table's.
  ASSERT_NE(compile_cfi_table({kLibc}, "", CfiTableOptions{}), nullptr);
  struct Measure {
    const char* path;
    uint64_t held = 0;     // the heap the table holds
    uint64_t counted = 0;  // what it counts against the bound
    uint64_t left = 0;     // the heap left after the table is dropped
    size_t rows = 0, capacity = 0;
  };
  // Measured first, checked after: a failed check allocates.
  std::vector<Measure> measures{{kLibc}, {kLibstdcxx}, {kLibc}, {kLibstdcxx}};
  for (Measure& m : measures) {
    const uint64_t before = heap_in_use();
    std::shared_ptr<const CfiTable> table = compile_cfi_table({m.path}, "", CfiTableOptions{});
    m.held = heap_in_use() - before;
    if (table == nullptr) continue;
    m.counted = CfiTableCache::kept_bytes(*table);
    m.rows = table->rows.size();
    m.capacity = table->rows.capacity();
    table.reset();
    m.left = heap_in_use() - before;
  }
  // The headers of the table's few allocations (16 bytes each at most), and the compile's small freed
  // blocks that malloc's per-thread cache (tcache) keeps and mallinfo counts as in use (1-3 KB seen):
  // a few % of these tables (about 30,000 rows of 12 bytes), where a table with the rows' growth
  // slack holds 15-80% more than its rows.
  const uint64_t slack = 16 << 10;
  for (const Measure& m : measures) {
    SCOPED_TRACE(m.path);
    ASSERT_GT(m.rows, 1000u);
    EXPECT_LE(m.held, m.counted + slack) << "rows " << m.rows << ", capacity " << m.capacity;
    EXPECT_GE(m.held + slack, m.counted);
    EXPECT_LE(m.left, slack);  // nothing else of the compile stayed (no other slack counted)
  }
}
