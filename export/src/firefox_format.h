// Names shared by the Firefox writer and reader: categories, the off-CPU marker, meta.extra labels.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hpd/model/profile.h"

namespace hpd::firefox {

struct CategoryStyle {
  const char* name;
  const char* color;
  std::span<const char* const> subcategories;
};

// Where a sample was when it was taken, as a subcategory: on the CPU (the profiler's "Other", index 0,
// which is also what a call node of mixed subcategories gets), blocked, or runnable and waiting for a
// CPU. The Idle, User and Kernel categories all have these three.
inline constexpr const char* kOffCpuSubcategories[] = {"Other", "Blocked", "Waiting for CPU"};
inline constexpr uint32_t kBlockedSubcategory = 1;
inline constexpr uint32_t kWaitingSubcategory = 2;
inline constexpr const char* kOtherSubcategory[] = {"Other"};

// Indexed by hpd::Category. The first grey category is the profiler's default (the colour of a call
// node whose stacks have different categories). "Idle" is the name the profiler treats specially: its
// "Include idle samples" switch drops every sample whose leaf frame is in it (and draws none of them
// in the CPU graph). Every off-CPU sample (blocked, or waiting for a CPU) ends in a leaf frame of the
// writer's own, "[blocked]" or "[waiting for CPU]", in Idle with that subcategory; the frames of its
// stack keep the category their function has on the CPU (User or Kernel), with the subcategory saying
// where the thread was, so that no call node a CPU sample passes through mixes categories (which would
// make it grey). "Waiting for CPU" is the category of the waiting markers (purple in the marker chart);
// older hpd files also put all the frames of off-CPU samples in Idle or Waiting for CPU (the reader reads
// both layouts).
inline constexpr CategoryStyle kCategories[kCategoryCount] = {
    {"Other", "grey", kOtherSubcategory},
    {"Idle", "transparent", kOffCpuSubcategories},
    {"User", "yellow", kOffCpuSubcategories},
    {"Kernel", "orange", kOffCpuSubcategories},
    {"Waiting for CPU", "purple", kOtherSubcategory}};

// The leaf frames' function names of off-CPU samples (see kCategories).
inline constexpr const char* kBlockedLeafName = "[blocked]";
inline constexpr const char* kWaitingLeafName = "[waiting for CPU]";

// Gecko format version written to meta.version; the profiler only displays it (samply writes 24).
inline constexpr int kGeckoVersion = 24;

// Off-CPU samples carry an interval marker of this schema whose data holds the exact off-CPU time
// and the index of the sample it belongs to: the samples table itself has no place for either.
inline constexpr const char* kOffCpuSchema = "HpdOffCpu";
inline constexpr const char* kOffCpuMarkerName = "Off-CPU";
inline constexpr const char* kOffCpuNsField = "offCpuNs";
// hpd's own samples column: how each sample's stack ended (StackEnd as a number). The Firefox Profiler
// ignores columns it does not know; the reader restores Sample::stack_end from it.
inline constexpr const char* kStackEndColumn = "hpdStackEnd";
inline constexpr const char* kOffCpuSampleField = "sample";
// Samples waiting for a CPU (runnable, preempted) carry a marker of their own schema, with the same
// fields as the off-CPU one.
inline constexpr const char* kWaitCpuSchema = "HpdWaitCpu";
inline constexpr const char* kWaitCpuMarkerName = "Waiting for CPU";

// MIP call counts: one instant marker per function on its process's main thread, at the snapshot's
// time, named by the function. "funcIndex" (hidden) lets the reader restore the exact function.
inline constexpr const char* kMipSchema = "MipCalls";
inline constexpr const char* kMipFunctionField = "function";
inline constexpr const char* kMipModuleField = "module";
inline constexpr const char* kMipCallsField = "calls";
inline constexpr const char* kMipFirstCallField = "firstCall";
inline constexpr const char* kMipBlocksField = "blocks";  // "covered/total", or "" without coverage
inline constexpr const char* kMipFuncField = "funcIndex";
inline constexpr const char* kMipCountsCallsField = "countsCalls";  // 1 = exact counts, 0 = coverage

// Exact call counts (hpctl record --calls): one extra thread per process, after the real ones, whose
// samples are caller -> callee stacks (one frame each) weighted by the count, so that the Profiler's
// call tree of that track shows the counts (inverted: per callee, its callers). The thread field
// marks it for the reader, which turns it back into Profile::call_edges instead of samples. The tid
// is a string so it never equals a real thread's tid (the profiler allows numbers or strings).
inline constexpr const char* kCallsThreadField = "hpdCalls";
inline constexpr const char* kCallsThreadName = "calls (exact)";
inline std::string calls_thread_tid(int32_t pid) {
  return std::to_string(pid) + "-calls";
}

// Call latency (hpd's runtime): a per-function summary, one interval marker per timed function on its
// process's calls track, spanning the recording from the process's start (the runtime keeps sums and a
// histogram, not the time of each call), named by the function. The visible fields are durations in
// the profiler's 'duration' format (milliseconds, printed in the closest unit); the hidden ones carry
// the exact figures in ns, the sums and the histogram ("scale bucket:count,bucket:count...", ticks
// scaled by ns_per_tick) so that the reader restores them (files before the durations showed the ns).
inline constexpr const char* kLatencySchema = "HpdCallLatency";
inline constexpr const char* kLatencyFunctionField = "function";
inline constexpr const char* kLatencyCallsField = "calls";
inline constexpr const char* kLatencyAvgMsField = "avg";
inline constexpr const char* kLatencyP95MsField = "p95";
inline constexpr const char* kLatencyMaxMsField = "max";
inline constexpr const char* kLatencyTotalMsField = "total";
inline constexpr const char* kLatencyAvgField = "avgNs";
inline constexpr const char* kLatencyP95Field = "p95Ns";
inline constexpr const char* kLatencyMaxField = "maxNs";
inline constexpr const char* kLatencyTotalField = "totalNs";
inline constexpr const char* kLatencySumField = "sumNs";
inline constexpr const char* kLatencyHistogramField = "histogram";
inline constexpr const char* kLatencyFuncField = "funcIndex";

// Tail-call edges (Stack::tail_call): the stack table has no place for the kind of an edge, and a
// frame or a name of hpd's would split the call tree, so each thread carries one interval marker per
// (caller, callee) pair of functions it reached by a tail call, spanning the thread's life, named
// "caller → callee (tail call)": the functions, the thread's on-CPU samples through that edge and their
// share of its on-CPU samples, plus the hidden "stacks", the stack table rows whose edge from their
// prefix is such a tail call (its function's frame below the caller's), by which the reader restores
// exactly which edges were tail calls (not every edge between the two functions was one).
inline constexpr const char* kTailCallSchema = "HpdTailCall";
inline constexpr const char* kTailCallCallerField = "caller";
inline constexpr const char* kTailCallCalleeField = "callee";
inline constexpr const char* kTailCallSamplesField = "samples";
inline constexpr const char* kTailCallShareField = "share";
inline constexpr const char* kTailCallStacksField = "stacks";  // "row,row,...", ascending
inline constexpr const char* kTailCallNameSuffix = " (tail call)";
inline constexpr const char* kTailCallArrow = " \xE2\x86\x92 ";  // " → " in UTF-8

// hpd's marker schemas (meta.markerSchema entries), written by one function from these tables.
struct MarkerField {
  const char* key;
  const char* label;
  const char* format;
  bool hidden = false;  // carried for the reader, not shown in the profiler's tooltip or sidebar
};

struct MarkerSchema {
  const char* name;
  std::span<const char* const> display;
  const char* chart_label;  // nullptr: none (the marker is not drawn in the marker chart)
  const char* table_label;
  const char* tooltip_label;
  const char* description;
  std::span<const MarkerField> fields;
};

inline constexpr const char* kOffCpuDisplay[] = {"marker-chart", "marker-table"};
inline constexpr MarkerField kOffCpuFields[] = {
    {kOffCpuNsField, "Off-CPU time", "nanoseconds"},
    {kOffCpuSampleField, "Sample index", "integer", true},
};
inline constexpr MarkerSchema kOffCpuMarkerSchema{
    kOffCpuSchema,
    kOffCpuDisplay,
    "Off-CPU",
    "Off-CPU {marker.data.offCpuNs}",
    "Off-CPU",
    "The thread was blocked; its stack is the sample's, which ends in the [blocked] node (Idle: Blocked).",
    kOffCpuFields};
inline constexpr MarkerField kWaitCpuFields[] = {
    {kOffCpuNsField, "Waiting time", "nanoseconds"},
    {kOffCpuSampleField, "Sample index", "integer", true},
};
inline constexpr MarkerSchema kWaitCpuMarkerSchema{
    kWaitCpuSchema,
    kOffCpuDisplay,
    "Waiting for CPU",
    "Waiting for CPU {marker.data.offCpuNs}",
    "Waiting for CPU",
    "The thread was runnable but not running (preempted, or it yielded): it waited for a CPU. Its stack "
    "is where it was switched out, ending in the [waiting for CPU] node (Idle: Waiting for CPU).",
    kWaitCpuFields};

inline constexpr const char* kTableOnlyDisplay[] = {"marker-table"};
inline constexpr MarkerField kMipFields[] = {
    {kMipFunctionField, "Function", "unique-string"},
    {kMipModuleField, "Module", "file-path"},
    {kMipCallsField, "Calls", "integer"},
    {kMipFirstCallField, "First call", "integer"},
    {kMipBlocksField, "Blocks covered", "string"},
    {kMipFuncField, "Function index", "integer", true},
    {kMipCountsCallsField, "Exact counts", "integer", true},
};
inline constexpr MarkerSchema kMipMarkerSchema{
    kMipSchema,
    kTableOnlyDisplay,
    nullptr,
    "{marker.data.calls} calls, first call {marker.data.firstCall}, blocks {marker.data.blocks}",
    "{marker.data.calls} calls",
    "Exact call counts from the program's MIP (Machine IR Profile) instrumentation, read at the last "
    "snapshot before the process exited or the recording ended.",
    kMipFields};

inline constexpr MarkerField kLatencyFields[] = {
    {kLatencyFunctionField, "Function", "unique-string"},
    {kLatencyCallsField, "Calls timed", "integer"},
    {kLatencyAvgMsField, "Average", "duration"},
    {kLatencyP95MsField, "95th percentile", "duration"},
    {kLatencyMaxMsField, "Maximum", "duration"},
    {kLatencyTotalMsField, "Total", "duration"},
    {kLatencyAvgField, "Average (ns)", "integer", true},
    {kLatencyP95Field, "95th percentile (ns)", "integer", true},
    {kLatencyMaxField, "Maximum (ns)", "integer", true},
    {kLatencyTotalField, "Total (ns)", "integer", true},
    {kLatencySumField, "Sum of all calls (ns)", "integer", true},
    {kLatencyHistogramField, "Histogram", "string", true},
    {kLatencyFuncField, "Function index", "integer", true},
};
inline constexpr MarkerSchema kLatencyMarkerSchema{
    kLatencySchema,
    kOffCpuDisplay,  // the marker chart and the marker table
    "{marker.name}: {marker.data.calls} calls, avg {marker.data.avg}, p95 {marker.data.p95}, max "
    "{marker.data.max}",
    "{marker.data.calls} calls, avg {marker.data.avg}, p95 {marker.data.p95}, max {marker.data.max}, "
    "total {marker.data.total}",
    "{marker.name}: {marker.data.calls} calls, avg {marker.data.avg}",
    "Latency of each call (entry to return, callees included) timed by hpd's in-process runtime, summed "
    "over the whole recording (the marker spans it; the runtime does not keep the time of each call); "
    "total: time inside the outermost calls, summed over threads.",
    kLatencyFields};

inline constexpr MarkerField kTailCallFields[] = {
    {kTailCallCallerField, "Caller", "unique-string"},
    {kTailCallCalleeField, "Callee (tail-called)", "unique-string"},
    {kTailCallSamplesField, "On-CPU samples", "integer"},
    {kTailCallShareField, "Share of the thread's on-CPU samples", "percentage"},
    {kTailCallStacksField, "Stack indices", "string", true},
};
inline constexpr MarkerSchema kTailCallMarkerSchema{
    kTailCallSchema,
    kOffCpuDisplay,  // the marker chart and the marker table
    "{marker.name}: {marker.data.samples} samples ({marker.data.share})",
    "{marker.data.samples} on-CPU samples, {marker.data.share} of the thread's",
    "{marker.name}: {marker.data.samples} samples",
    "A tail call: the caller's call there called another function, which jumped (once or more) to the "
    "callee, leaving no frame of its own, so the call tree shows the callee under the caller. Known from "
    "the caller's DWARF call-site information; the marker spans the thread's life and counts the "
    "thread's on-CPU samples through that edge (the call tree does not mark it).",
    kTailCallFields};

// meta.extra sections (shown under "Show More" in the profile info panel) and their entry labels.
inline constexpr const char* kRecordingSection = "Recording";
inline constexpr const char* kTargetLabel = "Target";
inline constexpr const char* kBackendLabel = "Backend";
inline constexpr const char* kEventLabel = "Event";
inline constexpr const char* kCallGraphLabel = "Call graph";
inline constexpr const char* kFrequencyLabel = "Frequency (Hz)";
inline constexpr const char* kKernelFramesLabel = "Kernel stacks";
inline constexpr const char* kHostnameLabel = "Hostname";
inline constexpr const char* kKernelReleaseLabel = "Kernel release";
inline constexpr const char* kCallCounterLabel = "Calls counted by";  // only with --calls
// When the recording was asked for and when its first on-CPU sample came (CLOCK_MONOTONIC ns), and
// the time between them, which was not sampled; only when known.
inline constexpr const char* kRequestedLabel = "Requested at (monotonic ns)";
inline constexpr const char* kFirstSampleLabel = "First sample at (monotonic ns)";
inline constexpr const char* kUnsampledStartLabel = "Not sampled after the request";
// The CPU time the hypervisor took from the machine's CPUs during the recording (ns; only when known),
// and what it means for the samples, as a sentence (only when it is 0.5% of the CPU time or more).
inline constexpr const char* kHostStealLabel = "Taken by the hypervisor (ns of CPU time)";
inline constexpr const char* kHostStealNoteLabel = "Hypervisor steal";
// On-CPU samples the sampling timer did not take though the threads ran (samples_not_taken_note), as
// a sentence, only when they are 1% of the samples or more.
inline constexpr const char* kNotTakenNoteLabel = "Samples not taken";

inline constexpr const char* kLostSection = "Lost data";
inline constexpr const char* kLostRecordsLabel = "Lost records";
inline constexpr const char* kThrottleLabel = "Throttle events";
inline constexpr const char* kStackFailuresLabel = "Failed stack walks";
inline constexpr const char* kTruncatedLabel = "Truncated stacks";
inline constexpr const char* kMissingModulesLabel = "Missing modules";
inline constexpr const char* kMissingModulePrefix = "Missing module ";  // + 1-based number

// Per-thread losses: one meta.extra section, one integer entry per thread and nonzero count, labelled
// "Thread TID (pid PID) NAME: <one of the Lost data labels>". The profiler shows meta.extra in its
// info panel and has no per-thread place of its own for such numbers; the reader parses the label
// back (the name is only for people: the count's kind is what follows the last ": ").
inline constexpr const char* kLostByThreadSection = "Lost data by thread";
// How stacks ended (the hpdStackEnd column summed): for the whole profile and per thread, on-CPU and
// off-CPU apart, as "N% complete of M (T truncated, F failed)" strings; labels "All threads: on-CPU",
// "Thread TID (pid PID) NAME: off-CPU"...
inline constexpr const char* kStacksSection = "Complete stacks";

// Sampled allocations (hpctl record --alloc): how the sampling went, one meta.extra section written only
// when allocations were sampled; the reader restores ProfileMeta::alloc from it. The nativeAllocations
// tables carry each allocation's estimate (its size weighted for the sampling) as its weight, not its
// size: the reader recovers the size from the weight and this mean (allocations_extension.cpp).
inline constexpr const char* kAllocSection = "Allocations";
inline constexpr const char* kAllocMeanLabel = "Sampling mean (bytes)";
inline constexpr const char* kAllocProcessesLabel = "Process starts with the runtime";
inline constexpr const char* kAllocDroppedLabel = "Samples and frees dropped (log full)";
inline constexpr const char* kAllocUntrackedLabel = "Allocations whose free could not be watched";
inline constexpr const char* kAllocFreesUnmatchedLabel = "Frees logged without their allocation";
// hpd's own column of a nativeAllocations table, written only when one of its allocations is untracked
// (its free could not be watched: counted allocated, never live): 1 for those rows, else 0. The profiler
// ignores it (and shows such an allocation as retained).
inline constexpr const char* kAllocUntrackedColumn = "hpdUntracked";

inline std::string thread_loss_label(int32_t pid, int32_t tid, const std::string& name, const char* what) {
  return "Thread " + std::to_string(tid) + " (pid " + std::to_string(pid) + ") " + name + ": " + what;
}

struct ThreadLossLabel {
  int32_t pid = 0;
  int32_t tid = 0;
  std::string what;  // the Lost data label
};

// The inverse of thread_loss_label; false for any other label.
inline bool parse_thread_loss_label(std::string_view label, ThreadLossLabel& out) {
  const auto number = [&label](int32_t& value) {
    bool negative = false;
    if (!label.empty() && label.front() == '-') {
      negative = true;
      label.remove_prefix(1);
    }
    int64_t v = 0;
    size_t digits = 0;
    while (digits < label.size() && label[digits] >= '0' && label[digits] <= '9' && v <= INT32_MAX) {
      v = v * 10 + (label[digits] - '0');
      ++digits;
    }
    if (digits == 0 || v > INT32_MAX) return false;
    label.remove_prefix(digits);
    value = static_cast<int32_t>(negative ? -v : v);
    return true;
  };
  const auto skip = [&label](std::string_view text) {
    if (label.substr(0, text.size()) != text) return false;
    label.remove_prefix(text.size());
    return true;
  };
  if (!skip("Thread ") || !number(out.tid) || !skip(" (pid ") || !number(out.pid) || !skip(")")) return false;
  const size_t colon = label.rfind(": ");
  if (colon == std::string_view::npos) return false;
  out.what = std::string(label.substr(colon + 2));
  return true;
}

// meta.arguments is one string: the words are joined with POSIX shell quoting so that they can be
// split back exactly.
inline std::string join_shell_words(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& word : words) {
    if (!out.empty()) out.push_back(' ');
    bool plain = !word.empty();
    for (char c : word) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
      if (!ok) plain = false;
    }
    if (plain) {
      out += word;
      continue;
    }
    out.push_back('\'');
    for (char c : word) {
      if (c == '\'') {
        out += "'\\''";
      } else {
        out.push_back(c);
      }
    }
    out.push_back('\'');
  }
  return out;
}

// The inverse of join_shell_words (single quotes and backslash escapes; other text is literal).
inline std::vector<std::string> split_shell_words(std::string_view text) {
  std::vector<std::string> words;
  std::string current;
  bool in_word = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(current));
      current.clear();
      in_word = false;
    } else if (c == '\'') {
      in_word = true;
      const size_t end = text.find('\'', i + 1);
      const size_t stop = end == std::string_view::npos ? text.size() : end;
      current.append(text.substr(i + 1, stop - i - 1));
      i = stop;
    } else if (c == '\\' && i + 1 < text.size()) {
      in_word = true;
      current.push_back(text[++i]);
    } else {
      in_word = true;
      current.push_back(c);
    }
  }
  if (in_word) words.push_back(std::move(current));
  return words;
}

}  // namespace hpd::firefox
