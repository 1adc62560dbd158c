// Names shared by the Firefox writer and reader: categories, the off-CPU marker, meta.extra labels.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "hpd/model/profile.h"

namespace hpd::firefox {

struct CategoryStyle {
  const char* name;
  const char* color;
};

// Indexed by hpd::Category. The first grey category is the profiler's default; "Idle" is the name
// the profiler treats specially (hidden by default, "Include idle samples" checkbox).
inline constexpr CategoryStyle kCategories[kCategoryCount] = {
    {"Other", "grey"}, {"Idle", "transparent"}, {"User", "yellow"}, {"Kernel", "orange"}};

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

inline constexpr const char* kLostSection = "Lost data";
inline constexpr const char* kLostRecordsLabel = "Lost records";
inline constexpr const char* kThrottleLabel = "Throttle events";
inline constexpr const char* kStackFailuresLabel = "Failed stack walks";
inline constexpr const char* kTruncatedLabel = "Truncated stacks";
inline constexpr const char* kMissingModulesLabel = "Missing modules";
inline constexpr const char* kMissingModulePrefix = "Missing module ";  // + 1-based number

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
