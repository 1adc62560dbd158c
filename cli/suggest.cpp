// Suggestions for mistyped verbs and flags: the nearest known name by edit distance.
#include "suggest.h"

#include <CLI/CLI.hpp>

#include <algorithm>

namespace hpd::cli {

size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment distance: a swap of neighbours ("recrod") costs one edit.
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1, 0));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string_view bare = word.substr(
      word.find_first_not_of('-') == std::string_view::npos ? word.size() : word.find_first_not_of('-'));
  const size_t allowed = bare.size() >= 9 ? 3 : bare.size() >= 5 ? 2 : 1;
  std::string best;
  size_t best_distance = allowed + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

namespace {

std::vector<std::string> flag_names(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app->get_options()) {
    for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
  }
  return names;
}

const CLI::Option* find_flag(const CLI::App* app, const std::string& name) {
  for (const CLI::Option* opt : app->get_options()) {
    for (const std::string& l : opt->get_lnames()) {
      if (name == "--" + l) return opt;
    }
    for (const std::string& s : opt->get_snames()) {
      if (name == "-" + s) return opt;
    }
  }
  return nullptr;
}

}  // namespace

std::string suggest_for_arguments(CLI::App& app, int argc, char** argv) {
  CLI::App* current = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() > 1 && arg[0] == '-') {
      if (arg.size() == 2 && arg[1] != '-') {
        // A short flag: known or not, nothing to suggest from one letter.
        const CLI::Option* opt = find_flag(current, arg);
        if (opt != nullptr && opt->get_items_expected_max() > 0) ++i;
        continue;
      }
      const std::string name = arg.substr(0, arg.find('='));
      const CLI::Option* opt = find_flag(current, name);
      if (opt == nullptr && current != &app) opt = find_flag(&app, name);
      if (opt == nullptr) {
        std::vector<std::string> names = flag_names(current);
        const std::string best = closest(name, names);
        const std::string where = current == &app ? "" : " for '" + current->get_name() + "'";
        return "unknown flag '" + name + "'" + where + (best.empty() ? "" : "; did you mean '" + best + "'?");
      }
      if (arg.find('=') == std::string::npos && opt->get_items_expected_max() > 0 &&
          opt->get_type_size() != 0)
        ++i;
      continue;
    }
    std::vector<CLI::App*> subcommands = current->get_subcommands([](CLI::App*) { return true; });
    bool found = false;
    for (CLI::App* sub : subcommands) {
      if (sub->get_name() == arg) {
        current = sub;
        found = true;
        break;
      }
    }
    if (found) continue;
    if (current->get_require_subcommand_min() > 0 && !subcommands.empty()) {
      std::vector<std::string> names;
      for (CLI::App* sub : subcommands) names.push_back(sub->get_name());
      const std::string best = closest(arg, names);
      return "unknown command '" + arg + "'" + (best.empty() ? "" : "; did you mean '" + best + "'?");
    }
  }
  return {};
}

}  // namespace hpd::cli
