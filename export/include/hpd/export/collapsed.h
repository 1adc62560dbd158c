// Writes a Profile as collapsed stacks ("root;caller;leaf 123"), the input of flamegraph.pl, inferno
// and speedscope.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "hpd/export/error.h"
#include "hpd/model/profile.h"
#include "hpd/model/validate.h"

namespace hpd {

enum class CollapsedWeight : uint8_t {
  kSamples = 0,  // on-CPU samples
  kCpu = 1,      // on-CPU samples' CPU time in nanoseconds
  kWall = 2,     // nanoseconds: on-CPU samples x interval + off-CPU time
};

struct CollapsedOptions {
  CollapsedWeight weight = CollapsedWeight::kSamples;
  bool per_thread = false;  // start every stack with "process;thread (tid)"
  bool per_process =
      false;  // start every stack with "process (pid)", the threads merged (not with per_thread)
};

// One line per unique stack, root first, function names of every inline level joined by ';', then a
// space and the summed weight; lines sorted, zero weights left out. A sample without a stack counts
// under "[unknown]", so with kSamples the weights add up to the number of on-CPU samples. ';' and
// line breaks inside names become ':' and ' '.
void write_collapsed(const Profile& profile, std::ostream& out, const CollapsedOptions& options = {});

// The same into `path`, atomically; gzip-compressed when it ends in ".gz".
void write_collapsed_file(const Profile& profile, const std::string& path,
                          const CollapsedOptions& options = {});

}  // namespace hpd
