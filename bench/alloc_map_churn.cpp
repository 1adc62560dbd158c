// An allocation-heavy C++ program for bench/alloc_bench.sh: N rounds of std::map inserts and erases
// (a node of 48 bytes allocated by operator new per insert, freed by operator delete per erase;
// about LIVE entries live), then prints the CPU time it used itself (CLOCK_PROCESS_CPUTIME_ID), as
// bench/alloc_churn.c does.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>

namespace {

constexpr size_t kLive = 4096;

double cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  const long rounds = argc > 1 ? std::atol(argv[1]) : 5000000;
  std::map<uint64_t, uint64_t> live;
  uint64_t x = 88172645463325252ull, sum = 0;
  long inserts = 0, erases = 0;
  const double start = cpu_ns();
  for (long i = 0; i < rounds; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    inserts += live.emplace(x % (kLive * 4), static_cast<uint64_t>(i)).second ? 1 : 0;
    if (live.size() > kLive) {
      // Erase the entry at or after another random key (the first one past the end).
      auto it = live.lower_bound((x >> 32) % (kLive * 4));
      if (it == live.end()) it = live.begin();
      sum += it->second;
      live.erase(it);
      ++erases;
    }
  }
  const double ns = cpu_ns() - start;
  std::printf("cpu_ms %.1f rounds %ld inserts %ld erases %ld ns_per_round %.2f (%llu)\n", ns / 1e6, rounds,
              inserts, erases, ns / static_cast<double>(rounds), static_cast<unsigned long long>(sum % 10));
  return 0;
}
