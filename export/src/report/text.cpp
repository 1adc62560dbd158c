// The report as text for a terminal: the header, the CPU and wall-clock views, moves, MIP counts
// and exact calls, each cut to the terminal's width.
#include <algorithm>
#include <cstdio>
#include <ostream>
#include <string>
#include <string_view>

#include "hpd/export/report.h"
#include "names.h"
#include "rows.h"

namespace hpd {

using namespace report_rows;

namespace {

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

// A function's name shortened to `width` (template arguments elided first; see names.h).
std::string short_name(std::string_view name, size_t width) {
  return width >= kUnlimitedWidth ? std::string(name) : report_names::shorten(name, width);
}

// The function cells of a table: each name shortened to the column, two functions never alike.
std::vector<std::string> function_cells(const std::vector<const ReportRow*>& rows, size_t width) {
  std::vector<std::string> names;
  names.reserve(rows.size());
  for (const ReportRow* r : rows) names.push_back(r->name);
  if (width < kUnlimitedWidth) names = report_names::shorten_distinct(names, width);
  for (std::string& n : names) n = pad_right(std::move(n), width);
  return names;
}

std::string library_name(const ReportRow& row) {
  return row.library.empty() ? "?" : row.library;
}

// Widths of the function and library columns of a table whose numbers take `numbers` columns.
// Limited: the library gets kLibraryWidth (plus a quarter of the columns beyond 80), at most a
// third of the names' columns, or its longest name if shorter; the function the rest. Unlimited: each as wide
// as its longest entry.
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
  const size_t names_width = width > numbers + 3 ? width - numbers - 3 : 0;
  const size_t library_cap =
      std::min(kLibraryWidth + (width > 80 ? (width - 80) / 4 : 0), std::max<size_t>(names_width / 3, 7));
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
  if (t.unsampled_start_known)
    line("First sample " + format_duration(t.unsampled_start_ns) +
         " after the request (not sampled before it)");
  // A sentence, wrapped at the width (a word longer than the width is cut by line()).
  const auto note = [&](const std::string& sentence) {
    std::string text = "Note: " + sentence;
    while (width != 0 && text.size() > width) {
      size_t cut = text.rfind(' ', width);
      if (cut == std::string::npos || cut <= 2) cut = width;
      line(text.substr(0, cut));
      text = "  " + text.substr(cut + (cut < text.size() && text[cut] == ' ' ? 1 : 0));
    }
    line(text);
  };
  if (!t.host_steal_note.empty()) note(t.host_steal_note);
  if (!t.not_taken_note.empty()) note(t.not_taken_note);
  line("CPU time " + format_duration(t.cpu_ns) + ", interval " + format_ms(t.interval_ns) + ", off-CPU " +
       format_duration(t.off_cpu_ns + t.wait_cpu_ns) + " in " +
       plural(t.off_cpu_samples + t.wait_cpu_samples, "off-CPU sample", "off-CPU samples"));
  if (t.off_cpu_samples + t.wait_cpu_samples > 0)
    line("  blocked " + format_duration(t.off_cpu_ns) + " (" +
         plural(t.off_cpu_samples, "sample", "samples") + "), waiting for a CPU " +
         format_duration(t.wait_cpu_ns) + " (" + plural(t.wait_cpu_samples, "sample", "samples") + ")");
  if (t.off_cpu_without_stack_ns > 0)
    line("  " + format_duration(t.off_cpu_without_stack_ns) +
         " of it without a stack, in no function's row (perf_event's switch records carry none)");
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
  // By time as well: one blocked interval may stand for seconds and another for microseconds.
  if (const uint64_t known_ns = t.off_stacks_complete_ns + t.off_stacks_truncated_ns + t.off_stacks_failed_ns;
      !off.empty() && known_ns != 0)
    line("                 " +
         format("%.1f%% of off-CPU time", 100.0 * double(t.off_stacks_complete_ns) / double(known_ns)));
  constexpr size_t kShownStackThreads = 8;
  if (t.stacks_by_thread.size() > 1 || !t.unsampled_threads.empty()) {
    for (size_t i = 0; i < t.stacks_by_thread.size() && i < kShownStackThreads; ++i) {
      const ThreadStacks& s = t.stacks_by_thread[i];
      const auto pct = [](uint64_t c, uint64_t tr, uint64_t f) {
        const uint64_t n = c + tr + f;
        return n == 0 ? std::string("-")
                      : format("%.1f%%", 100.0 * double(c) / double(n)) + " of " + std::to_string(n);
      };
      const uint64_t off_ns = s.off_complete_ns + s.off_truncated_ns + s.off_failed_ns;
      line("  tid " + std::to_string(s.tid) + " " + truncate_right(s.name, 16) + ": on-CPU " +
           pct(s.on_complete, s.on_truncated, s.on_failed) + ", off-CPU " +
           pct(s.off_complete, s.off_truncated, s.off_failed) +
           (off_ns == 0
                ? std::string()
                : format(" (%.1f%% of its time)", 100.0 * double(s.off_complete_ns) / double(off_ns))));
    }
    if (t.stacks_by_thread.size() > kShownStackThreads)
      line("  and " + std::to_string(t.stacks_by_thread.size() - kShownStackThreads) + " more threads");
    for (size_t i = 0; i < t.unsampled_threads.size() && i < kShownStackThreads; ++i) {
      const UnsampledThread& u = t.unsampled_threads[i];
      line("  tid " + std::to_string(u.tid) + " " + truncate_right(u.name, 16) + ": no samples" +
           (u.why.empty() ? std::string() : " (" + u.why + ")"));
    }
    if (t.unsampled_threads.size() > kShownStackThreads)
      line("  and " + std::to_string(t.unsampled_threads.size() - kShownStackThreads) +
           " more threads without samples");
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
  const std::vector<std::string> cells = function_cells(rows, names.function);
  for (size_t i = 0; i < rows.size(); ++i) {
    const ReportRow* r = rows[i];
    out << pad_left(format_percent(r->self_percent), 6) << ' '
        << pad_left(format_percent(r->total_percent), 6) << ' '
        << pad_left(std::to_string(r->self_samples), 8) << ' ' << pad_left(cpu.cell(r->self_cpu_ns), 9)
        << (calls ? pad_left(r->calls != 0 ? std::to_string(r->calls) : "-", 12) : "") << "  " << cells[i]
        << ' ' << truncate_right(library_name(*r), names.library) << '\n';
  }
}

// With samples waiting for a CPU, two more columns split the off-CPU part of the view's own column
// (self or total): blocked, and waiting for a CPU (runnable; the leaf is where it was preempted).
void print_wall_view(std::ostream& out, bool by_total, bool waits, const std::vector<const ReportRow*>& rows,
                     size_t of, size_t width) {
  const NameColumns names = name_columns(rows, kWallNumbersWidth + (waits ? 20 : 0), width);
  uint64_t max_ns = 0;
  for (const ReportRow* r : rows) max_ns = std::max(max_ns, r->total_wall_ns);
  const TimeColumn wall = time_column(max_ns, 9);
  out << "\nWall clock (on-CPU + off-CPU) by " << (by_total ? "total" : "self") << ", top " << rows.size()
      << " of " << of << " functions\n";
  if (waits) {
    out << truncate_right(std::string("Blocked: ") + (by_total ? "total" : "self") +
                              " off-CPU time blocked. Wait CPU: runnable, waiting for a CPU;",
                          width)
        << '\n'
        << truncate_right("its kernel leaf is where it was preempted, or blocked until woken: not a cause.",
                          width)
        << '\n';
  }
  out << pad_left("Self%", 6) << ' ' << pad_left("Total%", 6) << ' '
      << pad_left(std::string("Self ") + wall.unit, 9) << ' '
      << pad_left(std::string("Total ") + wall.unit, 9);
  if (waits) out << ' ' << pad_left("Blocked", 9) << ' ' << pad_left("Wait CPU", 9);
  out << "  " << pad_right("Function", names.function) << ' ' << "Library\n";
  const std::vector<std::string> cells = function_cells(rows, names.function);
  for (size_t i = 0; i < rows.size(); ++i) {
    const ReportRow* r = rows[i];
    out << pad_left(format_percent(r->self_wall_percent), 6) << ' '
        << pad_left(format_percent(r->total_wall_percent), 6) << ' '
        << pad_left(wall.cell(r->self_wall_ns), 9) << ' ' << pad_left(wall.cell(r->total_wall_ns), 9);
    if (waits)
      out << ' ' << pad_left(wall.cell(by_total ? r->total_off_cpu_ns : r->self_off_cpu_ns), 9) << ' '
          << pad_left(wall.cell(by_total ? r->total_wait_cpu_ns : r->self_wait_cpu_ns), 9);
    out << "  " << cells[i] << ' ' << truncate_right(library_name(*r), names.library) << '\n';
  }
}

// Where each thread's time went: CPU, blocked, waiting for a CPU; most wall time first.
void print_thread_times(const ReportTotals& t, std::ostream& out, size_t width) {
  constexpr size_t kShownThreads = 16;
  uint64_t max_ns = 0;
  for (const ThreadTime& tt : t.time_by_thread) max_ns = std::max(max_ns, tt.wall_ns);
  const TimeColumn time = time_column(max_ns, 9);
  out << "\nTime by thread (CPU: the samples' CPU time; Blocked and Wait CPU: off-CPU time)\n";
  out << pad_left(std::string("CPU ") + time.unit, 9) << ' ' << pad_left(std::string("Blocked"), 9) << ' '
      << pad_left("Wait CPU", 9) << "  Thread\n";
  for (size_t i = 0; i < t.time_by_thread.size() && i < kShownThreads; ++i) {
    const ThreadTime& tt = t.time_by_thread[i];
    const std::string row = pad_left(time.cell(tt.cpu_ns), 9) + ' ' + pad_left(time.cell(tt.off_cpu_ns), 9) +
                            ' ' + pad_left(time.cell(tt.wait_cpu_ns), 9) + "  tid " + std::to_string(tt.tid) +
                            ' ' + tt.name + " (pid " + std::to_string(tt.pid) + ")";
    out << truncate_right(row, width) << '\n';
  }
  if (t.time_by_thread.size() > kShownThreads)
    out << "  and " << t.time_by_thread.size() - kShownThreads << " more threads\n";
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
        << short_name(m.move.type, name_width) << '\n';
    for (size_t c = 0; c < m.callers.size() && c < kMoveCallersShown; ++c) {
      const MoveCaller& caller = m.callers[c];
      out << pad_left(format_percent(percent(caller.samples, report.totals.samples)), 6) << ' '
          << pad_left(std::to_string(caller.samples), 8) << ' ' << pad_left(cpu.cell(caller.cpu_ns), 9)
          << std::string(2 + 4 + 1 + 7 + 2, ' ') << "  " << short_name(caller.name, name_width - 2) << '\n';
    }
    if (m.callers.size() > kMoveCallersShown) {
      out << std::string(6 + 1 + 8 + 1 + 9 + 2 + 4 + 1 + 7 + 2 + 2, ' ') << "and "
          << (m.callers.size() - kMoveCallersShown) << " more callers\n";
    }
  }
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
        << "  " << short_name(r.name, name_width) << '\n';
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

// At most this many callers are printed under each function of the calls table.
constexpr size_t kCallersShown = 3;

std::string calls_title(const Report& report) {
  if (report.calls_counter == "runtime") return "Calls (exact, counted and timed by hpd's runtime): ";
  if (report.calls_counter == "uprobes")
    return report.calls_timed ? "Calls (mcount/__fentry__, exact, counted and timed by uprobes): "
                              : "Calls (mcount/__fentry__, exact, counted by uprobes; not timed): ";
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
    out << ' ' << short_name(r.name, name_width) << '\n';
    for (size_t c = 0; c < r.callers.size() && c < kCallersShown; ++c) {
      out << pad_left(std::to_string(r.callers[c].calls), 11) << std::string(numbers - 11, ' ') << "<- "
          << short_name(r.callers[c].name, name_width - 3) << '\n';
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
  } else if (report.calls_counter == "uprobes") {
    out << " Inclusive\n"
           "CPU: in the functions table (the calls table shows it beside the runtime's latency only).\n";
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
        << short_name(r.name, name_width) << '\n';
    for (size_t c = 0; c < r.callers.size() && c < kCallersShown; ++c) {
      out << pad_left(std::to_string(r.callers[c].calls), 11) << std::string(53 - 11, ' ') << "  <- "
          << short_name(r.callers[c].name, name_width - 5) << '\n';
    }
    if (r.callers.size() > kCallersShown)
      out << std::string(53 + 2, ' ') << "and " << (r.callers.size() - kCallersShown) << " more callers\n";
  }
}

std::string format_bytes_estimate(double bytes) {
  if (bytes >= 1024.0 * 1024.0) return format("%.1f MiB", bytes / (1024.0 * 1024.0));
  if (bytes >= 1024.0) return format("%.1f KiB", bytes / 1024.0);
  return format("%.0f B", bytes);
}

std::string alloc_function_cell(const AllocRow& r) {
  return r.library.empty() ? r.name : r.name + " (" + r.library + ")";
}

// Sampled allocations: the functions by bytes allocated (their callees included), then by bytes still
// live at the end. Every figure is an estimate weighted for the sampling.
void print_alloc_view(const Report& report, std::ostream& out, size_t limit, size_t width) {
  out << '\n'
      << truncate_right("Allocations (sampled by bytes, one per " +
                            format_bytes_estimate(double(report.alloc_mean_bytes)) +
                            " allocated on average): ~" + format_bytes_estimate(report.alloc_bytes) +
                            " in ~" + format("%.0f", report.alloc_objects) + " allocations, ~" +
                            format_bytes_estimate(report.live_bytes) + " live at the end (" +
                            std::to_string(report.alloc_samples) + " samples, " +
                            std::to_string(report.alloc_frees_matched) + " of them freed)",
                        width)
      << '\n';
  if (report.allocations.empty()) return;
  const auto mib = [](double b) { return format("%.2f", b / (1024.0 * 1024.0)); };
  // 11 1 11 1 11 1 11 2 = 49 columns of numbers.
  const size_t name_width = width > 49 ? width - 49 : 20;
  size_t shown = limit != 0 ? std::min(limit, report.allocations.size()) : report.allocations.size();
  out << "By bytes allocated:\n"
      << pad_left("Total MiB", 11) << ' ' << pad_left("Self MiB", 11) << ' ' << pad_left("Allocs", 11) << ' '
      << pad_left("Live MiB", 11) << "  Function\n";
  for (size_t i = 0; i < shown; ++i) {
    const AllocRow& r = report.allocations[i];
    out << pad_left(mib(r.total_bytes), 11) << ' ' << pad_left(mib(r.self_bytes), 11) << ' '
        << pad_left(format("%.0f", r.total_objects), 11) << ' ' << pad_left(mib(r.live_total_bytes), 11)
        << "  " << short_name(alloc_function_cell(r), name_width) << '\n';
  }
  std::vector<const AllocRow*> live;
  for (const AllocRow& r : report.allocations)
    if (r.live_total_bytes > 0) live.push_back(&r);
  if (live.empty()) return;
  std::stable_sort(live.begin(), live.end(), [](const AllocRow* a, const AllocRow* b) {
    return a->live_total_bytes > b->live_total_bytes;
  });
  shown = limit != 0 ? std::min(limit, live.size()) : live.size();
  out << "Live at the end (not freed while recording), by bytes:\n"
      << pad_left("Live MiB", 11) << ' ' << pad_left("Self MiB", 11) << ' ' << pad_left("Objects", 11) << ' '
      << pad_left("Alloc MiB", 11) << "  Function\n";
  for (size_t i = 0; i < shown; ++i) {
    const AllocRow& r = *live[i];
    out << pad_left(mib(r.live_total_bytes), 11) << ' ' << pad_left(mib(r.live_self_bytes), 11) << ' '
        << pad_left(format("%.0f", r.live_total_objects), 11) << ' ' << pad_left(mib(r.total_bytes), 11)
        << "  " << short_name(alloc_function_cell(r), name_width) << '\n';
  }
}

}  // namespace

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
    if (report.alloc_mean_bytes != 0) print_alloc_view(report, out, options.limit, width);
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
  if (report.totals.off_cpu_samples + report.totals.wait_cpu_samples > 0) {
    const auto rows =
        top_rows(report.rows, by_total ? ReportSort::kTotalWall : ReportSort::kSelfWall, options.limit, &of);
    print_wall_view(out, by_total, report.totals.wait_cpu_samples > 0, rows, of, width);
    print_thread_times(report.totals, out, width);
  }
  if (report.move_samples > 0) print_moves_view(report, out, options.limit, width);
  if (!report.mip_called.empty() || !report.mip_never_called.empty())
    print_mip_view(report, out, options.limit, width);
  if (!report.calls.empty()) print_calls_view(report, out, options.limit, width);
  if (report.alloc_mean_bytes != 0) print_alloc_view(report, out, options.limit, width);
}

}  // namespace hpd
