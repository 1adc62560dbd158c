// The Profile's invariants (every index points at an existing row, stacks in topological order),
// checked once by each exporter before it reads the Profile.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>

#include "hpd/model/profile.h"

namespace hpd {

// A Profile that breaks one of its invariants; what() starts "invalid profile: " and names the row.
class InvalidProfileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The first broken invariant, said as "stack 3 refers to frame 999 of 20"; nullopt when all hold.
// Checked, in this order: funcs' name, file and lib; native symbols' name and lib; frames' func,
// native symbol, lib and category; stacks' frame and prefix (which must precede the stack, so that
// walking prefixes ends); the funcs named by call edges, call latencies and MIP counts; then
// samples' stack, thread by thread.
std::optional<std::string> find_profile_violation(const Profile& profile);

// Throws InvalidProfileError ("invalid profile: " + the violation) when an invariant is broken.
void validate(const Profile& profile);

// validate() in two parts, for an exporter that reads every sample in a pass of its own anyway
// (compute_report): the samples are most of a profile, and a second pass over them cost the report
// half its time again. validate_tables() checks everything but the samples; the exporter then checks
// each sample with valid_sample() before it uses it, in thread order, and calls
// throw_sample_violation() for the first that fails. Together they throw exactly what validate()
// throws, for the same profiles.
void validate_tables(const Profile& profile);
inline bool valid_sample(const Profile& profile, const Sample& sample) {
  return (sample.stack == kNoIndex || sample.stack < profile.stacks.size()) &&
         static_cast<int>(sample.kind) < kSampleKindCount;
}
[[noreturn]] void throw_sample_violation(const Profile& profile, const Thread& thread, size_t sample);

}  // namespace hpd
