// Per-function exclusive/inclusive attribution, aggregated once per unique stack, printed as text or JSON.
#include "hpd/export/report.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hpd {

namespace {

constexpr uint64_t kDefaultIntervalNs = 1000000;

struct Tally {
  uint64_t on = 0;  // on-CPU samples
  uint64_t cpu_ns = 0;
  uint64_t off = 0;  // off-CPU samples
  uint64_t off_ns = 0;

  bool empty() const { return on == 0 && off == 0; }
  Tally& operator+=(const Tally& o) {
    on += o.on;
    cpu_ns += o.cpu_ns;
    off += o.off;
    off_ns += o.off_ns;
    return *this;
  }
};

// Linux keeps 15 bytes of a thread's name: a longer --thread matches the name it was cut to.
bool thread_name_matches(const std::string& name, const std::string& wanted) {
  if (wanted.empty() || name == wanted) return true;
  return name.size() == 15 && wanted.size() > 15 && wanted.compare(0, 15, name) == 0;
}

bool selected(const Thread& t, const ReportOptions& options) {
  return report_selects_thread(t, options);
}

void check_indices(const Profile& p) {
  for (size_t i = 0; i < p.frames.size(); ++i) {
    if (p.frames[i].func >= p.funcs.size()) {
      throw std::runtime_error("invalid profile: frame " + std::to_string(i) + " refers to a missing func");
    }
  }
  for (size_t i = 0; i < p.funcs.size(); ++i) {
    if (p.funcs[i].name >= p.strings.size() ||
        (p.funcs[i].lib != kNoIndex && p.funcs[i].lib >= p.libs.size())) {
      throw std::runtime_error("invalid profile: func " + std::to_string(i) +
                               " refers to a missing name or lib");
    }
  }
  for (size_t i = 0; i < p.stacks.size(); ++i) {
    const Stack& s = p.stacks[i];
    // prefix < i also guarantees that walking prefixes terminates.
    if (s.frame >= p.frames.size() || (s.prefix != kNoIndex && s.prefix >= i)) {
      throw std::runtime_error("invalid profile: stack " + std::to_string(i) +
                               " refers to a missing frame or a "
                               "prefix that does not precede it");
    }
  }
}

uint64_t lost_total(const LostCounts& l) {
  return l.lost_records + l.throttle_events + l.stack_failures + l.truncated_stacks;
}

double percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

uint64_t sort_key(const ReportRow& r, ReportSort sort) {
  switch (sort) {
    case ReportSort::kSelf: return r.self_samples;
    case ReportSort::kTotal: return r.total_samples;
    case ReportSort::kSelfWall: return r.self_wall_ns;
    case ReportSort::kTotalWall: return r.total_wall_ns;
    case ReportSort::kSelfCpu: return r.self_cpu_ns;
    case ReportSort::kCalls: return r.calls;
  }
  return r.self_samples;
}

// The other key of the same view breaks ties, then the name, for a stable order.
ReportSort tie_breaker(ReportSort sort) {
  switch (sort) {
    case ReportSort::kSelf: return ReportSort::kTotal;
    case ReportSort::kTotal: return ReportSort::kSelf;
    case ReportSort::kSelfWall: return ReportSort::kTotalWall;
    case ReportSort::kTotalWall: return ReportSort::kSelfWall;
    case ReportSort::kSelfCpu: return ReportSort::kSelf;
    case ReportSort::kCalls: return ReportSort::kSelf;
  }
  return ReportSort::kTotal;
}

void sort_rows(std::vector<ReportRow>& rows, ReportSort sort) {
  const ReportSort second = tie_breaker(sort);
  std::sort(rows.begin(), rows.end(), [&](const ReportRow& a, const ReportRow& b) {
    const uint64_t ka = sort_key(a, sort), kb = sort_key(b, sort);
    if (ka != kb) return ka > kb;
    const uint64_t sa = sort_key(a, second), sb = sort_key(b, second);
    if (sa != sb) return sa > sb;
    if (a.name != b.name) return a.name < b.name;
    return a.func < b.func;
  });
}

const char* sort_name(ReportSort sort) {
  switch (sort) {
    case ReportSort::kSelf: return "self";
    case ReportSort::kTotal: return "total";
    case ReportSort::kSelfWall: return "self-wall";
    case ReportSort::kTotalWall: return "total-wall";
    case ReportSort::kSelfCpu: return "cpu";
    case ReportSort::kCalls: return "calls";
  }
  return "self";
}

// ---- text layout -------------------------------------------------------------------------------

// ReportOptions::width 0 (not a terminal): lines as long as their content; names are never cut.
constexpr size_t kUnlimitedWidth = size_t{1} << 30;
// The library column in 80 columns; wider terminals give it a quarter of what they add.
constexpr size_t kLibraryWidth = 14;
// Columns of the numbers before the function: 6 1 6 1 8 1 9 (CPU view), 6 1 6 1 9 1 9 (wall view).
constexpr size_t kCpuNumbersWidth = 32;
constexpr size_t kWallNumbersWidth = 33;

// Display width is approximated by code points: right for the Latin, Greek and symbol characters of
// demangled names, not for wide East Asian characters.
size_t code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Byte offset of code point `k` in s (s.size() when past the end).
size_t offset_of(std::string_view s, size_t k) {
  size_t seen = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (seen == k) return i;
      ++seen;
    }
  }
  return s.size();
}

constexpr std::string_view kEllipsis = "\xE2\x80\xA6";  // U+2026

std::string truncate_right(std::string_view s, size_t width) {
  if (code_points(s) <= width) return std::string(s);
  if (width == 0) return "";
  return std::string(s.substr(0, offset_of(s, width - 1))) + std::string(kEllipsis);
}

// For paths, whose end (the file name) says most.
std::string truncate_left(std::string_view s, size_t width) {
  const size_t n = code_points(s);
  if (n <= width) return std::string(s);
  if (width == 0) return "";
  return std::string(kEllipsis) + std::string(s.substr(offset_of(s, n - (width - 1))));
}

std::string pad_right(std::string s, size_t width) {
  const size_t n = code_points(s);
  if (n < width) s.append(width - n, ' ');
  return s;
}

std::string pad_left(const std::string& s, size_t width) {
  const size_t n = code_points(s);
  return n < width ? std::string(width - n, ' ') + s : s;
}

std::string format(const char* fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, value);
  return buf;
}

std::string format_percent(double p) {
  return format("%.1f%%", p);
}

std::string format_duration(uint64_t ns) {
  if (ns < 1000000000) return format("%.1f ms", static_cast<double>(ns) / 1e6);
  return format("%.3f s", static_cast<double>(ns) / 1e9);
}

std::string format_ms(uint64_t ns) {
  return format("%.3f ms", static_cast<double>(ns) / 1e6);
}

// A time column in ms, or in s when the largest value would not fit the column in ms.
struct TimeColumn {
  double divisor = 1e6;
  const char* unit = "ms";
  std::string cell(uint64_t ns) const { return format("%.1f", static_cast<double>(ns) / divisor); }
};

TimeColumn time_column(uint64_t max_ns, size_t width) {
  TimeColumn column;
  if (TimeColumn{}.cell(max_ns).size() > width) column = TimeColumn{1e9, "s"};
  return column;
}

std::string function_cell(const ReportRow& row, size_t width) {
  return pad_right(truncate_right(row.name, width), width);
}

std::string library_name(const ReportRow& row) {
  return row.library.empty() ? "?" : row.library;
}

// Widths of the function and library columns of a table whose numbers take `numbers` columns.
// Limited: the library gets kLibraryWidth (plus a quarter of the columns beyond 80) or its longest
// name if shorter, the function the rest. Unlimited: each as wide as its longest entry.
struct NameColumns {
  size_t function = 8;
  size_t library = 7;
};
NameColumns name_columns(const std::vector<const ReportRow*>& rows, size_t numbers, size_t width) {
  NameColumns c;
  size_t longest_function = code_points("Function"), longest_library = code_points("Library");
  for (const ReportRow* r : rows) {
    longest_function = std::max(longest_function, code_points(r->name));
    longest_library = std::max(longest_library, code_points(library_name(*r)));
  }
  if (width >= kUnlimitedWidth) return NameColumns{longest_function, longest_library};
  const size_t library_cap = kLibraryWidth + (width > 80 ? (width - 80) / 4 : 0);
  c.library = std::min(longest_library, library_cap);
  const size_t used = numbers + 3 + c.library;
  c.function = width > used + 8 ? width - used : 8;
  return c;
}

// One line per thread that lost something, naming only the kinds it lost; the worst first.
template <typename Line>
void print_lost_by_thread(const ReportTotals& t, const Line& line) {
  if (t.lost_by_thread.empty()) return;
  line("Lost by thread:");
  constexpr size_t kShownThreads = 10;
  for (size_t i = 0; i < t.lost_by_thread.size() && i < kShownThreads; ++i) {
    const ThreadLoss& l = t.lost_by_thread[i];
    std::string text;
    const auto part = [&text](uint64_t n, const char* what) {
      if (n == 0) return;
      text += (text.empty() ? " " : ", ") + std::to_string(n) + " " + what;
    };
    part(l.lost.lost_records, l.lost.lost_records == 1 ? "lost record" : "lost records");
    part(l.lost.throttle_events, l.lost.throttle_events == 1 ? "throttle event" : "throttle events");
    part(l.lost.stack_failures, l.lost.stack_failures == 1 ? "failed stack" : "failed stacks");
    part(l.lost.truncated_stacks, l.lost.truncated_stacks == 1 ? "truncated stack" : "truncated stacks");
    // Linux thread names have at most 15 characters; longer ones (from other tools) are cut.
    line("  tid " + std::to_string(l.tid) + " " + truncate_right(l.name, 16) + " (pid " +
         std::to_string(l.pid) + "):" + text);
  }
  if (t.lost_by_thread.size() > kShownThreads)
    line("  and " + std::to_string(t.lost_by_thread.size() - kShownThreads) + " more threads");
}

void print_header(const Report& report, std::ostream& out, size_t width) {
  const ReportTotals& t = report.totals;
  const auto plural = [](uint64_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  const auto line = [&](const std::string& text) { out << truncate_right(text, width) << '\n'; };
  // "on-CPU" here and "off-CPU ... samples" below: the record summary counts both kinds together.
  line("hpd report: " + plural(t.samples, "on-CPU sample", "on-CPU samples") + ", " +
       plural(t.threads, "thread", "threads") + " in " + plural(t.processes, "process", "processes") +
       ", duration " + format_duration(t.duration_ns));
  line("CPU time " + format_duration(t.cpu_ns) + ", interval " + format_ms(t.interval_ns) + ", off-CPU " +
       format_duration(t.off_cpu_ns) + " in " +
       plural(t.off_cpu_samples, "off-CPU sample", "off-CPU samples"));
  line("Lost: " + plural(t.lost.lost_records, "record", "records") + ", " +
       plural(t.lost.throttle_events, "throttle event", "throttle events"));
  line("Stacks: " + std::to_string(t.lost.stack_failures) + " failed, " +
       std::to_string(t.lost.truncated_stacks) + " truncated, " +
       plural(t.samples_without_stack, "sample", "samples") + " without a stack");
  print_lost_by_thread(t, line);
  const auto completeness = [](uint64_t complete, uint64_t truncated, uint64_t failed, const char* what) {
    const uint64_t known = complete + truncated + failed;
    if (known == 0) return std::string();
    const auto share = [known](uint64_t n) { return format("%.1f%%", 100.0 * double(n) / double(known)); };
    return share(complete) + " of " + what + " samples (" + share(truncated) + " truncated, " +
           share(failed) + " failed)";
  };
  const std::string on = completeness(t.stacks_complete, t.stacks_truncated, t.stacks_failed, "on-CPU");
  const std::string off =
      completeness(t.off_stacks_complete, t.off_stacks_truncated, t.off_stacks_failed, "off-CPU");
  if (!on.empty()) line("Complete stacks: " + on);
  if (!off.empty()) line((on.empty() ? "Complete stacks: " : "                 ") + off);
  constexpr size_t kShownStackThreads = 8;
  if (t.stacks_by_thread.size() > 1) {
    for (size_t i = 0; i < t.stacks_by_thread.size() && i < kShownStackThreads; ++i) {
      const ThreadStacks& s = t.stacks_by_thread[i];
      const auto pct = [](uint64_t c, uint64_t tr, uint64_t f) {
        const uint64_t n = c + tr + f;
        return n == 0 ? std::string("-")
                      : format("%.1f%%", 100.0 * double(c) / double(n)) + " of " + std::to_string(n);
      };
      line("  tid " + std::to_string(s.tid) + " " + truncate_right(s.name, 16) + ": on-CPU " +
           pct(s.on_complete, s.on_truncated, s.on_failed) + ", off-CPU " +
           pct(s.off_complete, s.off_truncated, s.off_failed));
    }
    if (t.stacks_by_thread.size() > kShownStackThreads)
      line("  and " + std::to_string(t.stacks_by_thread.size() - kShownStackThreads) + " more threads");
  }
  line("Missing modules: " + std::to_string(t.missing_modules.size()) +
       (t.missing_modules.empty() ? "" : " (no symbols for their code)"));
  constexpr size_t kShownModules = 5;
  for (size_t i = 0; i < t.missing_modules.size() && i < kShownModules; ++i) {
    line("  " + truncate_left(t.missing_modules[i], width - 2));
  }
  if (t.missing_modules.size() > kShownModules) {
    line("  and " + std::to_string(t.missing_modules.size() - kShownModules) + " more");
  }
}

const char* cpu_view_order(ReportSort sort) {
  switch (sort) {
    case ReportSort::kTotal: return "total (inclusive)";
    case ReportSort::kSelfCpu: return "self CPU time";
    case ReportSort::kCalls: return "calls";
    default: return "self (exclusive)";
  }
}

void print_cpu_view(std::ostream& out, ReportSort sort, const std::vector<const ReportRow*>& rows, size_t of,
                    size_t width) {
  uint64_t max_ns = 0;
  for (const ReportRow* r : rows) max_ns = std::max(max_ns, r->self_cpu_ns);
  const TimeColumn cpu = time_column(max_ns, 9);
  const bool calls = sort == ReportSort::kCalls;  // the counts the rows are ordered by, in a column
  const NameColumns names = name_columns(rows, kCpuNumbersWidth + (calls ? 12 : 0), width);
  out << "\nOn-CPU samples by " << cpu_view_order(sort) << ", top " << rows.size() << " of " << of
      << " functions\n";
  out << pad_left("Self%", 6) << ' ' << pad_left("Total%", 6) << ' ' << pad_left("Samples", 8) << ' '
      << pad_left(std::string("CPU ") + cpu.unit, 9) << (calls ? pad_left("Calls", 12) : "") << "  "
      << pad_right("Function", names.function) << ' ' << "Library\n";
  for (const ReportRow* r : rows) {
    out << pad_left(format_percent(r->self_percent), 6) << ' '
        << pad_left(format_percent(r->total_percent), 6) << ' '
        << pad_left(std::to_string(r->self_samples), 8) << ' ' << pad_left(cpu.cell(r->self_cpu_ns), 9)
        << (calls ? pad_left(r->calls != 0 ? std::to_string(r->calls) : "-", 12) : "") << "  "
        << function_cell(*r, names.function) << ' ' << truncate_right(library_name(*r), names.library)
        << '\n';
  }
}

void print_wall_view(std::ostream& out, bool by_total, const std::vector<const ReportRow*>& rows, size_t of,
                     size_t width) {
  const NameColumns names = name_columns(rows, kWallNumbersWidth, width);
  uint64_t max_ns = 0;
  for (const ReportRow* r : rows) max_ns = std::max(max_ns, r->total_wall_ns);
  const TimeColumn wall = time_column(max_ns, 9);
  out << "\nWall clock (on-CPU + off-CPU) by " << (by_total ? "total" : "self") << ", top " << rows.size()
      << " of " << of << " functions\n";
  out << pad_left("Self%", 6) << ' ' << pad_left("Total%", 6) << ' '
      << pad_left(std::string("Self ") + wall.unit, 9) << ' '
      << pad_left(std::string("Total ") + wall.unit, 9) << "  " << pad_right("Function", names.function)
      << ' ' << "Library\n";
  for (const ReportRow* r : rows) {
    out << pad_left(format_percent(r->self_wall_percent), 6) << ' '
        << pad_left(format_percent(r->total_wall_percent), 6) << ' '
        << pad_left(wall.cell(r->self_wall_ns), 9) << ' ' << pad_left(wall.cell(r->total_wall_ns), 9) << "  "
        << function_cell(*r, names.function) << ' ' << truncate_right(library_name(*r), names.library)
        << '\n';
  }
}

// The first `limit` rows (0 = all) by `sort`, without copying rows. The stable sort keeps the
// report's name order among equal keys.
// With `in_view_of`, rows with nothing in the sort's view (an off-CPU-only function in the CPU view)
// are left out and the number of the others is stored there.
std::vector<const ReportRow*> top_rows(const std::vector<ReportRow>& all, ReportSort sort, size_t limit,
                                       size_t* in_view_of = nullptr) {
  const bool wall = sort == ReportSort::kSelfWall || sort == ReportSort::kTotalWall;
  std::vector<const ReportRow*> rows;
  rows.reserve(all.size());
  for (const ReportRow& r : all) {
    if (in_view_of == nullptr || (wall ? r.total_wall_ns > 0 : r.total_samples > 0)) rows.push_back(&r);
  }
  if (in_view_of != nullptr) *in_view_of = rows.size();
  const ReportSort second = tie_breaker(sort);
  std::stable_sort(rows.begin(), rows.end(), [&](const ReportRow* a, const ReportRow* b) {
    const uint64_t ka = sort_key(*a, sort), kb = sort_key(*b, sort);
    if (ka != kb) return ka > kb;
    return sort_key(*a, second) > sort_key(*b, second);
  });
  if (limit != 0 && rows.size() > limit) rows.resize(limit);
  return rows;
}

// The position of the last top-level ", " in generic arguments: T itself may hold commas inside
// <>, (), or [].
size_t last_top_level_comma(std::string_view args) {
  int depth = 0;
  size_t found = std::string_view::npos;
  for (size_t i = 0; i < args.size(); ++i) {
    const char c = args[i];
    if (c == '<' || c == '(' || c == '[') ++depth;
    if (c == '>' || c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) found = i;
  }
  return found;
}

struct MoveKey {
  bool copy;
  std::string type;
  uint64_t size;
  bool operator<(const MoveKey& o) const {
    if (copy != o.copy) return copy < o.copy;
    if (size != o.size) return size < o.size;
    return type < o.type;
  }
};

// Attributes each stack's on-CPU samples to its innermost compiler_move/compiler_copy frame, if any.
void compute_moves(const Profile& p, const std::vector<Tally>& per_stack, Report& report) {
  // Parsed once per function: most profiles have no move frames at all.
  std::vector<int32_t> key_of_func(p.funcs.size(), -1);
  std::vector<MoveKey> keys;
  std::map<MoveKey, int32_t> key_index;
  for (uint32_t f = 0; f < p.funcs.size(); ++f) {
    const std::string& name = p.func_name(f);
    if (name.find("compiler_") == std::string::npos) continue;
    auto move = parse_compiler_move(name);
    if (!move) continue;
    MoveKey key{move->copy, std::move(move->type), move->size};
    auto [it, inserted] = key_index.try_emplace(key, static_cast<int32_t>(keys.size()));
    if (inserted) keys.push_back(key);
    key_of_func[f] = it->second;
  }
  if (keys.empty()) return;

  struct Acc {
    Tally tally;
    std::map<uint32_t, Tally> callers;  // by func
  };
  std::vector<Acc> acc(keys.size());
  for (uint32_t s = 0; s < per_stack.size(); ++s) {
    const Tally& tally = per_stack[s];
    if (tally.on == 0) continue;
    uint32_t node = s;
    while (node != kNoIndex && key_of_func[p.frames[p.stacks[node].frame].func] < 0)
      node = p.stacks[node].prefix;
    if (node == kNoIndex) continue;
    const Frame& move_frame = p.frames[p.stacks[node].frame];
    // The caller is the real (depth 0) function at the move's address; a move frame that is itself
    // a real frame (no inline information) is credited to the frame that called it.
    uint32_t caller = p.stacks[node].prefix;
    if (move_frame.inline_depth != 0) {
      while (caller != kNoIndex && p.frames[p.stacks[caller].frame].inline_depth != 0) {
        caller = p.stacks[caller].prefix;
      }
    }
    Tally on = tally;
    on.off = 0;
    on.off_ns = 0;
    Acc& a = acc[static_cast<size_t>(key_of_func[move_frame.func])];
    a.tally += on;
    if (caller != kNoIndex) a.callers[p.frames[p.stacks[caller].frame].func] += on;
    report.move_samples += on.on;
    report.move_cpu_ns += on.cpu_ns;
  }

  for (size_t k = 0; k < keys.size(); ++k) {
    if (acc[k].tally.on == 0) continue;
    MoveRow row;
    row.move = CompilerMoveName{keys[k].copy, keys[k].type, keys[k].size};
    row.samples = acc[k].tally.on;
    row.cpu_ns = acc[k].tally.cpu_ns;
    row.percent = percent(row.samples, report.totals.samples);
    for (const auto& [func, t] : acc[k].callers) row.callers.push_back({p.func_name(func), t.on, t.cpu_ns});
    std::sort(row.callers.begin(), row.callers.end(), [](const MoveCaller& a, const MoveCaller& b) {
      return a.samples != b.samples ? a.samples > b.samples : a.name < b.name;
    });
    report.moves.push_back(std::move(row));
  }
  std::sort(report.moves.begin(), report.moves.end(), [](const MoveRow& a, const MoveRow& b) {
    if (a.samples != b.samples) return a.samples > b.samples;
    if (a.move.size != b.move.size) return a.move.size > b.move.size;
    if (a.move.type != b.move.type) return a.move.type < b.move.type;
    return a.move.copy < b.move.copy;
  });
}

// At most this many callers are printed under each move in the text report.
constexpr size_t kMoveCallersShown = 5;

void print_moves_view(const Report& report, std::ostream& out, size_t limit, size_t width) {
  const size_t shown = limit != 0 ? std::min(limit, report.moves.size()) : report.moves.size();
  uint64_t max_ns = 0;
  for (const MoveRow& m : report.moves) max_ns = std::max(max_ns, m.cpu_ns);
  const TimeColumn cpu = time_column(max_ns, 9);
  out << '\n'
      << truncate_right("Compiler moves and copies (Rust -Zannotate-moves): " +
                            format_percent(percent(report.move_samples, report.totals.samples)) +
                            " of samples, top " + std::to_string(shown) + " of " +
                            std::to_string(report.moves.size()),
                        width)
      << '\n';
  // 6 1 8 1 9 2 4 1 7 2 = 41 columns of numbers; the type or caller gets the other 39.
  const size_t name_width = width - 41;
  out << pad_left("Self%", 6) << ' ' << pad_left("Samples", 8) << ' '
      << pad_left(std::string("CPU ") + cpu.unit, 9) << "  " << pad_right("Kind", 4) << ' '
      << pad_left("Bytes", 7) << "  "
      << "Type, then callers\n";
  for (size_t i = 0; i < shown; ++i) {
    const MoveRow& m = report.moves[i];
    out << pad_left(format_percent(m.percent), 6) << ' ' << pad_left(std::to_string(m.samples), 8) << ' '
        << pad_left(cpu.cell(m.cpu_ns), 9) << "  " << pad_right(m.move.copy ? "copy" : "move", 4) << ' '
        << pad_left(m.move.size != 0 ? std::to_string(m.move.size) : std::string("?"), 7) << "  "
        << truncate_right(m.move.type, name_width) << '\n';
    for (size_t c = 0; c < m.callers.size() && c < kMoveCallersShown; ++c) {
      const MoveCaller& caller = m.callers[c];
      out << pad_left(format_percent(percent(caller.samples, report.totals.samples)), 6) << ' '
          << pad_left(std::to_string(caller.samples), 8) << ' ' << pad_left(cpu.cell(caller.cpu_ns), 9)
          << std::string(2 + 4 + 1 + 7 + 2, ' ') << "  " << truncate_right(caller.name, name_width - 2)
          << '\n';
    }
    if (m.callers.size() > kMoveCallersShown) {
      out << std::string(6 + 1 + 8 + 1 + 9 + 2 + 4 + 1 + 7 + 2 + 2, ' ') << "and "
          << (m.callers.size() - kMoveCallersShown) << " more callers\n";
    }
  }
}

void compute_mip(const Profile& p, const ReportOptions& options, Report& report) {
  if (p.mip_counts.empty()) return;
  std::vector<const ReportRow*> sampled(p.funcs.size(), nullptr);
  for (const ReportRow& r : report.rows) sampled[r.func] = &r;
  std::map<uint32_t, MipRow> by_func;  // several processes of one binary add up
  for (const MipCount& c : p.mip_counts) {
    if (options.pid != 0 && c.pid != options.pid) continue;
    if (c.func >= p.funcs.size())
      throw std::runtime_error("a MIP count names a function that does not exist");
    auto [it, inserted] = by_func.try_emplace(c.func);
    MipRow& row = it->second;
    if (inserted) {
      row.func = c.func;
      row.name = p.func_name(c.func);
      const uint32_t lib = p.funcs[c.func].lib;
      if (lib != kNoIndex && lib < p.libs.size()) row.library = p.libs[lib].name;
      row.counts_calls = c.counts_calls;
    }
    row.calls += c.calls;
    if (c.first_call != 0 && (row.first_call == 0 || c.first_call < row.first_call))
      row.first_call = c.first_call;
    row.blocks_covered = std::max(row.blocks_covered, c.blocks_covered);
    row.blocks_total = std::max(row.blocks_total, c.blocks_total);
    row.counts_calls = row.counts_calls && c.counts_calls;
  }
  for (auto& [func, row] : by_func) {
    if (const ReportRow* r = sampled[func]; r != nullptr) {
      row.self_samples = r->self_samples;
      row.self_cpu_ns = r->self_cpu_ns;
    }
    if (row.counts_calls && row.calls != 0) row.cpu_per_call_ns = row.self_cpu_ns / row.calls;
    (row.calls != 0 ? report.mip_called : report.mip_never_called).push_back(std::move(row));
  }
  std::stable_sort(report.mip_called.begin(), report.mip_called.end(), [](const MipRow& a, const MipRow& b) {
    const uint64_t fa = a.first_call != 0 ? a.first_call : UINT64_MAX;
    const uint64_t fb = b.first_call != 0 ? b.first_call : UINT64_MAX;
    if (fa != fb) return fa < fb;
    if (a.calls != b.calls) return a.calls > b.calls;
    return a.name < b.name;
  });
  std::stable_sort(report.mip_never_called.begin(), report.mip_never_called.end(),
                   [](const MipRow& a, const MipRow& b) { return a.name < b.name; });
}

// Nanoseconds with a unit that keeps three significant digits in at most 9 columns.
std::string format_per_call(uint64_t ns) {
  if (ns < 1000) return std::to_string(ns) + " ns";
  if (ns < 1000000) return format("%.2f us", double(ns) / 1e3);
  if (ns < 1000000000) return format("%.2f ms", double(ns) / 1e6);
  return format("%.2f s", double(ns) / 1e9);
}

void print_mip_view(const Report& report, std::ostream& out, size_t limit, size_t width) {
  const size_t called = report.mip_called.size();
  const size_t never = report.mip_never_called.size();
  const size_t shown = limit != 0 ? std::min(limit, called) : called;
  const bool counted = std::all_of(report.mip_called.begin(), report.mip_called.end(),
                                   [](const MipRow& r) { return r.counts_calls; });
  out << '\n'
      << truncate_right("Calls (MIP): " + std::to_string(called) + " of " + std::to_string(called + never) +
                            " functions called" + (counted ? "" : " (coverage only: calls are 0/1)") +
                            ", top " + std::to_string(shown) + " by first call",
                        width)
      << '\n';
  uint64_t max_ns = 0;
  for (const MipRow& r : report.mip_called) max_ns = std::max(max_ns, r.self_cpu_ns);
  const TimeColumn cpu = time_column(max_ns, 9);
  // 11 1 6 1 9 1 9 1 9 2 = 50 columns of numbers; the function gets the other 30.
  const size_t name_width = width - 50;
  out << pad_left("Calls", 11) << ' ' << pad_left("First", 6) << ' ' << pad_left("Blocks", 9) << ' '
      << pad_left(std::string("Self ") + cpu.unit, 9) << ' ' << pad_left("CPU/call", 9) << "  Function\n";
  for (size_t i = 0; i < shown; ++i) {
    const MipRow& r = report.mip_called[i];
    const std::string blocks =
        r.blocks_total != 0 ? std::to_string(r.blocks_covered) + "/" + std::to_string(r.blocks_total) : "-";
    out << pad_left(std::to_string(r.calls), 11) << ' '
        << pad_left(r.first_call != 0 ? std::to_string(r.first_call) : std::string("-"), 6) << ' '
        << pad_left(blocks, 9) << ' ' << pad_left(r.self_samples != 0 ? cpu.cell(r.self_cpu_ns) : "-", 9)
        << ' ' << pad_left(r.cpu_per_call_ns != 0 ? format_per_call(r.cpu_per_call_ns) : std::string("-"), 9)
        << "  " << truncate_right(r.name, name_width) << '\n';
  }
  if (never == 0) return;
  // As many names as fit on one line after the count.
  std::string line = "Never called: " + std::to_string(never) + (never == 1 ? " function: " : " functions: ");
  size_t listed = 0;
  for (const MipRow& r : report.mip_never_called) {
    const std::string more =
        listed + 1 < never ? ", and " + std::to_string(never - listed - 1) + " more" : "";
    const std::string piece = (listed != 0 ? ", " : "") + r.name;
    if (code_points(line) + code_points(piece) + code_points(more) > width && listed != 0) break;
    line += piece;
    ++listed;
  }
  if (listed < never) line += ", and " + std::to_string(never - listed) + " more";
  out << truncate_right(line, width) << '\n';
}

// The runtime's latency per function (merged over processes unless one is chosen), beside the
// counts of the rows compute_calls made.
void add_call_latency(const Profile& p, const ReportOptions& options, Report& report) {
  report.calls_counter = p.meta.recording.call_counter;
  const RecordingInfo& rec = p.meta.recording;
  // The call graph as recorded: "cfi", "fp", "dwarf", or "auto:<the one chosen>".
  const std::string walk = rec.call_graph.substr(rec.call_graph.find(':') + 1);
  report.calls_stacks_through_hook =
      rec.call_counter == "runtime" && rec.backend == "bpf" && (walk == "cfi" || walk == "fp");
  if (p.call_latency.empty()) return;
  std::map<uint32_t, CallLatency> by_func;
  for (const CallLatency& l : p.call_latency) {
    if (options.pid != 0 && l.pid != options.pid) continue;
    if (l.func >= p.funcs.size())
      throw std::runtime_error("a call latency names a function that does not exist");
    CallLatency& m = by_func[l.func];
    m.func = l.func;
    m.calls += l.calls;
    m.sum_ns += l.sum_ns;
    m.outer_ns += l.outer_ns;
    m.max_ns = std::max(m.max_ns, l.max_ns);
    m.histogram.merge(l.histogram);
  }
  const uint64_t duration = report.totals.duration_ns;
  for (CallRow& row : report.calls) {
    auto it = by_func.find(row.func);
    if (it == by_func.end() || it->second.calls == 0) continue;
    const CallLatency& l = it->second;
    row.timed_calls = l.calls;
    row.avg_ns = l.sum_ns / l.calls;
    row.p95_ns = l.histogram.quantile_ns(0.95, l.max_ns);
    row.max_ns = l.max_ns;
    row.latency_total_ns = l.outer_ns;
    row.latency_wall_percent = duration != 0 ? 100.0 * double(l.outer_ns) / double(duration) : 0;
    report.calls_timed = true;
  }
}

void compute_calls(const Profile& p, const ReportOptions& options, Report& report) {
  if (p.call_edges.empty()) return;
  std::vector<const ReportRow*> sampled(p.funcs.size(), nullptr);
  for (const ReportRow& r : report.rows) sampled[r.func] = &r;
  std::map<uint32_t, CallRow> by_func;
  std::map<uint32_t, std::map<uint32_t, uint64_t>> callers, callees;  // func -> peer -> calls
  const auto name_of = [&](uint32_t f) {
    return f == kNoIndex ? std::string("(unknown caller)") : p.func_name(f);
  };
  for (const CallEdge& e : p.call_edges) {
    if (options.pid != 0 && e.pid != options.pid) continue;
    if (e.callee_func >= p.funcs.size() || (e.caller_func != kNoIndex && e.caller_func >= p.funcs.size()))
      throw std::runtime_error("a call edge names a function that does not exist");
    auto [it, inserted] = by_func.try_emplace(e.callee_func);
    if (inserted) {
      it->second.func = e.callee_func;
      it->second.name = p.func_name(e.callee_func);
      const uint32_t lib = p.funcs[e.callee_func].lib;
      if (lib != kNoIndex && lib < p.libs.size()) it->second.library = p.libs[lib].name;
    }
    it->second.calls += e.count;
    report.calls_total += e.count;
    callers[e.callee_func][e.caller_func] += e.count;
    if (e.caller_func != kNoIndex) callees[e.caller_func][e.callee_func] += e.count;
  }
  const auto peers = [&](const std::map<uint32_t, uint64_t>& m) {
    std::vector<CallPeer> out;
    for (const auto& [f, n] : m) out.push_back(CallPeer{name_of(f), n});
    std::stable_sort(out.begin(), out.end(),
                     [](const CallPeer& a, const CallPeer& b) { return a.calls > b.calls; });
    return out;
  };
  for (auto& [func, row] : by_func) {
    if (const ReportRow* r = sampled[func]; r != nullptr) {
      row.self_cpu_ns = r->self_cpu_ns;
      row.total_cpu_ns = r->total_cpu_ns;
      row.total_wall_ns = r->total_wall_ns;
    }
    if (row.calls != 0) row.cpu_per_call_ns = row.total_cpu_ns / row.calls;
    row.callers = peers(callers[func]);
    if (auto c = callees.find(func); c != callees.end()) row.callees = peers(c->second);
    report.calls.push_back(std::move(row));
  }
  add_call_latency(p, options, report);
  std::stable_sort(report.calls.begin(), report.calls.end(), [](const CallRow& a, const CallRow& b) {
    if (a.calls != b.calls) return a.calls > b.calls;
    return a.name < b.name;
  });
}

// At most this many callers are printed under each function of the calls table.
constexpr size_t kCallersShown = 3;

std::string calls_title(const Report& report) {
  if (report.calls_counter == "runtime") return "Calls (exact, counted and timed by hpd's runtime): ";
  if (report.calls_counter == "uprobes") return "Calls (mcount/__fentry__, exact, counted by uprobes): ";
  return "Calls (mcount/__fentry__, exact): ";
}

// With the runtime's latency: per function the calls, the latency of a call (average, 95th
// percentile), the time inside it (outermost calls) and its share of the recording's duration, then
// its sampled CPU: self, and inclusive when the stack walks put back the return addresses the
// runtime's hook replaced (else sampled stacks stop at the hook and inclusive CPU would be short by
// the callees' share, so it is not shown).
void print_timed_calls_view(const Report& report, std::ostream& out, size_t shown, size_t width) {
  const bool inclusive = report.calls_stacks_through_hook;
  uint64_t max_ns = 0;
  for (const CallRow& r : report.calls)
    max_ns = std::max({max_ns, r.latency_total_ns, r.self_cpu_ns, inclusive ? r.total_cpu_ns : 0});
  const TimeColumn t = time_column(max_ns, 9);
  // 11 1 9 1 9 1 9 1 6 1 9 2 = 60 columns of numbers (70 with the inclusive CPU); the function gets
  // the rest, at least 20.
  const size_t numbers = inclusive ? 70 : 60;
  const size_t name_width = width > numbers + 20 ? width - numbers : 20;
  out << pad_left("Calls", 11) << ' ' << pad_left("Avg", 9) << ' ' << pad_left("P95", 9) << ' '
      << pad_left(std::string("Total ") + t.unit, 9) << ' ' << pad_left("%Wall", 6) << ' '
      << pad_left(std::string("Self ") + t.unit, 9) << ' ';
  if (inclusive) out << pad_left(std::string("CPU ") + t.unit, 9) << ' ';
  out << " Function\n";
  for (size_t i = 0; i < shown; ++i) {
    const CallRow& r = report.calls[i];
    const bool timed = r.timed_calls != 0;
    out << pad_left(std::to_string(r.calls), 11) << ' '
        << pad_left(timed ? format_per_call(r.avg_ns) : "-", 9) << ' '
        << pad_left(timed && r.p95_ns != 0 ? format_per_call(r.p95_ns) : "-", 9) << ' '
        << pad_left(timed ? t.cell(r.latency_total_ns) : "-", 9) << ' '
        << pad_left(timed ? format("%.1f", r.latency_wall_percent) : "-", 6) << ' '
        << pad_left(r.self_cpu_ns != 0 ? t.cell(r.self_cpu_ns) : "-", 9) << ' ';
    if (inclusive) out << pad_left(r.total_cpu_ns != 0 ? t.cell(r.total_cpu_ns) : "-", 9) << ' ';
    out << ' ' << truncate_right(r.name, name_width) << '\n';
    for (size_t c = 0; c < r.callers.size() && c < kCallersShown; ++c) {
      out << pad_left(std::to_string(r.callers[c].calls), 11) << std::string(numbers - 11, ' ') << "<- "
          << truncate_right(r.callers[c].name, name_width - 3) << '\n';
    }
    if (r.callers.size() > kCallersShown)
      out << std::string(numbers, ' ') << "and " << (r.callers.size() - kCallersShown) << " more callers\n";
  }
  out << "Avg, P95: one call, entry to return, callees included. Total: inside the outermost calls, all\n"
         "threads (%Wall: of the recording). Self: sampled CPU in the function itself.";
  if (inclusive) {
    out << " CPU: sampled CPU\n"
           "in the function and its callees (the stack walks put back the return addresses the runtime's\n"
           "hook replaced; see Complete stacks).\n";
  } else {
    out << " Stacks\n"
           "ended at the runtime's return hook (this backend or call graph does not unwind through it), so\n"
           "inclusive CPU is not known here.\n";
  }
}

void print_calls_view(const Report& report, std::ostream& out, size_t limit, size_t width) {
  const size_t shown = limit != 0 ? std::min(limit, report.calls.size()) : report.calls.size();
  out << '\n'
      << truncate_right(calls_title(report) + std::to_string(report.calls_total) + " calls of " +
                            std::to_string(report.calls.size()) + " functions, top " + std::to_string(shown) +
                            " by calls",
                        width)
      << '\n';
  if (report.calls_timed) {
    print_timed_calls_view(report, out, shown, width);
    return;
  }
  uint64_t max_ns = 0;
  for (const CallRow& r : report.calls) max_ns = std::max({max_ns, r.total_cpu_ns, r.total_wall_ns});
  const TimeColumn t = time_column(max_ns, 9);
  // 11 1 9 1 9 1 9 1 9 2 = 53 columns of numbers; the function gets the other 27.
  const size_t name_width = width - 53;
  out << pad_left("Calls", 11) << ' ' << pad_left(std::string("Self ") + t.unit, 9) << ' '
      << pad_left(std::string("Total ") + t.unit, 9) << ' ' << pad_left(std::string("Wall ") + t.unit, 9)
      << ' ' << pad_left("CPU/call", 9) << "  Function, then callers\n";
  for (size_t i = 0; i < shown; ++i) {
    const CallRow& r = report.calls[i];
    const bool sampled = r.total_wall_ns != 0;
    out << pad_left(std::to_string(r.calls), 11) << ' ' << pad_left(sampled ? t.cell(r.self_cpu_ns) : "-", 9)
        << ' ' << pad_left(sampled ? t.cell(r.total_cpu_ns) : "-", 9) << ' '
        << pad_left(sampled ? t.cell(r.total_wall_ns) : "-", 9) << ' '
        << pad_left(r.cpu_per_call_ns != 0 ? format_per_call(r.cpu_per_call_ns) : std::string("-"), 9) << "  "
        << truncate_right(r.name, name_width) << '\n';
    for (size_t c = 0; c < r.callers.size() && c < kCallersShown; ++c) {
      out << pad_left(std::to_string(r.callers[c].calls), 11) << std::string(53 - 11, ' ') << "  <- "
          << truncate_right(r.callers[c].name, name_width - 5) << '\n';
    }
    if (r.callers.size() > kCallersShown)
      out << std::string(53 + 2, ' ') << "and " << (r.callers.size() - kCallersShown) << " more callers\n";
  }
}

}  // namespace

bool report_selects_thread(const Thread& t, const ReportOptions& options) {
  return (options.pid == 0 || t.pid == options.pid) && (options.tid == 0 || t.tid == options.tid) &&
         thread_name_matches(t.name, options.thread);
}

std::optional<CompilerMoveName> parse_compiler_move(std::string_view name) {
  std::string_view rest;
  bool copy = false;
  for (const std::string_view marker :
       {std::string_view("compiler_move"), std::string_view("compiler_copy")}) {
    const size_t at = name.find(marker);
    if (at == std::string_view::npos) continue;
    // Either the whole name, or the item core::profiling::<marker> (a path ending right there).
    const std::string_view before = name.substr(0, at);
    if (!before.empty() && before != "core::profiling::") continue;
    copy = marker == "compiler_copy";
    rest = name.substr(at + marker.size());
    CompilerMoveName out;
    out.copy = copy;
    out.type = "?";
    if (rest.empty()) return out;  // legacy mangling: no generic arguments in the name
    if (rest.substr(0, 2) == "::") rest.remove_prefix(2);
    if (rest.size() < 2 || rest.front() != '<' || rest.back() != '>') return std::nullopt;
    const std::string_view args = rest.substr(1, rest.size() - 2);
    const size_t comma = last_top_level_comma(args);
    if (comma == std::string_view::npos) {
      out.type = std::string(args);
      return out;
    }
    out.type = std::string(args.substr(0, comma));
    std::string_view size = args.substr(comma + 1);
    while (!size.empty() && size.front() == ' ') size.remove_prefix(1);
    uint64_t value = 0;
    size_t digits = 0;
    while (digits < size.size() && std::isdigit(static_cast<unsigned char>(size[digits])) &&
           value < (1ull << 59)) {
      value = value * 10 + static_cast<uint64_t>(size[digits] - '0');
      ++digits;
    }
    // A type suffix (16usize) may follow the digits; anything else is not a size.
    if (digits == 0 || (digits < size.size() && size.substr(digits) != "usize")) {
      out.type = std::string(args);
      return out;
    }
    out.size = value;
    return out;
  }
  return std::nullopt;
}

Report compute_report(const Profile& p, const ReportOptions& options) {
  check_indices(p);
  Report report;
  ReportTotals& totals = report.totals;
  const RecordingInfo& info = p.meta.recording;
  totals.interval_ns = info.interval_ns != 0    ? info.interval_ns
                       : info.frequency_hz != 0 ? 1000000000ull / info.frequency_hz
                                                : kDefaultIntervalNs;
  totals.lost = p.meta.lost;
  totals.missing_modules = p.meta.missing_modules;

  // Recording length; without an end time, up to the last sample (as the Firefox writer does).
  if (info.end_mono_ns > info.start_mono_ns) {
    totals.duration_ns = info.end_mono_ns - info.start_mono_ns;
  } else {
    uint64_t last = info.start_mono_ns;
    for (const Thread& t : p.threads) {
      for (const Sample& s : t.samples) last = std::max(last, s.time_ns);
    }
    totals.duration_ns = last - info.start_mono_ns;
  }

  // Samples are summed per unique stack first: stacks are far fewer than samples.
  std::vector<Tally> per_stack(p.stacks.size());
  std::set<int32_t> pids;
  for (const Thread& t : p.threads) {
    if (!selected(t, options)) continue;
    ++totals.threads;
    pids.insert(t.pid);
    if (lost_total(t.lost) != 0) totals.lost_by_thread.push_back(ThreadLoss{t.pid, t.tid, t.name, t.lost});
    ThreadStacks thread_stacks;
    thread_stacks.pid = t.pid;
    thread_stacks.tid = t.tid;
    thread_stacks.name = t.name;
    for (const Sample& s : t.samples) {
      if (s.stack != kNoIndex && s.stack >= p.stacks.size()) {
        throw std::runtime_error("invalid profile: a sample of thread " + std::to_string(t.tid) +
                                 " refers to a missing stack");
      }
      Tally one;
      if (s.kind == SampleKind::kOffCpu) {
        one.off = 1;
        one.off_ns = s.off_cpu_ns;
        ++totals.off_cpu_samples;
        totals.off_cpu_ns += s.off_cpu_ns;
        totals.off_stacks_complete += s.stack_end == StackEnd::kComplete;
        totals.off_stacks_truncated += s.stack_end == StackEnd::kTruncated;
        totals.off_stacks_failed += s.stack_end == StackEnd::kFailed;
        thread_stacks.off_complete += s.stack_end == StackEnd::kComplete;
        thread_stacks.off_truncated += s.stack_end == StackEnd::kTruncated;
        thread_stacks.off_failed += s.stack_end == StackEnd::kFailed;
      } else {
        one.on = 1;
        one.cpu_ns = s.cpu_delta_ns;
        ++totals.samples;
        totals.cpu_ns += s.cpu_delta_ns;
        if (s.stack == kNoIndex) ++totals.samples_without_stack;
        totals.stacks_complete += s.stack_end == StackEnd::kComplete;
        totals.stacks_truncated += s.stack_end == StackEnd::kTruncated;
        totals.stacks_failed += s.stack_end == StackEnd::kFailed;
        thread_stacks.on_complete += s.stack_end == StackEnd::kComplete;
        thread_stacks.on_truncated += s.stack_end == StackEnd::kTruncated;
        thread_stacks.on_failed += s.stack_end == StackEnd::kFailed;
      }
      if (s.stack != kNoIndex) per_stack[s.stack] += one;
    }
    if (thread_stacks.on_complete + thread_stacks.on_truncated + thread_stacks.on_failed +
            thread_stacks.off_complete + thread_stacks.off_truncated + thread_stacks.off_failed >
        0)
      totals.stacks_by_thread.push_back(thread_stacks);
  }
  totals.processes = pids.size();
  const auto stack_samples = [](const ThreadStacks& s) {
    return s.on_complete + s.on_truncated + s.on_failed + s.off_complete + s.off_truncated + s.off_failed;
  };
  std::stable_sort(
      totals.stacks_by_thread.begin(), totals.stacks_by_thread.end(),
      [&](const ThreadStacks& a, const ThreadStacks& b) { return stack_samples(a) > stack_samples(b); });
  totals.wall_ns = totals.samples * totals.interval_ns + totals.off_cpu_ns;
  std::stable_sort(totals.lost_by_thread.begin(), totals.lost_by_thread.end(),
                   [](const ThreadLoss& a, const ThreadLoss& b) {
                     const uint64_t la = lost_total(a.lost), lb = lost_total(b.lost);
                     if (la != lb) return la > lb;
                     return a.pid != b.pid ? a.pid < b.pid : a.tid < b.tid;
                   });

  std::vector<Tally> self(p.funcs.size());
  std::vector<Tally> total(p.funcs.size());
  std::vector<uint32_t> seen_in(p.funcs.size(), kNoIndex);  // last stack that counted the func
  for (uint32_t s = 0; s < per_stack.size(); ++s) {
    const Tally& tally = per_stack[s];
    if (tally.empty()) continue;
    // The stack node is the deepest frame, the innermost inline level at the sampled address.
    self[p.frames[p.stacks[s].frame].func] += tally;
    for (uint32_t node = s; node != kNoIndex; node = p.stacks[node].prefix) {
      const uint32_t func = p.frames[p.stacks[node].frame].func;
      if (seen_in[func] == s) continue;  // recursion: once per sample
      seen_in[func] = s;
      total[func] += tally;
    }
  }

  for (uint32_t f = 0; f < p.funcs.size(); ++f) {
    if (total[f].empty()) continue;
    ReportRow row;
    row.func = f;
    row.name = p.func_name(f);
    const uint32_t lib = p.funcs[f].lib;
    if (lib != kNoIndex) row.library = p.libs[lib].name;
    row.self_samples = self[f].on;
    row.total_samples = total[f].on;
    row.self_percent = percent(row.self_samples, totals.samples);
    row.total_percent = percent(row.total_samples, totals.samples);
    row.self_cpu_ns = self[f].cpu_ns;
    row.total_cpu_ns = total[f].cpu_ns;
    row.self_off_cpu_samples = self[f].off;
    row.total_off_cpu_samples = total[f].off;
    row.self_off_cpu_ns = self[f].off_ns;
    row.total_off_cpu_ns = total[f].off_ns;
    row.self_wall_ns = self[f].on * totals.interval_ns + self[f].off_ns;
    row.total_wall_ns = total[f].on * totals.interval_ns + total[f].off_ns;
    row.self_wall_percent = percent(row.self_wall_ns, totals.wall_ns);
    row.total_wall_percent = percent(row.total_wall_ns, totals.wall_ns);
    report.rows.push_back(std::move(row));
  }
  sort_rows(report.rows, options.sort);
  compute_moves(p, per_stack, report);
  compute_mip(p, options, report);
  compute_calls(p, options, report);
  // Calls per function for --sort calls: exact counts where there are any, else MIP's.
  std::map<uint32_t, uint64_t> calls_of;
  for (const CallRow& c : report.calls) calls_of[c.func] = c.calls;
  if (calls_of.empty()) {
    for (const MipRow& m : report.mip_called) {
      if (m.counts_calls) calls_of[m.func] = m.calls;
    }
  }
  for (ReportRow& row : report.rows) {
    if (auto it = calls_of.find(row.func); it != calls_of.end()) row.calls = it->second;
  }
  if (options.sort == ReportSort::kCalls) sort_rows(report.rows, options.sort);
  if (!options.function.empty()) {
    std::regex pattern;
    try {
      pattern = std::regex(options.function, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw std::runtime_error("--function " + options.function +
                               " is not a valid regular expression: " + e.what());
    }
    std::erase_if(report.rows, [&](const ReportRow& r) { return !std::regex_search(r.name, pattern); });
  }
  return report;
}

void print_report(const Report& report, std::ostream& out, const ReportOptions& options) {
  // Narrower than 60 columns the numbers leave no room for names: lines then wrap instead.
  const size_t width = options.width == 0 ? kUnlimitedWidth : std::max<size_t>(options.width, 60);
  print_header(report, out, width);
  if (report.rows.empty()) {
    out << "\nNo samples with a stack"
        << (options.pid != 0 || options.tid != 0 ? " in the selected threads" : "") << ".\n";
    if (!report.mip_called.empty() || !report.mip_never_called.empty())
      print_mip_view(report, out, options.limit, width);
    if (!report.calls.empty()) print_calls_view(report, out, options.limit, width);
    return;
  }
  // Each view is ordered by its own self or total column, as options.sort chooses.
  const bool by_total = options.sort == ReportSort::kTotal || options.sort == ReportSort::kTotalWall;
  // The CPU view follows --sort where it has the column (cpu, calls); the wall view its self/total.
  ReportSort cpu_sort = by_total ? ReportSort::kTotal : ReportSort::kSelf;
  if (options.sort == ReportSort::kSelfCpu || options.sort == ReportSort::kCalls) cpu_sort = options.sort;
  size_t of = 0;
  if (report.totals.samples > 0) {
    const auto rows = top_rows(report.rows, cpu_sort, options.limit, &of);
    print_cpu_view(out, cpu_sort, rows, of, width);
  }
  if (report.totals.off_cpu_samples > 0) {
    const auto rows =
        top_rows(report.rows, by_total ? ReportSort::kTotalWall : ReportSort::kSelfWall, options.limit, &of);
    print_wall_view(out, by_total, rows, of, width);
  }
  if (report.move_samples > 0) print_moves_view(report, out, options.limit, width);
  if (!report.mip_called.empty() || !report.mip_never_called.empty())
    print_mip_view(report, out, options.limit, width);
  if (!report.calls.empty()) print_calls_view(report, out, options.limit, width);
}

void print_report_json(const Report& report, std::ostream& out, const ReportOptions& options) {
  using nlohmann::ordered_json;
  const ReportTotals& t = report.totals;
  ordered_json doc;
  doc["sort"] = sort_name(options.sort);
  doc["limit"] = options.limit;
  doc["filter"] = {
      {"pid", options.pid}, {"tid", options.tid}, {"thread", options.thread}, {"function", options.function}};
  ordered_json lost_by_thread = ordered_json::array();
  for (const ThreadLoss& l : t.lost_by_thread) {
    lost_by_thread.push_back({{"pid", l.pid},
                              {"tid", l.tid},
                              {"name", l.name},
                              {"lost_records", l.lost.lost_records},
                              {"throttle_events", l.lost.throttle_events},
                              {"stack_failures", l.lost.stack_failures},
                              {"truncated_stacks", l.lost.truncated_stacks}});
  }
  ordered_json stacks_by_thread = ordered_json::array();
  for (const ThreadStacks& s : t.stacks_by_thread) {
    stacks_by_thread.push_back(
        {{"pid", s.pid},
         {"tid", s.tid},
         {"name", s.name},
         {"on_cpu", {{"complete", s.on_complete}, {"truncated", s.on_truncated}, {"failed", s.on_failed}}},
         {"off_cpu",
          {{"complete", s.off_complete}, {"truncated", s.off_truncated}, {"failed", s.off_failed}}}});
  }
  doc["totals"] = {
      {"samples", t.samples},
      {"samples_without_stack", t.samples_without_stack},
      {"off_cpu_samples", t.off_cpu_samples},
      {"threads", t.threads},
      {"processes", t.processes},
      {"duration_ns", t.duration_ns},
      {"interval_ns", t.interval_ns},
      {"cpu_ns", t.cpu_ns},
      {"off_cpu_ns", t.off_cpu_ns},
      {"wall_ns", t.wall_ns},
      {"lost",
       {{"lost_records", t.lost.lost_records},
        {"throttle_events", t.lost.throttle_events},
        {"stack_failures", t.lost.stack_failures},
        {"truncated_stacks", t.lost.truncated_stacks}}},
      {"lost_by_thread", lost_by_thread},
      {"stacks",
       {{"complete", t.stacks_complete},
        {"truncated", t.stacks_truncated},
        {"failed", t.stacks_failed},
        {"off_cpu",
         {{"complete", t.off_stacks_complete},
          {"truncated", t.off_stacks_truncated},
          {"failed", t.off_stacks_failed}}},
        {"by_thread", stacks_by_thread}}},
      {"missing_modules", t.missing_modules},
      {"functions", report.rows.size()},
  };
  ordered_json functions = ordered_json::array();
  for (const ReportRow* r : top_rows(report.rows, options.sort, options.limit)) {
    functions.push_back({
        {"name", r->name},
        {"library", r->library},
        {"self_samples", r->self_samples},
        {"total_samples", r->total_samples},
        {"self_percent", r->self_percent},
        {"total_percent", r->total_percent},
        {"self_cpu_ns", r->self_cpu_ns},
        {"total_cpu_ns", r->total_cpu_ns},
        {"self_off_cpu_samples", r->self_off_cpu_samples},
        {"total_off_cpu_samples", r->total_off_cpu_samples},
        {"self_off_cpu_ns", r->self_off_cpu_ns},
        {"total_off_cpu_ns", r->total_off_cpu_ns},
        {"self_wall_ns", r->self_wall_ns},
        {"total_wall_ns", r->total_wall_ns},
        {"self_wall_percent", r->self_wall_percent},
        {"total_wall_percent", r->total_wall_percent},
        {"calls", r->calls},
    });
  }
  doc["functions"] = std::move(functions);
  if (!report.moves.empty()) {
    ordered_json moves = ordered_json::array();
    const size_t shown =
        options.limit != 0 ? std::min(options.limit, report.moves.size()) : report.moves.size();
    for (size_t i = 0; i < shown; ++i) {
      const MoveRow& m = report.moves[i];
      ordered_json callers = ordered_json::array();
      for (const MoveCaller& c : m.callers) {
        callers.push_back({{"name", c.name}, {"samples", c.samples}, {"cpu_ns", c.cpu_ns}});
      }
      moves.push_back({{"kind", m.move.copy ? "copy" : "move"},
                       {"type", m.move.type},
                       {"size", m.move.size},
                       {"samples", m.samples},
                       {"cpu_ns", m.cpu_ns},
                       {"percent", m.percent},
                       {"callers", std::move(callers)}});
    }
    doc["compiler_moves"] = {{"samples", report.move_samples},
                             {"cpu_ns", report.move_cpu_ns},
                             {"percent", percent(report.move_samples, t.samples)},
                             {"types", report.moves.size()},
                             {"moves", std::move(moves)}};
  }
  if (!report.mip_called.empty() || !report.mip_never_called.empty()) {
    const auto limited = [&](size_t n) { return options.limit != 0 ? std::min(options.limit, n) : n; };
    ordered_json called = ordered_json::array();
    for (size_t i = 0; i < limited(report.mip_called.size()); ++i) {
      const MipRow& r = report.mip_called[i];
      called.push_back({{"name", r.name},
                        {"library", r.library},
                        {"calls", r.calls},
                        {"counts_calls", r.counts_calls},
                        {"first_call", r.first_call},
                        {"blocks_covered", r.blocks_covered},
                        {"blocks_total", r.blocks_total},
                        {"self_samples", r.self_samples},
                        {"self_cpu_ns", r.self_cpu_ns},
                        {"cpu_per_call_ns", r.cpu_per_call_ns}});
    }
    ordered_json never = ordered_json::array();
    for (size_t i = 0; i < limited(report.mip_never_called.size()); ++i) {
      const MipRow& r = report.mip_never_called[i];
      never.push_back({{"name", r.name}, {"library", r.library}, {"blocks_total", r.blocks_total}});
    }
    doc["mip"] = {{"functions_called", report.mip_called.size()},
                  {"functions_never_called", report.mip_never_called.size()},
                  {"functions", std::move(called)},
                  {"never_called", std::move(never)}};
  }
  if (!report.calls.empty()) {
    const size_t shown =
        options.limit != 0 ? std::min(options.limit, report.calls.size()) : report.calls.size();
    const auto peers = [](const std::vector<CallPeer>& v) {
      ordered_json out = ordered_json::array();
      for (const CallPeer& c : v) out.push_back({{"name", c.name}, {"calls", c.calls}});
      return out;
    };
    ordered_json functions_called = ordered_json::array();
    for (size_t i = 0; i < shown; ++i) {
      const CallRow& r = report.calls[i];
      functions_called.push_back({{"name", r.name},
                                  {"library", r.library},
                                  {"calls", r.calls},
                                  {"self_cpu_ns", r.self_cpu_ns},
                                  {"total_cpu_ns", r.total_cpu_ns},
                                  {"total_wall_ns", r.total_wall_ns},
                                  {"cpu_per_call_ns", r.cpu_per_call_ns},
                                  {"callers", peers(r.callers)},
                                  {"callees", peers(r.callees)}});
      if (r.timed_calls != 0) {
        functions_called.back()["latency"] = {{"timed_calls", r.timed_calls},
                                              {"avg_ns", r.avg_ns},
                                              {"p95_ns", r.p95_ns},
                                              {"max_ns", r.max_ns},
                                              {"total_ns", r.latency_total_ns},
                                              {"wall_percent", r.latency_wall_percent}};
      }
    }
    doc["calls"] = {{"total", report.calls_total},
                    {"counter", report.calls_counter},
                    {"stacks_through_hook", report.calls_stacks_through_hook},
                    {"functions", report.calls.size()},
                    {"rows", std::move(functions_called)}};
  }
  // Names are not guaranteed to be UTF-8; replace bad bytes instead of throwing.
  out << doc.dump(2, ' ', false, ordered_json::error_handler_t::replace) << '\n';
}

}  // namespace hpd
