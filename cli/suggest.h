// "Did you mean": the verb or flag of hpctl closest to a mistyped one, for parse errors.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}

namespace hpd::cli {

// Edit distance (insertions, deletions, substitutions, and swaps of two neighbours).
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, if within a distance a typo explains (1 for short words, 2 from
// 5 characters, 3 from 9), else "".
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

// Walks argv as CLI11 would (verbs, flags and their values) and returns a line like
// "unknown command 'recrod'; did you mean 'record'?" for the first verb or flag `app` does not
// know, with the closest one it does; "" when there is nothing to suggest.
std::string suggest_for_arguments(CLI::App& app, int argc, char** argv);

}  // namespace hpd::cli
