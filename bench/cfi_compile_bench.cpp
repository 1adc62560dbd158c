// The unwind-table compiler's time per module, .eh_frame read in one pass (EhFrameRows) against
// through libdw one pc at a time (what it did before), side by side, alternating, medians of ROUNDS.
// Usage: cfi_compile_bench ROUNDS FILE...   (docs/performance.md, "Compiling unwind tables")
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ROUNDS FILE...\n", argv[0]);
    return 2;
  }
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
