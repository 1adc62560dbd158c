// Helpers for capture tests: a synthetic RawProfile that fills every field the capture file stores,
// and a field-by-field comparison that names the first difference.
#pragma once

#include <string>

#include "hpd/model/raw_profile.h"

namespace hpd::testing {

// Two processes (one exec's, so a mapping ends), three threads, kernel and user stacks, on- and
// off-CPU samples, a sample without a stack, call edges, lost counts. `samples` on-CPU samples are
// spread over the threads; stacks repeat so the stack table stays small.
RawProfile make_raw_profile(size_t samples = 200);

// "" when equal, else a description of the first difference.
std::string diff_raw_profiles(const RawProfile& a, const RawProfile& b);

}  // namespace hpd::testing
