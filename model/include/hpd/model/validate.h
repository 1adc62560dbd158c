// The Profile's invariants (every index points at an existing row, stacks in topological order),
// checked once by each exporter before it reads the Profile.
#pragma once

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
// Checked: funcs' name, file and lib; native symbols' name and lib; frames' func, native symbol,
// lib and category; stacks' frame and prefix (which must precede the stack, so that walking
// prefixes ends); samples' stack; the funcs named by call edges, call latencies and MIP counts.
std::optional<std::string> find_profile_violation(const Profile& profile);

// Throws InvalidProfileError ("invalid profile: " + the violation) when an invariant is broken.
void validate(const Profile& profile);

}  // namespace hpd
