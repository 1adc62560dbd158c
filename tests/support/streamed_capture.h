// What a test can read of a capture (.hpr) a recording is still streaming into. Header-only.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "subprocess.h"

namespace hpd::test {

// Whether the capture holds samples yet, as `hpctl report --json` reads it (an unfinished capture is
// read up to its last complete block): the sign that a recording began sampling, for a test to wait on.
inline bool streamed_capture_has_samples(const std::string& hpctl, const std::string& capture) {
  const RunResult partial = run({hpctl, "report", "--json", "--limit", "0", capture});
  const nlohmann::json so_far = nlohmann::json::parse(partial.out, nullptr, false);
  return partial.exit_code == 0 && !so_far.is_discarded() &&
         so_far.at("totals").at("samples").get<uint64_t>() > 0;
}

}  // namespace hpd::test
