// The allocation tests' shared checks: the truth file an allocating fixture writes of itself
// ("NAME BLOCKS BLOCK_SIZE LEAKED" lines), the error the byte sampling allows, the rows of
// `hpctl report --json`, and `hpctl record --alloc --pid` of alloc_pid_fixture.c checked against its
// truth (locally, through hpd, as root or as another user).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "subprocess.h"

namespace hpd::test {

struct AllocTruth {
  double blocks = 0;
  double size = 0;
  double leaked = 0;
};

std::map<std::string, AllocTruth> read_alloc_truth(const std::string& path);

// The error the sampling allows. A block of `size` bytes is sampled with p = 1 - exp(-size/mean) and
// then weighs size/p, so over n blocks the estimate of their bytes is unbiased with variance
// n * size^2 * (1 - p) / p. Five standard deviations (a false failure about once in 1.7 million runs)
// plus one byte for the rounding of an exact (p = 1) estimate.
double alloc_allowed_error(double blocks, double size, double mean);

// The variance of that estimate: n * size^2 * (1 - p) / p.
double alloc_variance(double blocks, double size, double mean);

// The error the sampling allows on the share (in points, 0 to 100) of the function `name` in the bytes
// of all of `truth`'s, the functions' estimates independent: share = X / T, so to first order its
// variance is ((1 - share)^2 var(X) + share^2 var(T - X)) / T^2. Five standard deviations.
double alloc_share_allowed_error(const std::map<std::string, AllocTruth>& truth, const std::string& name,
                                 double mean);

// What a recording sampled with `mean` says of a fixture whose truth is `truth`, from its
// `hpctl report --json`: each function's self bytes within alloc_allowed_error of the truth and its
// share of the recording's bytes within 3 points of the truth's (and alloc_share_allowed_error within
// those 3 points: the fixture is big enough that the check is not a coin toss); the freeing functions
// with nothing live, the leaking one's live bytes within alloc_allowed_error of what it leaked, and
// first by live bytes. Returns the samples of the freeing functions (each free of one is matched).
uint64_t check_alloc_estimates(const nlohmann::json& doc, const std::map<std::string, AllocTruth>& truth,
                               double mean);

// The row named `name` of the "allocations" of a report, or null.
const nlohmann::json* alloc_row(const nlohmann::json& doc, const std::string& name);

// Waits for `path` to exist, as long as `alive` (when given) runs.
bool wait_for_file(const std::string& path, double timeout_s, pid_t alive = 0);

// What heaptrack recorded of a program, per function that called the allocator (the innermost frame,
// inlined frames included, of each allocation's stack). From heaptrack_print's text: the calls of
// each function ("MOST CALLS TO ALLOCATION FUNCTIONS", exact), the bytes it leaked ("MEMORY LEAKS",
// rounded by heaptrack_print to three significant digits in units of 1000) and the totals under them.
// heaptrack_print (1.4) no longer prints the bytes allocated: those are summed from heaptrack's own
// data file (its "a SIZE TRACE" allocation records and "+ INDEX" allocations), exact.
struct HeaptrackFunction {
  double calls = 0;
  double allocated_bytes = 0;
  double leaked_bytes = 0;     // rounded as printed
  double leaked_rounding = 0;  // half the last digit printed
  double leaked_calls = 0;
};

struct HeaptrackTotals {
  std::map<std::string, HeaptrackFunction> functions;
  double calls = 0;            // "calls to allocation functions: N"
  double leaked_bytes = 0;     // "total memory leaked: X", rounded as printed
  double leaked_rounding = 0;  // half the last digit printed
  std::string error;           // empty when the file was read
};

// Reads heaptrack's data file (heaptrack -o PATH ...: PATH.zst or PATH.gz) with heaptrack_print and
// with zstd or gzip.
HeaptrackTotals read_heaptrack(const std::string& data_file);

// A size heaptrack_print prints ("8.39M", "72.70K", "0B") in bytes, and half its last digit (the
// rounding); -1 when it is not one.
double heaptrack_bytes(const std::string& text, double* rounding = nullptr);

struct AllocPidAttach {
  std::string hpctl;          // hpctl's path
  std::string fixture;        // alloc_pid_fixture.c built -O2 -g without frame pointers
  std::string daemon_socket;  // through the hpd listening there; empty: a local recording
  // When set, the fixture and hpctl run as this user (the prefix, e.g. setpriv --reuid=...), and
  // the working directory is given to uid:gid.
  std::vector<std::string> as_user;
  uid_t uid = 0;
  gid_t gid = 0;
  // Words the summary must hold, and words it must not.
  std::vector<std::string> said{};
  std::vector<std::string> not_said{};
  // Environment entries of the fixture only (LD_PRELOAD=... of an allocator).
  std::vector<std::string> target_env{};
  // The sampling mean asked for with --alloc-mean; 0: none asked, hpd's default (512 KiB).
  double mean = 4096;
  // The fixture's mode after DIR ("default-mean"); empty: its ordinary run.
  std::string mode{};
};

// `hpctl record --alloc --alloc-mean MEAN --pid PID` of the fixture, which waits until the probes are
// in before it allocates: check_alloc_estimates (byte shares within 3 points of the truth, each
// function's bytes and the leak's live bytes within five standard deviations of the sampling, the
// freeing functions with nothing live, the leaking function first by live bytes); free(NULL) and frees of
// blocks allocated before the attach counted, not matched; after the recording the probes are gone and the
// target runs to its end, its memory intact.
void check_alloc_pid_attach(const AllocPidAttach& how);

}  // namespace hpd::test
