// Report views of one function or two profiles: callers/callees trees (perf report -G / --children),
// per-line samples (perf annotate) and a per-function comparison (perf diff); text or JSON.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "hpd/export/error.h"
#include "hpd/export/report.h"
#include "hpd/model/profile.h"
#include "hpd/model/validate.h"

namespace hpd {

// The functions `name` designates: those with exactly this name, else those whose name the
// ECMAScript regular expression `name` matches, provided they all have one name. Throws
// ExportError naming the candidates when none or several different names match.
std::vector<uint32_t> find_functions(const Profile& profile, const std::string& name);

enum class CallTreeDirection : uint8_t { kCallers, kCallees };

// A node counts the samples whose stack passes through its path from the root. Callees: the root is
// the function's outermost frame in each stack and children are what it called, down to the leaf.
// Callers: the root is its innermost frame and children are its callers, up to the thread's root.
// Each sample counts once, so a node's children add up to at most its own count.
struct CallTreeNode {
  uint32_t func = 0;
  // The edge between this node and its parent is a tail call (Stack::tail_call): the caller's call
  // there called another function, which jumped on to the callee. Marked edges are nodes of their
  // own, apart from the same function reached by ordinary calls. The text shows "[tail call]".
  bool tail_call = false;
  std::string name;
  std::string library;
  uint64_t samples = 0;       // on-CPU samples
  uint64_t self_samples = 0;  // on-CPU samples whose path ends here (callees: the leaf; callers: the root)
  uint64_t cpu_ns = 0;
  uint64_t off_cpu_ns = 0;             // blocked and waiting for a CPU together
  uint64_t wall_ns = 0;                // samples x interval + off-CPU time
  std::vector<CallTreeNode> children;  // most samples first, then by name
};

struct CallTreeView {
  CallTreeDirection direction = CallTreeDirection::kCallees;
  CallTreeNode root;
  uint64_t all_samples = 0;  // on-CPU samples of the selected threads (the flat report's total)
  uint64_t interval_ns = 0;
};

CallTreeView compute_call_tree(const Profile& profile, const ReportOptions& options,
                               const std::string& function, CallTreeDirection direction);
// Text: one line per node with its share of the root and of all samples; nodes under
// kCallTreeMinPercent of the root are left out (and counted in a last line); options.limit = depth.
inline constexpr double kCallTreeMinPercent = 0.5;
void print_call_tree(const CallTreeView& view, std::ostream& out, const ReportOptions& options);
// JSON: the whole tree, nothing left out.
void print_call_tree_json(const CallTreeView& view, std::ostream& out);

// Samples of one function per source line: self = samples executing in it at that line (its frame
// is the leaf), total = samples with it on the stack, counted at the line of its innermost frame
// (the call in progress when it is not the leaf).
struct AnnotatedLine {
  uint32_t line = 0;
  uint64_t self_samples = 0;
  uint64_t total_samples = 0;
  uint64_t self_cpu_ns = 0;
  std::string text;  // the source line, when the file was found
};
// Self samples per instruction address (lib-relative), for a function without line information.
struct AnnotatedAddress {
  int64_t address = -1;
  uint64_t self_samples = 0;
  std::string instruction;  // filled by the caller that can disassemble; "" = not decoded
};
struct Annotation {
  std::string function;
  std::string file;  // "" = no line information
  std::string library;
  uint64_t self_samples = 0;
  uint64_t total_samples = 0;
  uint64_t unknown_line_samples = 0;  // self samples whose frame has no line
  bool source_found = false;
  std::string source_error;                 // why the file could not be read
  std::vector<AnnotatedLine> lines;         // with source: a window of the file around the sampled lines
  std::vector<AnnotatedAddress> addresses;  // sampled addresses, ascending
  // Samples of the function on lines of other source files than `file` (a file its body #includes,
  // as glibc's __vfprintf_internal does, or another function of the same name): not in `lines`,
  // whose line numbers are those of `file`.
  struct OtherFile {
    std::string file;
    uint64_t self_samples = 0;
    uint64_t total_samples = 0;
  };
  std::vector<OtherFile> other_files;
};
Annotation annotate_function(const Profile& profile, const ReportOptions& options,
                             const std::string& function);
// `width`: the terminal's columns, to which the function's name is shortened; 0 = whole names.
void print_annotation(const Annotation& annotation, std::ostream& out, size_t width = 0);
void print_annotation_json(const Annotation& annotation, std::ostream& out);

// Per function: the change from profile A to profile B. A function of A and one of B are the same
// when they have the same name, the same source file (by path, else by file name when that pairs
// them one to one) and paired modules (see DiffModulePair). Two functions of one profile are one row
// only when they have the same name, source file and module file name.
struct DiffRow {
  std::string name;
  std::string file;                  // the function's source file; "" = unknown
  std::string library;               // its module's file name in A (in B when only B has it)
  std::string library_b;             // its module's file name in B when that differs from `library`, else ""
  uint64_t self_cpu_ns[2] = {0, 0};  // [A, B]
  uint64_t total_cpu_ns[2] = {0, 0};
  uint64_t self_wall_ns[2] = {0, 0};
  uint64_t total_wall_ns[2] = {0, 0};
  int64_t self_cpu_change_ns() const { return int64_t(self_cpu_ns[1]) - int64_t(self_cpu_ns[0]); }
  int64_t total_cpu_change_ns() const { return int64_t(total_cpu_ns[1]) - int64_t(total_cpu_ns[0]); }
  int64_t self_wall_change_ns() const { return int64_t(self_wall_ns[1]) - int64_t(self_wall_ns[0]); }
  int64_t total_wall_change_ns() const { return int64_t(total_wall_ns[1]) - int64_t(total_wall_ns[0]); }
};
// How a module of A was taken for one of B, in that order: the same file name ("name"); each the
// only program left unpaired in its profile, a module named as a process's command is ("program");
// each the only one left of its name without the version after ".so" ("unversioned_name":
// libfoo.so.1.2 and libfoo.so.1.3). Modules left unpaired have their functions in one side only.
struct DiffModulePair {
  std::string a, b;            // file names
  std::string a_path, b_path;  // paths in the recorded processes; "" = unknown
  std::string by;              // "name", "program", "unversioned_name"
};
// Per function, the change of its sampled allocations (both recorded with --alloc), paired as DiffRow
// (by the source file's path only); estimates in bytes, as the report's AllocRow.
struct DiffAllocRow {
  std::string name;
  std::string file;
  std::string library;
  std::string library_b;
  double self_bytes[2] = {0, 0};  // [A, B]
  double total_bytes[2] = {0, 0};
  double live_total_bytes[2] = {0, 0};  // still live at the end
  double total_change() const { return total_bytes[1] - total_bytes[0]; }
  double live_change() const { return live_total_bytes[1] - live_total_bytes[0]; }
};
struct Diff {
  ReportTotals totals[2];
  std::vector<DiffRow> rows;  // by the size of the self CPU change, then of the total CPU change
  // Memory: compared when both have sampled allocations (alloc_mean_bytes both nonzero).
  bool memory = false;
  uint64_t alloc_mean_bytes[2] = {0, 0};
  double alloc_bytes[2] = {0, 0};
  double live_bytes[2] = {0, 0};
  std::vector<DiffAllocRow> allocations;  // by the size of the allocated bytes' change, then the live
  // The pairs of modules of different paths or names (same-path pairs are not listed).
  std::vector<DiffModulePair> modules;
};
Diff diff_profiles(const Profile& a, const Profile& b, const ReportOptions& options);
void print_diff(const Diff& diff, std::ostream& out, const ReportOptions& options);
void print_diff_json(const Diff& diff, std::ostream& out, const ReportOptions& options);

}  // namespace hpd
