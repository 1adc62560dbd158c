// Callers/callees trees, per-line annotation and two-profile comparison over the symbolized Profile,
// each from the samples summed once per unique stack (as the flat report does).
#include "hpd/export/report_views.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <regex>
#include <set>
#include <stdexcept>

#include "hpd/model/validate.h"
#include "names.h"
#include "whole_functions.h"

namespace hpd {
namespace {

using nlohmann::ordered_json;

struct StackTally {
  uint64_t on = 0;
  uint64_t cpu_ns = 0;
  uint64_t off = 0;
  uint64_t off_ns = 0;
};

// Samples of the selected threads summed per stack; `all_on` gets their on-CPU count.
std::vector<StackTally> tally_stacks(const Profile& p, const ReportOptions& options, uint64_t* all_on) {
  std::vector<StackTally> per_stack(p.stacks.size());
  uint64_t on = 0;
  for (const Thread& t : p.threads) {
    if (!report_selects_thread(t, options)) continue;
    for (const Sample& s : t.samples) {
      if (s.kind == SampleKind::kOnCpu) ++on;
      if (s.stack == kNoIndex) continue;
      StackTally& st = per_stack[s.stack];
      st.cpu_ns += s.cpu_delta_ns;        // off-CPU too: what the scheduler charged for a wait
      if (is_off_cpu_interval(s.kind)) {  // blocked or waiting for a CPU: wall time either way
        ++st.off;
        st.off_ns += s.off_cpu_ns;
      } else {
        ++st.on;
      }
    }
  }
  if (all_on != nullptr) *all_on = on;
  return per_stack;
}

std::string library_of(const Profile& p, uint32_t func) {
  const uint32_t lib = p.funcs[func].lib;
  return lib != kNoIndex && lib < p.libs.size() ? p.libs[lib].name : std::string();
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string pad_left(const std::string& s, size_t w) {
  return s.size() < w ? std::string(w - s.size(), ' ') + s : s;
}

// "  [libfoo.so]" after a name; the kernel's lib is already named "[kernel.kallsyms]".
std::string library_suffix(const std::string& library) {
  if (library.empty()) return "";
  return library.front() == '[' ? "  " + library : "  [" + library + "]";
}

// Text width: options.width columns (0 = no limit: whole names). A name never gets fewer than
// kMinNameWidth columns, even if its line then passes the width (deep trees in narrow terminals).
constexpr size_t kMinNameWidth = 16;
// Libraries after a name are cut to this many columns when the width is limited.
constexpr size_t kMaxLibraryWidth = 14;

bool limited(size_t width) {
  return width != 0;
}

// Columns left for a name on a line of `width` columns whose other text takes `used`.
size_t name_room(size_t width, size_t used) {
  return width > used + kMinNameWidth ? width - used : kMinNameWidth;
}

std::string short_name(const std::string& name, size_t width, size_t used) {
  return limited(width) ? report_names::shorten(name, name_room(width, used)) : name;
}

// A library as written after a name, cut to kMaxLibraryWidth (as the report's library column).
std::string short_library(const std::string& library, size_t width) {
  if (!limited(width) || report_names::display_width(library) <= kMaxLibraryWidth) return library;
  size_t end = 0;  // byte offset of code point kMaxLibraryWidth - 1
  for (size_t seen = 0; end < library.size(); ++end) {
    if ((static_cast<unsigned char>(library[end]) & 0xC0) != 0x80 && seen++ == kMaxLibraryWidth - 1) break;
  }
  return library.substr(0, end) + "\xE2\x80\xA6";
}

double percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * double(part) / double(whole);
}

void add(CallTreeNode& node, const StackTally& t, uint64_t interval_ns) {
  node.samples += t.on;
  node.cpu_ns += t.cpu_ns;
  node.off_cpu_ns += t.off_ns;
  node.wall_ns += t.on * interval_ns + t.off_ns;
}

void sort_tree(CallTreeNode& node) {
  std::sort(node.children.begin(), node.children.end(), [](const CallTreeNode& a, const CallTreeNode& b) {
    if (a.samples != b.samples) return a.samples > b.samples;
    if (a.wall_ns != b.wall_ns) return a.wall_ns > b.wall_ns;
    if (a.name != b.name) return a.name < b.name;
    return a.tail_call < b.tail_call;
  });
  for (CallTreeNode& c : node.children) sort_tree(c);
}

// Before the name of a node reached by a tail call (CallTreeNode::tail_call).
constexpr const char* kTailCallMark = "[tail call] ";

// Columns of a tree line before its indentation: 7 1 7 1 9 1 10 2.
constexpr size_t kTreeNumbersWidth = 38;

// Whether a child of a tree node is printed (the others are counted as hidden).
bool shown_in_tree(const CallTreeNode& child, const CallTreeView& view) {
  return percent(child.samples, view.root.samples) >= kCallTreeMinPercent;
}

// One line per node, its name shortened (`label`) to what the line leaves of `width` (0 = whole);
// the children printed under it have names told apart from each other's.
void print_tree_node(const CallTreeNode& node, const std::string& label, const CallTreeView& view,
                     std::ostream& out, size_t depth, size_t max_depth, size_t width, bool library,
                     uint64_t* hidden) {
  const char* arrow = view.direction == CallTreeDirection::kCallers ? "<- " : "-> ";
  out << pad_left(fmt("%.1f%%", percent(node.samples, view.root.samples)), 7) << ' '
      << pad_left(fmt("%.1f%%", percent(node.samples, view.all_samples)), 7) << ' '
      << pad_left(std::to_string(node.samples), 9) << ' '
      << pad_left(fmt("%.1f", double(node.cpu_ns) / 1e6), 10) << "  " << std::string(2 * depth, ' ')
      << (depth == 0 ? "" : arrow) << (node.tail_call ? kTailCallMark : "") << label
      << (library ? library_suffix(short_library(node.library, width)) : std::string()) << '\n';
  if (max_depth != 0 && depth + 1 > max_depth) {
    if (!node.children.empty()) ++*hidden;
    return;
  }
  std::vector<const CallTreeNode*> shown;
  std::vector<std::string> labels;
  size_t suffix = 0;
  bool any_tail_call = false;
  for (const CallTreeNode& c : node.children) {
    if (!shown_in_tree(c, view)) {
      ++*hidden;
      continue;
    }
    shown.push_back(&c);
    labels.push_back(c.name);
    any_tail_call = any_tail_call || c.tail_call;
    suffix = std::max(suffix, report_names::display_width(library_suffix(short_library(c.library, width))));
  }
  // Deep in a narrow terminal, the children's libraries go before their names get too short.
  const size_t used =
      kTreeNumbersWidth + 2 * (depth + 1) + 3 + (any_tail_call ? std::strlen(kTailCallMark) : 0);
  const bool libraries = !limited(width) || used + suffix + kMinNameWidth <= width;
  if (limited(width))
    labels = report_names::shorten_distinct(labels, name_room(width, used + (libraries ? suffix : 0)));
  for (size_t i = 0; i < shown.size(); ++i)
    print_tree_node(*shown[i], labels[i], view, out, depth + 1, max_depth, width, libraries, hidden);
}

ordered_json tree_json(const CallTreeNode& node, const CallTreeView& view) {
  ordered_json children = ordered_json::array();
  for (const CallTreeNode& c : node.children) children.push_back(tree_json(c, view));
  return ordered_json{{"name", node.name},
                      {"library", node.library},
                      {"tail_call", node.tail_call},
                      {"samples", node.samples},
                      {"self_samples", node.self_samples},
                      {"percent_of_root", percent(node.samples, view.root.samples)},
                      {"percent_of_all", percent(node.samples, view.all_samples)},
                      {"cpu_ns", node.cpu_ns},
                      {"off_cpu_ns", node.off_cpu_ns},
                      {"wall_ns", node.wall_ns},
                      {"children", std::move(children)}};
}

std::vector<std::string> read_lines(const std::string& path, std::string& error) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  if (!in) {
    error = "cannot read " + path;
    return lines;
  }
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

}  // namespace

std::vector<uint32_t> find_functions(const Profile& p, const std::string& name) {
  std::vector<uint32_t> exact;
  for (uint32_t f = 0; f < p.funcs.size(); ++f) {
    if (p.func_name(f) == name) exact.push_back(f);
  }
  if (!exact.empty()) return exact;
  std::regex pattern;
  try {
    pattern = std::regex(name, std::regex::ECMAScript);
  } catch (const std::regex_error&) {
    throw ExportError("no function is named " + name + " (and it is not a valid regular expression)");
  }
  std::vector<uint32_t> matched;
  std::set<std::string> names;
  for (uint32_t f = 0; f < p.funcs.size(); ++f) {
    if (std::regex_search(p.func_name(f), pattern)) {
      matched.push_back(f);
      names.insert(p.func_name(f));
    }
  }
  if (matched.empty()) throw ExportError("no function of the profile matches " + name);
  if (names.size() > 1) {
    std::string list;
    size_t shown = 0;
    for (const std::string& n : names) {
      if (shown++ == 8) {
        list += ", ...";
        break;
      }
      list += (list.empty() ? "" : ", ") + n;
    }
    throw ExportError(std::to_string(names.size()) + " functions match " + name + ": " + list +
                      "; give one exact name");
  }
  return matched;
}

CallTreeView compute_call_tree(const Profile& p, const ReportOptions& options, const std::string& function,
                               CallTreeDirection direction) {
  validate(p);
  const std::vector<uint32_t> funcs = find_functions(p, function);
  // One node per function, also for one kept as several funcs (whole_functions.h).
  const std::vector<uint32_t> whole = report_rows::whole_functions(p);
  std::vector<bool> is_target(p.funcs.size(), false);
  for (uint32_t f : funcs) is_target[whole[f]] = true;
  CallTreeView view;
  view.direction = direction;
  view.interval_ns = interval_ns_or_assumed(p.meta.recording);
  const std::vector<StackTally> per_stack = tally_stacks(p, options, &view.all_samples);
  view.root.func = whole[funcs.front()];
  view.root.name = p.func_name(funcs.front());
  view.root.library = library_of(p, funcs.front());

  std::vector<uint32_t> path;   // funcs root-first
  std::vector<bool> tail_into;  // path[i] was reached from path[i - 1] by a tail call
  struct Step {
    uint32_t func;
    bool tail_call;  // the edge from the previous step (or the root) is a tail call
  };
  for (uint32_t s = 0; s < per_stack.size(); ++s) {
    const StackTally& t = per_stack[s];
    if (t.on == 0 && t.off == 0) continue;
    path.clear();
    tail_into.clear();
    for (uint32_t node = s; node != kNoIndex; node = p.stacks[node].prefix) {
      path.push_back(whole[p.frames[p.stacks[node].frame].func]);
      tail_into.push_back(p.stacks[node].tail_call);
    }
    std::reverse(path.begin(), path.end());
    std::reverse(tail_into.begin(), tail_into.end());
    std::vector<Step> branch;  // from the function towards the leaf (callees) or the root (callers)
    bool found = false;
    if (direction == CallTreeDirection::kCallees) {
      for (size_t i = 0; i < path.size(); ++i) {
        if (is_target[path[i]]) {
          for (size_t j = i + 1; j < path.size(); ++j) branch.push_back({path[j], tail_into[j]});
          found = true;
          break;
        }
      }
    } else {
      for (size_t i = path.size(); i-- > 0;) {
        if (is_target[path[i]]) {
          // The edge between a caller path[j] and its callee path[j + 1] is marked on the callee.
          for (size_t j = i; j-- > 0;) branch.push_back({path[j], tail_into[j + 1]});
          found = true;
          break;
        }
      }
    }
    if (!found) continue;
    CallTreeNode* node = &view.root;
    add(*node, t, view.interval_ns);
    for (const Step& step : branch) {
      const uint32_t f = step.func;
      const bool tail_call = step.tail_call;
      auto it = std::find_if(node->children.begin(), node->children.end(),
                             [&](const CallTreeNode& c) { return c.func == f && c.tail_call == tail_call; });
      if (it == node->children.end()) {
        CallTreeNode child;
        child.func = f;
        child.tail_call = tail_call;
        child.name = p.func_name(f);
        child.library = library_of(p, f);
        node->children.push_back(std::move(child));
        it = node->children.end() - 1;
      }
      node = &*it;
      add(*node, t, view.interval_ns);
    }
    node->self_samples += t.on;
  }
  sort_tree(view.root);
  return view;
}

void print_call_tree(const CallTreeView& view, std::ostream& out, const ReportOptions& options) {
  const bool callers = view.direction == CallTreeDirection::kCallers;
  const size_t width = options.width;
  // The name on a line of its own, the counts on the next: both fit the width.
  const std::string library = library_suffix(short_library(view.root.library, width));
  out << (callers ? "Callers of " : "Callees of ")
      << short_name(view.root.name, width, 11 + report_names::display_width(library)) << library << '\n'
      << "  " << view.root.samples << " on-CPU samples ("
      << fmt("%.1f%%", percent(view.root.samples, view.all_samples)) << " of " << view.all_samples
      << "), CPU " << fmt("%.1f ms", double(view.root.cpu_ns) / 1e6) << '\n';
  if (view.root.samples == 0 && view.root.wall_ns == 0) {
    out << "No sample has " << short_name(view.root.name, width, 30) << " on its stack.\n";
    return;
  }
  out << pad_left("Of fn", 7) << ' ' << pad_left("Of all", 7) << ' ' << pad_left("Samples", 9) << ' '
      << pad_left("CPU ms", 10) << "  " << (callers ? "Function <- its callers" : "Function -> its callees")
      << '\n';
  uint64_t hidden = 0;
  const size_t root_room = kTreeNumbersWidth + report_names::display_width(
                                                   library_suffix(short_library(view.root.library, width)));
  print_tree_node(view.root, short_name(view.root.name, width, root_room), view, out, 0, options.limit, width,
                  true, &hidden);
  if (hidden > 0) {
    const std::string why = options.limit != 0 ? ", or deeper than --limit" : "";
    out << hidden << " branches not shown (under " << kCallTreeMinPercent << "%" << why
        << "; --json has all)\n";
  }
}

void print_call_tree_json(const CallTreeView& view, std::ostream& out) {
  ordered_json doc{{"direction", view.direction == CallTreeDirection::kCallers ? "callers" : "callees"},
                   {"function", view.root.name},
                   {"all_samples", view.all_samples},
                   {"interval_ns", view.interval_ns},
                   {"tree", tree_json(view.root, view)}};
  out << doc.dump(2, ' ', false, ordered_json::error_handler_t::replace) << '\n';
}

Annotation annotate_function(const Profile& p, const ReportOptions& options, const std::string& function) {
  validate(p);
  const std::vector<uint32_t> funcs = find_functions(p, function);
  std::vector<bool> is_target(p.funcs.size(), false);
  for (uint32_t f : funcs) is_target[f] = true;
  Annotation a;
  a.function = p.func_name(funcs.front());
  a.library = library_of(p, funcs.front());
  // The function's own file: that of the part holding its entry (whole_functions.h).
  const std::vector<uint32_t> whole = report_rows::whole_functions(p);
  uint32_t file = kNoIndex;
  for (uint32_t f : funcs) {
    if (p.funcs[whole[f]].file != kNoIndex) {
      file = p.funcs[whole[f]].file;
      a.file = p.strings[file];
      break;
    }
  }
  const std::vector<StackTally> per_stack = tally_stacks(p, options, nullptr);
  std::map<uint32_t, AnnotatedLine> by_line;
  std::map<uint32_t, Annotation::OtherFile> other_files;  // by string index
  std::map<int64_t, uint64_t> by_address;
  for (uint32_t s = 0; s < per_stack.size(); ++s) {
    const StackTally& t = per_stack[s];
    if (t.on == 0) continue;
    // The innermost frame of the function: the leaf (self) or the call it is making.
    for (uint32_t node = s; node != kNoIndex; node = p.stacks[node].prefix) {
      const Frame& frame = p.frames[p.stacks[node].frame];
      if (!is_target[frame.func]) continue;
      const bool self = node == s;
      a.total_samples += t.on;
      if (self) a.self_samples += t.on;
      const uint32_t frame_file = p.funcs[frame.func].file;
      if (frame.line == 0) {
        if (self) a.unknown_line_samples += t.on;
      } else if (frame_file != kNoIndex && frame_file != file) {
        Annotation::OtherFile& other = other_files[frame_file];
        other.file = p.strings[frame_file];
        other.total_samples += t.on;
        if (self) other.self_samples += t.on;
      } else {
        AnnotatedLine& line = by_line[frame.line];
        line.line = frame.line;
        line.total_samples += t.on;
        if (self) {
          line.self_samples += t.on;
          line.self_cpu_ns += t.cpu_ns;
        }
      }
      if (self && frame.address >= 0) by_address[frame.address] += t.on;
      break;
    }
  }
  for (const auto& [address, n] : by_address) a.addresses.push_back(AnnotatedAddress{address, n, {}});
  for (auto& [index, other] : other_files) a.other_files.push_back(std::move(other));
  std::stable_sort(a.other_files.begin(), a.other_files.end(),
                   [](const Annotation::OtherFile& x, const Annotation::OtherFile& y) {
                     return x.total_samples > y.total_samples;
                   });
  if (!a.file.empty() && !by_line.empty()) {
    const std::vector<std::string> source = read_lines(a.file, a.source_error);
    a.source_found = !source.empty();
    if (a.source_found) {
      // The sampled lines with a few lines of context, as one window of the file.
      constexpr uint32_t kContext = 3;
      const uint32_t first = by_line.begin()->first > kContext ? by_line.begin()->first - kContext : 1;
      const uint32_t last = std::min<uint32_t>(by_line.rbegin()->first + kContext, uint32_t(source.size()));
      for (uint32_t l = first; l <= last; ++l) {
        AnnotatedLine line;
        if (auto it = by_line.find(l); it != by_line.end()) line = it->second;
        line.line = l;
        line.text = source[l - 1];
        a.lines.push_back(std::move(line));
      }
      // Lines past the file's end (a file changed since the build) are kept without text.
      for (const auto& [l, line] : by_line) {
        if (l > last) a.lines.push_back(line);
      }
    }
  }
  if (!a.source_found) {
    for (const auto& [l, line] : by_line) a.lines.push_back(line);
  }
  return a;
}

void print_annotation(const Annotation& a, std::ostream& out, size_t width) {
  const std::string library = library_suffix(short_library(a.library, width));
  out << "Annotate " << short_name(a.function, width, 9 + report_names::display_width(library)) << library
      << '\n'
      << "  " << a.self_samples << " self, " << a.total_samples << " total on-CPU samples\n";
  if (a.total_samples == 0) {
    out << "No sample has " << short_name(a.function, width, 30) << " on its stack.\n";
    return;
  }
  if (a.file.empty()) {
    out << "No line information for this function.\n";
  } else {
    out << "Source: " << a.file << (a.source_found ? "" : " (" + a.source_error + "; line numbers only)")
        << '\n';
  }
  if (!a.lines.empty()) {
    out << pad_left("Self%", 7) << ' ' << pad_left("Self", 8) << ' ' << pad_left("Total", 8) << ' '
        << pad_left("Line", 6) << "  Source\n";
    for (const AnnotatedLine& l : a.lines) {
      const bool any = l.self_samples != 0 || l.total_samples != 0;
      out << pad_left(l.self_samples != 0 ? fmt("%.1f%%", percent(l.self_samples, a.self_samples)) : "", 7)
          << ' ' << pad_left(any ? std::to_string(l.self_samples) : "", 8) << ' '
          << pad_left(any ? std::to_string(l.total_samples) : "", 8) << ' '
          << pad_left(std::to_string(l.line), 6) << "  " << l.text << '\n';
    }
  }
  if (a.unknown_line_samples != 0)
    out << a.unknown_line_samples << " self samples at addresses without a line\n";
  for (const Annotation::OtherFile& other : a.other_files) {
    out << other.self_samples << " self, " << other.total_samples << " total samples on lines of "
        << other.file << " (not shown above: its line numbers are not "
        << (a.file.empty() ? "this file" : a.file) << "'s)\n";
  }
  if (a.source_found || a.addresses.empty()) return;
  out << "Self samples by address:\n";
  for (const AnnotatedAddress& ad : a.addresses) {
    char address[32];
    std::snprintf(address, sizeof address, "0x%llx", static_cast<unsigned long long>(ad.address));
    out << pad_left(fmt("%.1f%%", percent(ad.self_samples, a.self_samples)), 7) << ' '
        << pad_left(std::to_string(ad.self_samples), 8) << "  " << pad_left(address, 12) << "  "
        << ad.instruction << '\n';
  }
}

void print_annotation_json(const Annotation& a, std::ostream& out) {
  ordered_json lines = ordered_json::array();
  for (const AnnotatedLine& l : a.lines) {
    ordered_json line{{"line", l.line},
                      {"self_samples", l.self_samples},
                      {"total_samples", l.total_samples},
                      {"self_cpu_ns", l.self_cpu_ns}};
    if (a.source_found) line["text"] = l.text;
    lines.push_back(std::move(line));
  }
  ordered_json others = ordered_json::array();
  for (const Annotation::OtherFile& other : a.other_files) {
    others.push_back(
        {{"file", other.file}, {"self_samples", other.self_samples}, {"total_samples", other.total_samples}});
  }
  ordered_json addresses = ordered_json::array();
  for (const AnnotatedAddress& ad : a.addresses) {
    addresses.push_back(
        {{"address", ad.address}, {"self_samples", ad.self_samples}, {"instruction", ad.instruction}});
  }
  ordered_json doc{{"function", a.function},
                   {"library", a.library},
                   {"file", a.file},
                   {"source_found", a.source_found},
                   {"self_samples", a.self_samples},
                   {"total_samples", a.total_samples},
                   {"unknown_line_samples", a.unknown_line_samples},
                   {"other_files", std::move(others)},
                   {"lines", std::move(lines)},
                   {"addresses", std::move(addresses)}};
  if (!a.source_error.empty()) doc["source_error"] = a.source_error;
  out << doc.dump(2, ' ', false, ordered_json::error_handler_t::replace) << '\n';
}

namespace {

// A module's name without the version after ".so" ("libfoo.so.1.2" -> "libfoo.so"); "" when it
// has none.
std::string unversioned(const std::string& name) {
  const size_t so = name.rfind(".so.");
  if (so == std::string::npos || so == 0) return "";
  for (size_t i = so + 4; i < name.size(); ++i) {
    if ((name[i] < '0' || name[i] > '9') && name[i] != '.') return "";
  }
  return name.substr(0, so + 3);
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// One side's module: its path (the first seen) and whether it is a program (not a shared object,
// named as the command of one of the profile's processes; comm keeps 15 characters).
struct SideModule {
  std::string path;
  bool program = false;
};

// The modules of a report's functions: those of its CPU rows and of its allocation rows.
std::map<std::string, SideModule> modules_of(const Profile& p, const Report& report) {
  std::set<std::string> commands;
  for (const Thread& t : p.threads) commands.insert(t.process_name);
  std::map<std::string, SideModule> modules;
  const auto add = [&](uint32_t func, const std::string& library) {
    if (library.empty() || modules.count(library) != 0) return;
    SideModule& m = modules[library];
    const uint32_t lib = p.funcs[func].lib;
    if (lib != kNoIndex && lib < p.libs.size()) {
      m.path = p.libs[lib].path;
      m.program = !p.libs[lib].is_kernel && library.front() != '[' &&
                  library.find(".so") == std::string::npos && commands.count(library.substr(0, 15)) != 0;
    }
  };
  for (const ReportRow& r : report.rows) add(r.func, r.library);
  for (const AllocRow& r : report.allocations) add(r.func, r.library);
  return modules;
}

// Pairs the modules of A and B (see DiffModulePair); `module_id[side]` maps each module's file name to
// the name of the pair it is in (A's name), or to a name of its own when unpaired.
std::vector<DiffModulePair> pair_modules(const std::map<std::string, SideModule> (&modules)[2],
                                         std::map<std::string, std::string> (&module_id)[2]) {
  std::vector<DiffModulePair> pairs;
  std::set<std::string> left[2];
  for (int side = 0; side < 2; ++side) {
    for (const auto& [name, m] : modules[side]) {
      if (side == 1 && module_id[0].count(name) != 0) {
        module_id[1][name] = name;
        pairs.push_back({name, name, modules[0].at(name).path, m.path, "name"});
        continue;
      }
      if (side == 0 && modules[1].count(name) != 0) {
        module_id[0][name] = name;
        continue;
      }
      left[side].insert(name);
    }
  }
  const auto pair = [&](const std::string& a, const std::string& b, const char* by) {
    module_id[0][a] = a;
    module_id[1][b] = a;
    pairs.push_back({a, b, modules[0].at(a).path, modules[1].at(b).path, by});
    left[0].erase(a);
    left[1].erase(b);
  };
  // The programs, when each side has exactly one left.
  std::vector<std::string> programs[2];
  for (int side = 0; side < 2; ++side) {
    for (const std::string& name : left[side]) {
      if (modules[side].at(name).program) programs[side].push_back(name);
    }
  }
  if (programs[0].size() == 1 && programs[1].size() == 1) pair(programs[0][0], programs[1][0], "program");
  // Libraries by their name without the version, one to one.
  std::map<std::string, std::vector<std::string>> by_base[2];
  for (int side = 0; side < 2; ++side) {
    for (const std::string& name : left[side]) {
      const std::string base = unversioned(name);
      if (!base.empty()) by_base[side][base].push_back(name);
    }
  }
  for (const auto& [base, names] : by_base[0]) {
    const auto other = by_base[1].find(base);
    if (names.size() == 1 && other != by_base[1].end() && other->second.size() == 1)
      pair(names[0], other->second[0], "unversioned_name");
  }
  for (int side = 0; side < 2; ++side) {
    for (const std::string& name : left[side])
      module_id[side][name] = std::string(side == 0 ? "A:" : "B:") + name;
  }
  // Listed: the pairs whose modules differ in name or path.
  std::vector<DiffModulePair> listed;
  for (DiffModulePair& m : pairs) {
    if (m.a != m.b || m.a_path != m.b_path) listed.push_back(std::move(m));
  }
  return listed;
}

// Diff rows by (module pair, name, source file's path).
using DiffKey = std::tuple<std::string, std::string, std::string>;

// Among the rows with figures on one side only (`only_in(row, side)`), those whose module pair, name
// and source file name (a rebuilt program's file at another path) pair exactly one row of A with one
// of B are one row: B's figures (`take_b(row, from_b)`) move into A's row.
template <typename Row, typename OnlyIn, typename TakeB>
void pair_rows_by_file_name(std::map<DiffKey, Row>& rows, OnlyIn only_in, TakeB take_b) {
  std::map<DiffKey, std::vector<DiffKey>> by_file_name[2];
  for (const auto& [key, row] : rows) {
    for (int side = 0; side < 2; ++side) {
      if (only_in(row, side))
        by_file_name[side][{std::get<0>(key), std::get<1>(key), base_name(std::get<2>(key))}].push_back(key);
    }
  }
  for (const auto& [loose, keys] : by_file_name[0]) {
    const auto other = by_file_name[1].find(loose);
    if (keys.size() != 1 || other == by_file_name[1].end() || other->second.size() != 1) continue;
    Row& row = rows.at(keys[0]);
    Row& from_b = rows.at(other->second[0]);
    if (from_b.library != row.library) row.library_b = from_b.library;
    take_b(row, from_b);
    rows.erase(other->second[0]);
  }
}

}  // namespace

Diff diff_profiles(const Profile& a, const Profile& b, const ReportOptions& options) {
  Diff diff;
  ReportOptions all = options;
  all.limit = 0;
  const Profile* profiles[2] = {&a, &b};
  Report reports[2];
  std::map<std::string, SideModule> modules[2];
  for (int side = 0; side < 2; ++side) {
    reports[side] = compute_report(*profiles[side], all);
    diff.totals[side] = reports[side].totals;
    modules[side] = modules_of(*profiles[side], reports[side]);
  }
  std::map<std::string, std::string> module_id[2];
  diff.modules = pair_modules(modules, module_id);

  // Rows by (module pair, name, source file): first by the file's path, then, among the rows left
  // on one side only, by its file name where that pairs one row of A with one of B.
  using Key = DiffKey;
  // The row of `rows` a function of `side` goes into, its name, file and modules set.
  const auto row_of = [&](auto& rows, int side, uint32_t func, const std::string& name,
                          const std::string& library) -> auto& {
    const Profile& p = *profiles[side];
    const uint32_t file = p.funcs[func].file;
    const std::string path = file != kNoIndex ? p.strings[file] : std::string();
    const std::string module = library.empty() ? std::string() : module_id[side].at(library);
    auto& row = rows[Key{module, name, path}];
    row.name = name;
    row.file = path;
    if (row.library.empty()) {
      row.library = library;
    } else if (side == 1 && row.library != library) {
      row.library_b = library;
    }
    return row;
  };
  std::map<Key, DiffRow> rows;
  for (int side = 0; side < 2; ++side) {
    for (const ReportRow& r : reports[side].rows) {
      DiffRow& row = row_of(rows, side, r.func, r.name, r.library);
      row.self_cpu_ns[side] += r.self_cpu_ns;
      row.total_cpu_ns[side] += r.total_cpu_ns;
      row.self_wall_ns[side] += r.self_wall_ns;
      row.total_wall_ns[side] += r.total_wall_ns;
    }
  }
  const auto only_in = [](const DiffRow& r, int side) {
    return r.total_wall_ns[1 - side] == 0 && r.total_cpu_ns[1 - side] == 0 &&
           (r.total_wall_ns[side] != 0 || r.total_cpu_ns[side] != 0);
  };
  pair_rows_by_file_name(rows, only_in, [](DiffRow& row, const DiffRow& from_b) {
    row.self_cpu_ns[1] = from_b.self_cpu_ns[1];
    row.total_cpu_ns[1] = from_b.total_cpu_ns[1];
    row.self_wall_ns[1] = from_b.self_wall_ns[1];
    row.total_wall_ns[1] = from_b.total_wall_ns[1];
  });
  for (auto& [key, row] : rows) diff.rows.push_back(std::move(row));
  const auto magnitude = [](int64_t v) { return v < 0 ? uint64_t(-v) : uint64_t(v); };
  std::stable_sort(diff.rows.begin(), diff.rows.end(), [&](const DiffRow& x, const DiffRow& y) {
    const uint64_t sx = magnitude(x.self_cpu_change_ns()), sy = magnitude(y.self_cpu_change_ns());
    if (sx != sy) return sx > sy;
    const uint64_t tx = magnitude(x.total_cpu_change_ns()), ty = magnitude(y.total_cpu_change_ns());
    if (tx != ty) return tx > ty;
    return x.name < y.name;
  });

  // Memory, when both were recorded with --alloc: per function (paired as above: by the file's path,
  // then by its file name), the bytes allocated and still live at the end, in it and its callees.
  diff.memory = reports[0].alloc_mean_bytes != 0 && reports[1].alloc_mean_bytes != 0;
  for (int side = 0; side < 2; ++side) {
    diff.alloc_mean_bytes[side] = reports[side].alloc_mean_bytes;
    diff.alloc_bytes[side] = reports[side].alloc_bytes;
    diff.live_bytes[side] = reports[side].live_bytes;
  }
  if (!diff.memory) return diff;
  std::map<Key, DiffAllocRow> alloc_rows;
  for (int side = 0; side < 2; ++side) {
    for (const AllocRow& r : reports[side].allocations) {
      DiffAllocRow& row = row_of(alloc_rows, side, r.func, r.name, r.library);
      row.self_bytes[side] += r.self_bytes;
      row.total_bytes[side] += r.total_bytes;
      row.live_total_bytes[side] += r.live_total_bytes;
    }
  }
  pair_rows_by_file_name(
      alloc_rows,
      [](const DiffAllocRow& r, int side) {
        return r.total_bytes[1 - side] == 0 && r.total_bytes[side] != 0;
      },
      [](DiffAllocRow& row, const DiffAllocRow& from_b) {
        row.self_bytes[1] = from_b.self_bytes[1];
        row.total_bytes[1] = from_b.total_bytes[1];
        row.live_total_bytes[1] = from_b.live_total_bytes[1];
      });
  for (auto& [key, row] : alloc_rows) diff.allocations.push_back(std::move(row));
  std::stable_sort(diff.allocations.begin(), diff.allocations.end(),
                   [](const DiffAllocRow& x, const DiffAllocRow& y) {
                     const double ax = std::fabs(x.total_change()), ay = std::fabs(y.total_change());
                     if (ax != ay) return ax > ay;
                     const double lx = std::fabs(x.live_change()), ly = std::fabs(y.live_change());
                     if (lx != ly) return lx > ly;
                     return x.name < y.name;
                   });
  return diff;
}

namespace {

// The memory part of the text diff (diff.memory): the totals, then the functions by the change of
// their bytes allocated; when only one side has allocations, a line saying so.
void print_diff_memory(const Diff& diff, std::ostream& out, const ReportOptions& options) {
  if (!diff.memory) {
    if (diff.alloc_mean_bytes[0] != 0 || diff.alloc_mean_bytes[1] != 0)
      out << "Memory not compared: only " << (diff.alloc_mean_bytes[0] != 0 ? "A" : "B")
          << " was recorded with --alloc\n";
    return;
  }
  const auto mib = [](double b) { return fmt("%.2f", b / (1024.0 * 1024.0)); };
  const auto signed_mib = [](double b) { return fmt("%+.2f", b / (1024.0 * 1024.0)); };
  out << "Memory (sampled allocations, estimates in MiB): A " << mib(diff.alloc_bytes[0]) << " allocated, "
      << mib(diff.live_bytes[0]) << " live at the end;\n          B " << mib(diff.alloc_bytes[1])
      << " allocated, " << mib(diff.live_bytes[1]) << " live at the end ("
      << signed_mib(diff.alloc_bytes[1] - diff.alloc_bytes[0]) << " allocated, "
      << signed_mib(diff.live_bytes[1] - diff.live_bytes[0]) << " live)\n";
  const size_t n = diff.allocations.size();
  const size_t shown = options.limit != 0 ? std::min(options.limit, n) : n;
  constexpr size_t kNumbersWidth = 61;  // 9 1 9 1 9 1 7 1 10 1 10 2
  const size_t room = name_room(options.width, kNumbersWidth);
  out << "Functions by the change of their bytes allocated (B - A, callees included, in MiB), top " << shown
      << " of " << n << '\n';
  out << pad_left("Alloc A", 9) << ' ' << pad_left("Alloc B", 9) << ' ' << pad_left("Change", 9) << ' '
      << pad_left("%", 7) << ' ' << pad_left("Live A", 10) << ' ' << pad_left("Live B", 10) << "  Function\n";
  for (size_t i = 0; i < shown; ++i) {
    const DiffAllocRow& r = diff.allocations[i];
    const std::string relative = r.total_bytes[0] == 0
                                     ? (r.total_bytes[1] == 0 ? "" : "new")
                                     : fmt("%+.0f%%", 100.0 * r.total_change() / r.total_bytes[0]);
    std::string label = r.name;
    if (limited(options.width)) label = report_names::shorten_distinct({label}, room).front();
    out << pad_left(mib(r.total_bytes[0]), 9) << ' ' << pad_left(mib(r.total_bytes[1]), 9) << ' '
        << pad_left(signed_mib(r.total_change()), 9) << ' ' << pad_left(relative, 7) << ' '
        << pad_left(mib(r.live_total_bytes[0]), 10) << ' ' << pad_left(mib(r.live_total_bytes[1]), 10) << "  "
        << label;
    const std::string library = library_suffix(
        short_library(r.library_b.empty() ? r.library : r.library + " = " + r.library_b, options.width));
    if (!limited(options.width) ||
        report_names::display_width(label) + report_names::display_width(library) <= room)
      out << library;
    out << '\n';
  }
}

}  // namespace

void print_diff(const Diff& diff, std::ostream& out, const ReportOptions& options) {
  const auto ms = [](double ns) { return fmt("%.1f", ns / 1e6); };
  const auto signed_ms = [](int64_t ns) { return fmt("%+.1f", double(ns) / 1e6); };
  out << "hpd diff: A " << diff.totals[0].samples << " on-CPU samples, CPU "
      << ms(double(diff.totals[0].cpu_ns)) << " ms;\n          B " << diff.totals[1].samples
      << " on-CPU samples, CPU " << ms(double(diff.totals[1].cpu_ns)) << " ms ("
      << signed_ms(int64_t(diff.totals[1].cpu_ns) - int64_t(diff.totals[0].cpu_ns)) << " ms)\n";
  if (!diff.modules.empty()) {
    out << "Modules paired where their paths differ:\n";
    for (const DiffModulePair& m : diff.modules) {
      const char* by = m.by == "program"            ? "the program"
                       : m.by == "unversioned_name" ? "name without version"
                                                    : "same name";
      // Their paths, or their names where the paths do not fit the terminal.
      std::string line =
          "  " + (m.a_path.empty() ? m.a : m.a_path) + " = " + (m.b_path.empty() ? m.b : m.b_path);
      if (limited(options.width) && report_names::display_width(line) + 4 + std::strlen(by) > options.width)
        line = "  " + m.a + " = " + m.b;
      out << line << " (" << by << ")\n";
    }
  }
  const size_t shown = options.limit != 0 ? std::min(options.limit, diff.rows.size()) : diff.rows.size();
  // The names of the rows shown, told apart; a library after its name only where the line has room.
  constexpr size_t kDiffNumbersWidth = 61;  // 9 1 9 1 9 1 7 1 10 1 10 2
  std::vector<std::string> labels;
  // Functions of one name in one module (static functions of different files): their file after it.
  std::map<std::pair<std::string, std::string>, size_t> same_name;
  for (const DiffRow& r : diff.rows) ++same_name[{r.name, r.library}];
  for (size_t i = 0; i < shown; ++i) {
    const DiffRow& r = diff.rows[i];
    labels.push_back(same_name[{r.name, r.library}] > 1 && !r.file.empty()
                         ? r.name + " (" + base_name(r.file) + ")"
                         : r.name);
  }
  const size_t room = name_room(options.width, kDiffNumbersWidth);
  if (limited(options.width)) labels = report_names::shorten_distinct(labels, room);
  out << "Functions by the change of their self CPU time (B - A, in ms), top " << shown << " of "
      << diff.rows.size() << '\n';
  out << pad_left("Self A", 9) << ' ' << pad_left("Self B", 9) << ' ' << pad_left("Change", 9) << ' '
      << pad_left("%", 7) << ' ' << pad_left("Total chg", 10) << ' ' << pad_left("Wall chg", 10)
      << "  Function (ms)\n";
  for (size_t i = 0; i < shown; ++i) {
    const DiffRow& r = diff.rows[i];
    const std::string relative =
        r.self_cpu_ns[0] == 0
            ? (r.self_cpu_ns[1] == 0 ? "" : "new")
            : fmt("%+.0f%%", 100.0 * double(r.self_cpu_change_ns()) / double(r.self_cpu_ns[0]));
    out << pad_left(ms(double(r.self_cpu_ns[0])), 9) << ' ' << pad_left(ms(double(r.self_cpu_ns[1])), 9)
        << ' ' << pad_left(signed_ms(r.self_cpu_change_ns()), 9) << ' ' << pad_left(relative, 7) << ' '
        << pad_left(signed_ms(r.total_cpu_change_ns()), 10) << ' '
        << pad_left(signed_ms(r.self_wall_change_ns()), 10) << "  " << labels[i];
    const std::string library = library_suffix(
        short_library(r.library_b.empty() ? r.library : r.library + " = " + r.library_b, options.width));
    if (!limited(options.width) ||
        report_names::display_width(labels[i]) + report_names::display_width(library) <= room)
      out << library;
    out << '\n';
  }
  print_diff_memory(diff, out, options);
}

void print_diff_json(const Diff& diff, std::ostream& out, const ReportOptions& options) {
  const size_t shown = options.limit != 0 ? std::min(options.limit, diff.rows.size()) : diff.rows.size();
  ordered_json rows = ordered_json::array();
  for (size_t i = 0; i < shown; ++i) {
    const DiffRow& r = diff.rows[i];
    rows.push_back({{"name", r.name},
                    {"file", r.file},
                    {"library", r.library},
                    {"library_b", r.library_b.empty() ? r.library : r.library_b},
                    {"self_cpu_ns", {r.self_cpu_ns[0], r.self_cpu_ns[1]}},
                    {"total_cpu_ns", {r.total_cpu_ns[0], r.total_cpu_ns[1]}},
                    {"self_wall_ns", {r.self_wall_ns[0], r.self_wall_ns[1]}},
                    {"total_wall_ns", {r.total_wall_ns[0], r.total_wall_ns[1]}},
                    {"self_cpu_change_ns", r.self_cpu_change_ns()},
                    {"total_cpu_change_ns", r.total_cpu_change_ns()},
                    {"self_wall_change_ns", r.self_wall_change_ns()},
                    {"total_wall_change_ns", r.total_wall_change_ns()}});
  }
  ordered_json totals = ordered_json::array();
  for (const ReportTotals& t : diff.totals) {
    totals.push_back({{"samples", t.samples},
                      {"cpu_ns", t.cpu_ns},
                      {"wall_ns", t.wall_ns},
                      {"duration_ns", t.duration_ns}});
  }
  ordered_json modules = ordered_json::array();
  for (const DiffModulePair& m : diff.modules) {
    modules.push_back({{"a", m.a}, {"b", m.b}, {"a_path", m.a_path}, {"b_path", m.b_path}, {"by", m.by}});
  }
  ordered_json doc{{"totals", std::move(totals)},
                   {"modules", std::move(modules)},
                   {"functions", diff.rows.size()},
                   {"rows", std::move(rows)}};
  if (diff.memory) {
    const size_t n = diff.allocations.size();
    const size_t alloc_shown = options.limit != 0 ? std::min(options.limit, n) : n;
    ordered_json alloc_rows = ordered_json::array();
    for (size_t i = 0; i < alloc_shown; ++i) {
      const DiffAllocRow& r = diff.allocations[i];
      alloc_rows.push_back({{"name", r.name},
                            {"file", r.file},
                            {"library", r.library},
                            {"library_b", r.library_b.empty() ? r.library : r.library_b},
                            {"self_bytes", {r.self_bytes[0], r.self_bytes[1]}},
                            {"total_bytes", {r.total_bytes[0], r.total_bytes[1]}},
                            {"live_total_bytes", {r.live_total_bytes[0], r.live_total_bytes[1]}},
                            {"total_bytes_change", r.total_change()},
                            {"live_total_bytes_change", r.live_change()}});
    }
    doc["allocations"] = {{"mean_bytes", {diff.alloc_mean_bytes[0], diff.alloc_mean_bytes[1]}},
                          {"bytes", {diff.alloc_bytes[0], diff.alloc_bytes[1]}},
                          {"live_bytes", {diff.live_bytes[0], diff.live_bytes[1]}},
                          {"functions", n},
                          {"rows", std::move(alloc_rows)}};
  }
  out << doc.dump(2, ' ', false, ordered_json::error_handler_t::replace) << '\n';
}

}  // namespace hpd
