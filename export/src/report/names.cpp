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
          "->*", "<<=", ">>=", "<=>", "()", "[]", "->", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "++",
          "--",  "+=",  "-=",  "*=",  "/=", "%=", "&=", "|=", "^=", "<",  ">",  "=",  "!",  "+",  "-",  "*",
          "/",   "%",   "^",   "&",   "|",  "~",  ","};
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
    groups.erase(std::remove_if(groups.begin(), groups.end(), [&](const Group& g) { return g.open >= first; }),
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
      const bool qualified = g.open == 0 || content.rfind("impl ", 0) == 0 ||
                             content.find(" as ") != std::string_view::npos;
      if (!qualified) g.template_level = level + 1;
    } else if (g.kind == '(') {
      g.parameters = !in_template && !in_parameters && !content.empty() && content != "anonymous namespace";
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

// Cut in the middle: a third of the width for the start, the rest for the end (the function's name).
std::string cut_middle(std::string_view s, size_t width) {
  const std::vector<size_t> starts = code_point_starts(s);
  const size_t n = starts.size() - 1;
  if (n <= width) return std::string(s);
  if (width <= 1) return width == 0 ? std::string() : std::string(kEllipsis);
  const size_t head = (width - 1) / 3;
  const size_t tail = width - 1 - head;
  return std::string(s.substr(0, starts[head])) + std::string(kEllipsis) + std::string(s.substr(starts[n - tail]));
}

// For names still equal when shortened: the part where `s` differs (from code point `d` on) shown,
// and its end.
std::string cut_around(std::string_view s, size_t d, size_t width) {
  const std::vector<size_t> starts = code_point_starts(s);
  const size_t n = starts.size() - 1;
  if (n <= width) return std::string(s);
  if (width < 8) return cut_middle(s, width);
  const size_t tail = (width - 2) / 2;
  if (d + 1 >= n - tail) {  // the difference is near the end: show the end
    return std::string(kEllipsis) + std::string(s.substr(starts[n - (width - 1)]));
  }
  size_t window = width - 1 - tail;  // before the "…" ahead of the tail
  size_t start = d > window / 3 ? d - window / 3 : 0;
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
  // Names that share a text step back to a less elided form, until none does or none can.
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
        if (e.level == 0) {
          stuck.insert(n);
          continue;
        }
        --e.level;
        e.text = cut_middle(e.candidates[e.level], width);
        changed = true;
      }
    }
  }
  // Whole names that still share a text once cut: each shows where it differs from the others.
  if (!stuck.empty()) {
    std::map<std::string, std::vector<std::string>> by_text;
    for (const std::string& n : stuck) by_text[by_name[n].text].push_back(n);
    for (const auto& [text, same] : by_text) {
      for (const std::string& n : same) {
        size_t d = 0;
        for (const std::string& other : same)
          if (other != n) d = std::max(d, common_prefix(n, other));
        by_name[n].text = cut_around(n, d, width);
      }
    }
  }
  std::vector<std::string> out;
  out.reserve(names.size());
  for (const std::string& n : names) out.push_back(by_name[n].text);
  return out;
}

}  // namespace hpd::report_names
