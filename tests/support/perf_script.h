// `perf record --call-graph dwarf` of a fixture, read back with `perf script`: what the tests that
// compare hpd's stacks with perf's own unwinding on the same fixture count (tests/cli/callgraph_test,
// tests/unwind/unwind_perf_test; bench_unwind counts its samples).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hpd::test {

// One sample's frames as `perf script` names them, leaf first, each symbol without its "+offset".
using PerfStack = std::vector<std::string>;

// The shell command that records `command` (its words as given: not quoted) with perf's dwarf
// unwinding, `perf record -q -e task-clock -c PERIOD --call-graph dwarf,STACK_BYTES`, into
// DIR/perf.data, and writes `perf script -F comm,ip,sym` of it to perf_script_path(DIR). Its own
// output is discarded; it exits non-zero when either step fails.
std::string perf_dwarf_command(const std::string& perf, const std::string& dir, const std::string& command,
                               uint64_t period, uint32_t stack_bytes);
std::string perf_script_path(const std::string& dir);

// The samples of a `perf script` output file whose fields end with ip and sym: a sample is its
// header line (when there is one) and then one indented line per frame; a blank line ends it.
std::vector<PerfStack> read_perf_script(const std::string& path);

// Of the samples whose leaf is chain.front(): how many (`in_leaf`), and how many carry the whole
// chain from their leaf on (`whole`).
struct ChainShare {
  size_t in_leaf = 0;
  size_t whole = 0;
  double share() const {
    return in_leaf == 0 ? 0 : static_cast<double>(whole) / static_cast<double>(in_leaf);
  }
};
ChainShare chain_share(const std::vector<PerfStack>& stacks, const std::vector<std::string>& chain);

}  // namespace hpd::test
