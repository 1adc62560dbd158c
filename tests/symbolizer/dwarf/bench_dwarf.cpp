// Benchmark: DwarfIndex vs llvm-symbolizer --inlining --demangle on the same addresses of one binary.
// Usage: bench_dwarf ELF [addresses=100000] [runs=5]. Also reports how many answers agree.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "dwarf_index.h"
#include "dwarf_test_support.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// With outer_name false the outermost level's function name is not compared: llvm-symbolizer still
// takes it from .dynsym when .symtab is hidden (shared libraries), which DwarfIndex leaves to its caller.
bool same(const std::vector<hpd::SourceFrame>& a, const std::vector<hpd::SourceFrame>& b,
          bool outer_name = true) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if ((a[i].function != b[i].function && (outer_name || i != 0)) || a[i].file != b[i].file ||
        a[i].line != b[i].line || a[i].column != b[i].column) {
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s ELF [addresses] [runs]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  const size_t count = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 100000;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 5;

  std::vector<uint64_t> all = hpd::dwarf_test::function_addresses(path, 1);
  if (all.empty()) {
    std::fprintf(stderr, "%s: no function symbols\n", path.c_str());
    return 1;
  }
  std::mt19937_64 rng(42);
  std::vector<uint64_t> addresses(count);
  for (uint64_t& a : addresses) a = all[rng() % all.size()];
  hpd::dwarf_test::TempDir tmp;
  const std::string list = tmp.path() + "/addresses";
  {
    std::ofstream f(list);
    for (uint64_t a : addresses) f << "0x" << std::hex << a << '\n';
  }

  std::vector<double> ours, ours_open, llvm;
  size_t memory = 0;
  for (int r = 0; r < runs; ++r) {
    auto start = Clock::now();
    std::string error;
    auto index = hpd::DwarfIndex::open(path, &error);
    if (!index) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    ours_open.push_back(seconds_since(start));
    size_t frames = 0;
    for (uint64_t a : addresses) frames += index->lookup(a).size();
    ours.push_back(seconds_since(start));
    memory = index->memory_bytes();
    if (frames == 0) return 1;
  }
  for (int r = 0; r < runs; ++r) {
    auto start = Clock::now();
    int status = 0;
    hpd::dwarf_test::run_command(std::string(HPD_LLVM_SYMBOLIZER) + " --inlining --demangle --obj='" + path +
                                     "' < '" + list + "' > /dev/null",
                                 &status);
    llvm.push_back(seconds_since(start));
    if (status != 0) return 1;
  }
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  struct rusage child {};
  getrusage(RUSAGE_CHILDREN, &child);

  // Agreement, against llvm-symbolizer on a copy without .symtab (DWARF names at every level).
  const std::string nosym = tmp.path() + "/nosym";
  if (!hpd::dwarf_test::copy_without_symbol_table(path, nosym)) return 1;
  auto expected = hpd::dwarf_test::llvm_symbolize(HPD_LLVM_SYMBOLIZER, nosym, addresses);
  auto index = hpd::DwarfIndex::open(path, nullptr);
  size_t agree = 0, agree_but_outer_name = 0;
  for (size_t i = 0; i < addresses.size(); ++i) {
    auto want = expected[i];
    if (want.size() == 1 && want[0].function.empty() && want[0].file.empty() && want[0].line == 0)
      want.clear();
    auto got = index->lookup(addresses[i]);
    if (same(want, got)) {
      ++agree;
    } else if (same(want, got, false) || (got.empty() && want.size() == 1 && want[0].file.empty() &&
                                          want[0].line == 0)) {  // no DWARF: the name is an ELF symbol
      ++agree_but_outer_name;
    } else if (i + 1 - agree - agree_but_outer_name <= 5) {  // the first few differences
      std::printf("difference at 0x%llx\n", static_cast<unsigned long long>(addresses[i]));
      for (const auto* chain : {&want, &got}) {
        std::printf("  %s\n", chain == &want ? "llvm-symbolizer:" : "DwarfIndex:");
        for (const auto& f : *chain)
          std::printf("    %s @ %s:%u:%u\n", f.function.c_str(), f.file.c_str(), f.line, f.column);
      }
    }
  }

  std::printf("%s: %zu addresses, %d runs (medians)\n", path.c_str(), count, runs);
  std::printf(
      "  DwarfIndex:      %.3f s total (open %.3f s), %.0f addresses/s, memory_bytes %.1f MB, max RSS %.1f "
      "MB\n",
      median(ours), median(ours_open), count / median(ours), memory / 1e6, usage.ru_maxrss / 1e3);
  std::printf("  llvm-symbolizer: %.3f s, %.0f addresses/s, max RSS %.1f MB\n", median(llvm),
              count / median(llvm), child.ru_maxrss / 1e3);
  std::printf(
      "  speedup %.2fx; identical answers %zu of %zu, identical but the outermost name (ELF symbol) %zu\n",
      median(llvm) / median(ours), agree, count, agree_but_outer_name);
  return 0;
}
