// Reads a Firefox processed profile written by hpd (plain or gzip JSON) back into a Profile.
#pragma once

#include <string>
#include <string_view>

#include "hpd/export/error.h"
#include "hpd/model/profile.h"
#include "hpd/model/validate.h"

namespace hpd {

// Reads `path` (gzip is detected by its magic bytes 1f 8b). Accepts processed-profile versions
// kFirefoxReaderMinVersion..kFirefoxReaderMaxVersion, whose JSON layout is identical. Throws
// ExportError with the path and the reason for unreadable, non-JSON, foreign, unsupported or
// inconsistent input.
Profile read_firefox_file(const std::string& path);

// The same for JSON text already in memory; `source` names it in error messages.
Profile parse_firefox_json(std::string_view json_text, const std::string& source = "<memory>");

inline constexpr int kFirefoxReaderMinVersion = 66;
inline constexpr int kFirefoxReaderMaxVersion = 69;

}  // namespace hpd
