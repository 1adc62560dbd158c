// A compressible but not trivial input for xz: words of a small vocabulary in pseudo-random order
// (always the same order), for the tests and the benchmark that unwind xz and liblzma.
#pragma once

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

namespace hpd::test {

// Writes `words` words, of the first `vocabulary` (1 to 16) of a fixed list, to `path`.
inline void write_word_text(const std::string& path, size_t words, size_t vocabulary) {
  static const char* const kWords[] = {"stack",   "frame",   "unwind",   "sample", "profile", "kernel",
                                       "return",  "address", "register", "dwarf",  "call",    "module",
                                       "mapping", "symbol",  "thread",   "cache"};
  vocabulary = std::clamp<size_t>(vocabulary, 1, std::size(kWords));
  std::ofstream out(path);
  std::mt19937_64 rng(42);
  std::string buf;
  for (size_t i = 0; i < words; ++i) {
    buf += kWords[rng() % vocabulary];
    buf += (rng() % 13 == 0) ? '\n' : ' ';
    if (buf.size() > (1 << 16)) {
      out << buf;
      buf.clear();
    }
  }
  out << buf;
}

}  // namespace hpd::test
