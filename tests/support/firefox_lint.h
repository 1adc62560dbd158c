// A structural checker for Firefox processed profiles (version 66), written independently of the
// exporter so that tests can hold the exporter's output against the format reference.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace hpd::testing {

// Every problem found, one sentence each naming the JSON path; empty = the profile is well formed.
// Checks: required meta keys (version 66, interval, startTime, markerSchema, categories with a grey
// one and an "Idle" one, sampleUnits.threadCPUDelta "µs" (U+00B5) or "ns"), libs (breakpadId 33
// upper-case hex, codeId lower-case hex), every shared table's column lengths and index ranges, the
// stack prefix order, inline-frame consistency, threads (pid a string, registerTime/unregisterTime
// present), samples (stack in range, time ascending) and markers. Stops listing after 200 problems.
std::vector<std::string> lint_firefox_profile(const nlohmann::json& profile);

// Parses a JSON file, gunzipping it first when it starts with the gzip magic. Throws
// std::runtime_error on unreadable files, corrupt gzip data or invalid JSON.
nlohmann::json load_json_maybe_gzip(const std::string& path);

}  // namespace hpd::testing
