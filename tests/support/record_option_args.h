// Command-line options of hpd::RecordOptions shared by the test drivers and benches that call
// hpd::record() directly (hpd_record_driver, hpd_callgraph_bench), so each parses them one way.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "hpd/collect/recorder.h"

namespace hpd::testing {

enum class RecordOptionArg { kNotMine, kTaken, kMissingValue };

// Reads the option at argv[i] into `options` when it is one of RecordOptions' (advancing i past its
// value): --backend auto|bpf|perf, -F HZ, --duration S, --call-graph auto|fp|dwarf, --stack-size
// BYTES, --ring-pages N, --off-cpu, --no-off-cpu, --no-kernel, --all, --cgroup PATH, --cfi-rows N,
// --no-cfi-index, --no-steal-clock.
inline RecordOptionArg parse_record_option(int argc, char** argv, int& i, RecordOptions& options) {
  const std::string arg = argv[i];
  const char* v = nullptr;
  auto value = [&]() {
    v = i + 1 < argc ? argv[++i] : nullptr;
    return v != nullptr;
  };
  if (arg == "--backend") {
    if (!value()) return RecordOptionArg::kMissingValue;
    const std::string b = v;
    options.backend = b == "bpf" ? Backend::kBpf : b == "perf" ? Backend::kPerf : Backend::kAuto;
  } else if (arg == "-F") {
    if (!value()) return RecordOptionArg::kMissingValue;
    options.frequency_hz = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
  } else if (arg == "--duration") {
    if (!value()) return RecordOptionArg::kMissingValue;
    options.duration_s = std::strtod(v, nullptr);
  } else if (arg == "--call-graph") {
    if (!value()) return RecordOptionArg::kMissingValue;
    const std::string g = v;
    options.call_graph = g == "fp"      ? CallGraph::kFp
                         : g == "dwarf" ? CallGraph::kDwarf
                         : g == "cfi"   ? CallGraph::kCfi
                                        : CallGraph::kAuto;
  } else if (arg == "--stack-size") {
    if (!value()) return RecordOptionArg::kMissingValue;
    options.stack_copy_bytes = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
  } else if (arg == "--cfi-rows") {
    if (!value()) return RecordOptionArg::kMissingValue;
    options.cfi_row_capacity = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
  } else if (arg == "--no-cfi-index") {
    options.cfi_row_index = false;
  } else if (arg == "--no-steal-clock") {
    options.read_steal_clock = false;
  } else if (arg == "--ring-pages") {
    if (!value()) return RecordOptionArg::kMissingValue;
    options.ring_pages = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
  } else if (arg == "--cgroup") {
    if (!value()) return RecordOptionArg::kMissingValue;
    options.target.cgroup = v;
  } else if (arg == "--off-cpu") {
    options.off_cpu = Switch::kOn;
  } else if (arg == "--no-off-cpu") {
    options.off_cpu = Switch::kOff;
  } else if (arg == "--no-kernel") {
    options.kernel = Switch::kOff;
  } else if (arg == "--all") {
    options.target.all_processes = true;
  } else {
    return RecordOptionArg::kNotMine;
  }
  return RecordOptionArg::kTaken;
}

}  // namespace hpd::testing
