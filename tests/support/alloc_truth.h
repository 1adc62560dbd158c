// The allocation tests' shared checks: the truth file an allocating fixture writes of itself
// ("NAME BLOCKS BLOCK_SIZE LEAKED" lines), the error the byte sampling allows, the rows of
// `hpctl report --json`, and `hpctl record --alloc --pid` of alloc_pid_fixture.c checked against its
// truth (locally, through hpd, as root or as another user).
#pragma once

#include <sys/types.h>

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

// The row named `name` of the "allocations" of a report, or null.
const nlohmann::json* alloc_row(const nlohmann::json& doc, const std::string& name);

// Waits for `path` to exist, as long as `alive` (when given) runs.
bool wait_for_file(const std::string& path, double timeout_s, pid_t alive = 0);

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
};

// `hpctl record --alloc --alloc-mean 4096 --pid PID` of the fixture, which waits until the probes are
// in before it allocates: byte shares within 3 points of the truth, each function's bytes and the
// leak's live bytes within five standard deviations of the sampling, the freeing functions with
// nothing live, the leaking function first by live bytes; free(NULL) and frees of blocks allocated
// before the attach counted, not matched; after the recording the probes are gone and the target runs
// to its end, its memory intact.
void check_alloc_pid_attach(const AllocPidAttach& how);

}  // namespace hpd::test
