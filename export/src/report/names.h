// Function names shortened to a column of the text report: C++ template and Rust generic arguments
// elided first (deepest first), then parameter lists, then a cut in the middle; the function's own
// name and its last scope stay at the end. JSON output never uses these.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace hpd::report_names {

// Columns a name takes, approximated by code points (right for demangled names' characters).
size_t display_width(std::string_view s);

// The name shortened to at most `width` columns (whole when it fits; width >= 1).
std::string shorten(std::string_view name, size_t width);

// The names of one table, each shortened to `width`, such that two different names never get the
// same text: those that would show more of themselves (less elided, or the part where they differ).
std::vector<std::string> shorten_distinct(const std::vector<std::string>& names, size_t width);

}  // namespace hpd::report_names
