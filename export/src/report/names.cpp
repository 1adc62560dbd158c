// Shortening of demangled C++ and Rust names to a column (see names.h).
#include "names.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

namespace hpd::report_names {
namespace {

constexpr std::string_view kEllipsis = "\xE2\x80\xA6";  // U+2026, one column

bool is_word(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '$' ||
         (static_cast<unsigned char>(c) & 0x80) != 0;
}

// Byte offsets of each code point's start, and s.size() last.
std::vector<size_t> code_point_starts(std::string_view s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  starts.push_back(s.size());
  return starts;
}

// One bracketed group of a name: `<...>` (template or generic arguments, or a Rust qualified path
// `<T as Trait>`), `(...)` (parameters), `{...}` (GCC's `{lambda(int)#1}`) or `[...]` (`[abi:cxx11]`).
struct Group {
  size_t open = 0;
  size_t close = 0;
  char kind = '<';
  int parent = -1;
  int template_level = 0;   // for elidable `<...>`: 1 + elidable `<...>` groups around it; else 0
  bool parameters = false;  // an elidable parameter list
};

char closer_of(char open) {
  switch (open) {
    case '<': return '>';
    case '(': return ')';
    case '{': return '}';
    default: return ']';
  }
}

// The groups of `s` in order of their opening bracket. Operator names (`operator<<`, `operator()`,
// `operator->`) are not brackets; unmatched brackets are ignored.
std::vector<Group> parse_groups(std::string_view s) {
  std::vector<Group> groups;
  std::vector<int> open;  // indices into groups
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == 'o' && s.compare(i, 8, "operator") == 0 && (i == 0 || !is_word(s[i - 1])) &&
        (i + 8 >= s.size() || !is_word(s[i + 8]))) {
      // The longest operator spelled here: LLVM writes `operator<<<T>` for operator<< <T>.
      static constexpr std::string_view kOperators[] = {
          "->*", "<<=", ">>=", "<=>", "()", "[]", "->", "<<", ">>", "<=", ">=", "==", "!=",
          "&&",  "||",  "++",  "--",  "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<",
          ">",   "=",   "!",   "+",   "-",  "*",  "/",  "%",  "^",  "&",  "|",  "~",  ","};
      size_t j = i + 8;
      for (std::string_view op : kOperators) {
        if (s.compare(j, op.size(), op) == 0) {
          j += op.size();
          break;
        }
      }
      i = j - 1;
      continue;
    }
    if (c == '<' || c == '(' || c == '{' || c == '[') {
      Group g;
      g.open = i;
      g.kind = c;
      g.parent = open.empty() ? -1 : open.back();
      open.push_back(static_cast<int>(groups.size()));
      groups.push_back(g);
    } else if (!open.empty() && c == closer_of(groups[size_t(open.back())].kind)) {
      groups[size_t(open.back())].close = i;
      open.pop_back();
    }
  }
  // Groups never closed are dropped (with what they hold: their parent links would point at them).
  while (!open.empty()) {
    const size_t first = groups[size_t(open.front())].open;
    groups.erase(
        std::remove_if(groups.begin(), groups.end(), [&](const Group& g) { return g.open >= first; }),
        groups.end());
    open.clear();
  }
  for (Group& g : groups) {
    const std::string_view content = s.substr(g.open + 1, g.close - g.open - 1);
    bool in_template = false, in_parameters = false;
    int level = 0;
    for (int p = g.parent; p >= 0; p = groups[size_t(p)].parent) {
      const Group& up = groups[size_t(p)];
      in_template |= up.template_level > 0;
      in_parameters |= up.parameters;
      if (level == 0 && up.template_level > 0) level = up.template_level;
    }
    if (g.kind == '<') {
      // A Rust qualified path names the type and trait the function belongs to: its inner
      // arguments may go, not the path itself.
      const bool qualified =
          g.open == 0 || content.rfind("impl ", 0) == 0 || content.find(" as ") != std::string_view::npos;
      if (!qualified) g.template_level = level + 1;
    } else if (g.kind == '(') {
      // Not `(anonymous namespace)` nor a clone's suffix, ` (.isra.0)`.
      g.parameters = !in_template && !in_parameters && !content.empty() && content != "anonymous namespace" &&
                     content.front() != '.';
    }
  }
  return groups;
}

// `s` with the groups `elide` chooses written as `<…>` / `(…)`.
template <typename Elide>
std::string render(std::string_view s, const std::vector<Group>& groups, const Elide& elide) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  for (const Group& g : groups) {
    if (g.open < i || !elide(g)) continue;
    out.append(s.substr(i, g.open + 1 - i));
    out.append(kEllipsis);
    i = g.close;
  }
  out.append(s.substr(i));
  return out;
}

// A Rust legacy symbol's hash, `::h` and 16 hex digits at the end.
size_t rust_hash_start(std::string_view s) {
  constexpr size_t kHash = 3 + 16;
  if (s.size() <= kHash || s.compare(s.size() - kHash, 3, "::h") != 0) return s.size();
  for (size_t i = s.size() - 16; i < s.size(); ++i)
    if (std::isxdigit(static_cast<unsigned char>(s[i])) == 0) return s.size();
  return s.size() - kHash;
}

// `s` without the clone suffixes at its end: LLVM's ` (.isra.0)`, GCC's ` [clone .cold]`.
std::string without_clone_suffixes(std::string s) {
  for (;;) {
    const size_t llvm = s.rfind(" (.");
    const size_t gcc = s.rfind(" [clone .");
    if (llvm != std::string::npos && s.back() == ')' && s.find(')', llvm) == s.size() - 1) {
      s.resize(llvm);
    } else if (gcc != std::string::npos && s.back() == ']' && s.find(']', gcc) == s.size() - 1) {
      s.resize(gcc);
    } else {
      return s;
    }
  }
}

// Less complete forms with parameters elided, each template level kept in turn, each first without
// its clone suffix, the most elided first (for names that share their text otherwise).
std::vector<std::string> forms_without_parameters(std::string_view name) {
  const std::string_view base = name.substr(0, rust_hash_start(name));
  const std::vector<Group> groups = parse_groups(base);
  int deepest = 0;
  for (const Group& g : groups) deepest = std::max(deepest, g.template_level);
  std::vector<std::string> out;
  for (int level = 1; level <= deepest + 1; ++level) {
    std::string form =
        render(base, groups, [level](const Group& g) { return g.template_level >= level || g.parameters; });
    out.push_back(without_clone_suffixes(form));
    out.push_back(std::move(form));
  }
  out.emplace_back(name);
  return out;
}

// The name less and less complete: itself, without a Rust hash, with template arguments elided
// from the deepest level up, then with parameter lists elided too. Each differs from the one before.
std::vector<std::string> candidates(std::string_view name) {
  std::vector<std::string> out{std::string(name)};
  const std::string_view base = name.substr(0, rust_hash_start(name));
  const auto push = [&out](std::string s) {
    if (s != out.back()) out.push_back(std::move(s));
  };
  push(std::string(base));
  const std::vector<Group> groups = parse_groups(base);
  int deepest = 0;
  for (const Group& g : groups) deepest = std::max(deepest, g.template_level);
  for (int level = deepest; level >= 1; --level)
    push(render(base, groups, [level](const Group& g) { return g.template_level >= level; }));
  push(render(base, groups, [](const Group& g) { return g.template_level >= 1 || g.parameters; }));
  return out;
}

// Code points from the start of the function's last scope and of its own name to the end of `s`
// (`Scope<…>::f(…) const` and `f(…) const`): after the last `::` outside brackets, and the one before.
std::pair<size_t, size_t> name_tails(std::string_view s) {
  const std::vector<Group> groups = parse_groups(s);
  std::vector<size_t> separators;  // byte offsets just past a top-level "::"
  size_t g = 0;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    while (g < groups.size() && groups[g].close < i) ++g;
    bool inside = false;
    for (size_t k = g; k < groups.size() && groups[k].open < i; ++k) inside |= groups[k].close > i;
    if (!inside && s[i] == ':' && s[i + 1] == ':') {
      separators.push_back(i + 2);
      ++i;
    }
  }
  const size_t total = display_width(s);
  if (separators.empty()) return {total, total};
  const size_t own = display_width(s.substr(separators.back()));
  size_t scope = total;
  if (separators.size() >= 2) scope = display_width(s.substr(separators[separators.size() - 2]));
  return {scope, own};
}

// Cut in the middle: the end from the function's last scope (or its own name) on when that leaves a
// few columns for the start, else a third of the width for the start and the rest for the end.
std::string cut_middle(std::string_view s, size_t width) {
  const std::vector<size_t> starts = code_point_starts(s);
  const size_t n = starts.size() - 1;
  if (n <= width) return std::string(s);
  if (width <= 1) return width == 0 ? std::string() : std::string(kEllipsis);
  size_t head = (width - 1) / 3;
  const auto [scope, own] = name_tails(s);
  constexpr size_t kMinHead = 4;
  if (scope + 1 + kMinHead <= width && scope > width - 1 - head) {
    head = width - 1 - scope;
  } else if (own + 1 + kMinHead <= width && own > width - 1 - head) {
    head = width - 1 - own;
  }
  const size_t tail = width - 1 - head;
  return std::string(s.substr(0, starts[head])) + std::string(kEllipsis) +
         std::string(s.substr(starts[n - tail]));
}

// For names still equal when shortened: the part where `s` differs (from code point `d` on) shown,
// and its end.
std::string cut_around(std::string_view s, size_t d, size_t width) {
  const std::vector<size_t> starts = code_point_starts(s);
  const size_t n = starts.size() - 1;
  if (n <= width) return std::string(s);
  if (width < 8) return cut_middle(s, width);
  if (n - d < width) return std::string(kEllipsis) + std::string(s.substr(starts[n - (width - 1)]));
  // The end from the function's own name when that leaves a few columns for where they differ.
  const size_t own = name_tails(s).second;
  const size_t tail = own + 5 <= width ? own : (width - 2) / 2;
  if (d + 1 >= n - tail) {  // the difference is near the end: show the end
    return std::string(kEllipsis) + std::string(s.substr(starts[n - (width - 1)]));
  }
  size_t window = width - 1 - tail;  // before the "…" ahead of the tail
  // A narrow window starts where they differ; a wider one shows a little before it.
  size_t start = window < 12 ? d : (d > window / 3 ? d - window / 3 : 0);
  if (start > 0) --window;  // room for a leading "…"
  if (start + window > n - tail) start = n - tail - window;
  std::string out = start > 0 ? std::string(kEllipsis) : std::string();
  out += s.substr(starts[start], starts[start + window] - starts[start]);
  out += kEllipsis;
  out += s.substr(starts[n - tail]);
  return out;
}

size_t common_prefix(std::string_view a, std::string_view b) {
  size_t cps = 0;
  for (size_t i = 0; i < a.size() && i < b.size() && a[i] == b[i]; ++i)
    cps += (static_cast<unsigned char>(a[i]) & 0xC0) != 0x80;
  return cps;
}

}  // namespace

size_t display_width(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string shorten(std::string_view name, size_t width) {
  if (display_width(name) <= width) return std::string(name);
  const std::vector<std::string> c = candidates(name);
  for (const std::string& s : c)
    if (display_width(s) <= width) return s;
  return cut_middle(c.back(), width);
}

std::vector<std::string> shorten_distinct(const std::vector<std::string>& names, size_t width) {
  struct Name {
    std::vector<std::string> candidates;
    size_t level = 0;  // index into candidates
    std::string text;
  };
  std::map<std::string, Name> by_name;
  for (const std::string& n : names) {
    if (by_name.count(n) != 0) continue;
    Name& e = by_name[n];
    if (display_width(n) <= width) {
      e.candidates = {n};
    } else {
      e.candidates = candidates(n);
      while (e.level + 1 < e.candidates.size() && display_width(e.candidates[e.level]) > width) ++e.level;
    }
    e.text = cut_middle(e.candidates[e.level], width);
  }
  // Names that share a text step back to a less elided form that fits whole, until none does or
  // none can (a form cut in the middle could hide what tells them apart).
  std::set<std::string> stuck;
  for (bool changed = true; changed;) {
    changed = false;
    std::map<std::string, std::vector<std::string>> by_text;
    for (const auto& [n, e] : by_name) by_text[e.text].push_back(n);
    stuck.clear();
    for (const auto& [text, same] : by_text) {
      if (same.size() < 2) continue;
      for (const std::string& n : same) {
        Name& e = by_name[n];
        if (e.level == 0 || display_width(e.candidates[e.level - 1]) > width) {
          stuck.insert(n);
          continue;
        }
        --e.level;
        e.text = cut_middle(e.candidates[e.level], width);
        changed = true;
      }
    }
  }
  // Names that still share a text once cut: each shows where it differs from the others, in the
  // most elided form (parameters elided) where they differ at all.
  if (!stuck.empty()) {
    std::map<std::string, std::vector<std::string>> by_text;
    for (const std::string& n : stuck) by_text[by_name[n].text].push_back(n);
    for (const auto& [text, same] : by_text) {
      std::vector<std::vector<std::string>> forms;
      size_t most = 0;
      for (const std::string& n : same) {
        forms.push_back(forms_without_parameters(n));
        most = std::max(most, forms.back().size());
      }
      const auto form = [&forms](size_t i, size_t k) -> const std::string& {
        return forms[i][std::min(k, forms[i].size() - 1)];
      };
      size_t k = 0;
      for (; k + 1 < most; ++k) {
        std::set<std::string> distinct;
        for (size_t i = 0; i < same.size(); ++i) distinct.insert(form(i, k));
        if (distinct.size() == same.size()) break;
      }
      for (size_t i = 0; i < same.size(); ++i) {
        size_t d = 0;
        for (size_t j = 0; j < same.size(); ++j)
          if (j != i) d = std::max(d, common_prefix(form(i, k), form(j, k)));
        by_name[same[i]].text = cut_around(form(i, k), d, width);
      }
    }
  }
  std::vector<std::string> out;
  out.reserve(names.size());
  for (const std::string& n : names) out.push_back(by_name[n].text);
  return out;
}

}  // namespace hpd::report_names
