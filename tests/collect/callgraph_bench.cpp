// hpd_callgraph_bench: records a command through hpd::record() in a chosen call-graph mode and prints
// what unwinding cost (µs per sample, share of the recorder's CPU), the bytes read per sample and how
// the stacks ended; --show-incomplete N prints the first N incomplete stacks, symbolized.
// Usage: hpd_callgraph_bench [--call-graph fp|dwarf|auto] [--stack-size BYTES] [--backend perf|bpf] [-F HZ]
//                            [--no-kernel] [--show-incomplete N] [--json] -- COMMAND ARGS...
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "hpd/collect/recorder.h"
#include "hpd/symbolizer/convert.h"
#include "hpd/symbolizer/symbolizer.h"
#include "record_option_args.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: hpd_callgraph_bench [--call-graph fp|dwarf|auto] [--stack-size BYTES] [--backend "
               "perf|bpf] [-F HZ] "
               "[--no-kernel] [--show-incomplete N] [--json] -- COMMAND ARGS...\n");
  return 2;
}

// The sample's frames leaf first, as "function" names (inlined levels included).
std::string describe_stack(const hpd::Profile& profile, uint32_t stack) {
  if (stack == hpd::kNoIndex) return "(no stack)";
  std::string text;
  const auto frames = profile.stack_frames_root_first(stack);
  for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
    if (!text.empty()) text += " <- ";
    text += profile.func_name(profile.frames[*it].func);
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  hpd::RecordOptions options;
  options.backend = hpd::Backend::kPerf;
  size_t show_incomplete = 0;
  bool json = false;
  int i = 1;
  for (; i < argc; ++i) {
    const auto taken = hpd::testing::parse_record_option(argc, argv, i, options);
    if (taken == hpd::testing::RecordOptionArg::kMissingValue) return usage();
    if (taken == hpd::testing::RecordOptionArg::kTaken) continue;
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    } else if (arg == "--show-incomplete") {
      const char* v = i + 1 < argc ? argv[++i] : nullptr;
      if (v == nullptr) return usage();
      show_incomplete = std::strtoul(v, nullptr, 10);
    } else if (arg == "--json") {
      json = true;
    } else {
      return usage();
    }
  }
  for (; i < argc; ++i) options.target.command.emplace_back(argv[i]);
  if (options.target.command.empty()) return usage();

  hpd::RecordResult result;
  try {
    result = hpd::record(options);
  } catch (const hpd::RecordError& e) {
    std::fprintf(stderr, "hpd_callgraph_bench: %s\n", e.what());
    return 1;
  }
  const hpd::RawProfile& raw = result.profile;
  uint64_t ends[4] = {};
  for (const hpd::RawSample& s : raw.samples) {
    if (s.kind == hpd::SampleKind::kOnCpu) ++ends[static_cast<int>(s.stack_end) & 3];
  }
  const uint64_t on_cpu = ends[0] + ends[1] + ends[2] + ends[3];
  const double n = on_cpu == 0 ? 1.0 : double(on_cpu);
  const double unwound = result.unwound_samples != 0 ? double(result.unwound_samples) : n;
  const double unwind_us = double(result.unwind_ns) / 1e3 / unwound;
  const double unwind_share =
      result.collection_cpu_ns == 0 ? 0 : double(result.unwind_ns) / double(result.collection_cpu_ns);
  const double bytes = double(result.sample_bytes) / n;
  const double collect_us = double(result.collection_cpu_ns) / 1e3 / n;
  if (json) {
    std::printf(
        "{\"call_graph\": \"%s\", \"stack_copy_bytes\": %u, \"samples\": %llu, \"complete\": %.4f, "
        "\"truncated\": %.4f, \"failed\": %.4f, \"unwind_us_per_sample\": %.2f, "
        "\"unwind_share_of_recorder\": "
        "%.3f, \"recorder_us_per_sample\": %.2f, \"bytes_per_sample\": %.0f, \"leaf_callers_added\": %llu, "
        "\"lost_records\": %llu, \"records_copied_out\": %llu}\n",
        raw.info.call_graph.c_str(), result.stack_copy_bytes, static_cast<unsigned long long>(on_cpu),
        ends[1] / n, ends[2] / n, ends[3] / n, unwind_us, unwind_share, collect_us, bytes,
        static_cast<unsigned long long>(result.leaf_callers_added),
        static_cast<unsigned long long>(raw.lost.lost_records),
        static_cast<unsigned long long>(result.records_copied_out));
  } else {
    std::printf(
        "call graph %s, stack copy %u B: %llu samples; complete %.1f%%, truncated %.1f%%, failed %.1f%%\n"
        "unwinding %.2f us/sample (%.1f%% of the recorder's %.2f us/sample); %.0f bytes/sample; "
        "leaf callers added %llu\n",
        raw.info.call_graph.c_str(), result.stack_copy_bytes, static_cast<unsigned long long>(on_cpu),
        100 * ends[1] / n, 100 * ends[2] / n, 100 * ends[3] / n, unwind_us, 100 * unwind_share, collect_us,
        bytes, static_cast<unsigned long long>(result.leaf_callers_added));
    if (!result.call_graph_reason.empty()) std::printf("auto: %s\n", result.call_graph_reason.c_str());
  }
  if (show_incomplete > 0) {
    hpd::Symbolizer symbolizer;
    const hpd::Profile profile = hpd::symbolize_profile(raw, symbolizer, hpd::ConvertOptions{});
    size_t shown = 0;
    for (const auto& thread : profile.threads) {
      for (const auto& s : thread.samples) {
        if (shown >= show_incomplete) break;
        if (s.stack_end == hpd::StackEnd::kComplete || s.kind != hpd::SampleKind::kOnCpu) continue;
        std::printf("%s: %s\n", hpd::to_string(s.stack_end), describe_stack(profile, s.stack).c_str());
        ++shown;
      }
    }
  }
  return 0;
}
