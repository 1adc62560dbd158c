// The unwind-table compiler's time per module, .eh_frame read in one pass (EhFrameRows) against
// through libdw one pc at a time (what it did before), side by side, alternating, medians of ROUNDS.
// Usage: cfi_compile_bench ROUNDS FILE...   (docs/performance.md, "Compiling a table")
//        cfi_compile_bench --sweep DIR        every ELF file of DIR compiled both ways: the tables must be
//        the same, row for row (exit status 1 when one differs); prints the files read through libdw.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hpd/unwind/cfi_table.h"

namespace {

double compile_ms(const std::string& path, bool through_libdw, size_t* rows) {
  hpd::CfiTableOptions options;
  options.eh_frame_through_libdw = through_libdw;
  const auto begin = std::chrono::steady_clock::now();
  const auto table = hpd::compile_cfi_table({path}, "", options);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  *rows = table->rows.size();
  return ms;
}

// The number of files whose tables differ; prints each, and the files the one-pass reader left to libdw.
int sweep(const char* dir) {
  size_t files = 0, rows = 0;
  int differ = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.is_symlink()) continue;
    std::ifstream f(entry.path(), std::ios::binary);
    char magic[4] = {};
    if (!f.read(magic, 4) || std::memcmp(magic,
                                         "\x7f"
                                         "ELF",
                                         4) != 0)
      continue;
    hpd::CfiTableOptions libdw_options;
    libdw_options.eh_frame_through_libdw = true;
    const auto a = hpd::compile_cfi_table({entry.path().string()}, "", hpd::CfiTableOptions{});
    const auto b = hpd::compile_cfi_table({entry.path().string()}, "", libdw_options);
    if (!a->eh_frame_through_libdw.empty())
      std::printf("through libdw: %s: %s\n", entry.path().c_str(), a->eh_frame_through_libdw.c_str());
    if (const std::string difference = hpd::cfi_table_difference(*a, *b); !difference.empty()) {
      std::printf("DIFFERENT: %s: %s\n", entry.path().c_str(), difference.c_str());
      ++differ;
    }
    ++files;
    rows += b->rows.size();
  }
  std::printf("%zu files, %zu rows compared, %d different\n", files, rows, differ);
  return differ;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ROUNDS FILE... | --sweep DIR\n", argv[0]);
    return 2;
  }
  if (std::strcmp(argv[1], "--sweep") == 0) return sweep(argv[2]) == 0 ? 0 : 1;
  const int rounds = std::max(1, std::atoi(argv[1]));
  std::printf("%-50s %10s %12s %12s %8s\n", "module", "rows", "one pass ms", "libdw ms", "ratio");
  double total_one = 0, total_libdw = 0;
  for (int f = 2; f < argc; ++f) {
    std::vector<double> one, libdw;
    size_t rows = 0;
    for (int r = 0; r < rounds; ++r) {
      one.push_back(compile_ms(argv[f], false, &rows));
      libdw.push_back(compile_ms(argv[f], true, &rows));
    }
    const double a = median(one), b = median(libdw);
    total_one += a;
    total_libdw += b;
    std::printf("%-50s %10zu %12.1f %12.1f %7.1fx\n", argv[f], rows, a, b, b / a);
  }
  std::printf("%-50s %10s %12.1f %12.1f %7.1fx\n", "total", "", total_one, total_libdw,
              total_libdw / total_one);
  return 0;
}
