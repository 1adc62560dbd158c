// ExportError: the one exception the exporters and the Firefox reader throw for their own failures.
#pragma once

#include <stdexcept>

namespace hpd {

// An output that cannot be written (a path naming a directory, a full disk, a closed stream), an
// input that cannot be read as a profile (not JSON, a foreign or unsupported format, a corrupt gzip
// stream), or a report option that selects nothing (--function matching no function). what() names
// the file or option and says why. A Profile that breaks its invariants is model's
// InvalidProfileError (hpd/model/validate.h), thrown before any output is started.
class ExportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace hpd
