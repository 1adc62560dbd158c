// Collapsed-stack writer: aggregates samples per unique stack, renders each stack's names once.
#include <algorithm>
#include <map>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "hpd/export/collapsed.h"
#include "hpd/model/validate.h"
#include "output_file.h"

namespace hpd {
namespace {

constexpr int kGzipLevel = 6;

void append_name(std::string& out, std::string_view name) {
  for (const char c : name) out.push_back(c == ';' ? ':' : (c == '\n' || c == '\r') ? ' ' : c);
}

}  // namespace

void write_collapsed(const Profile& p, std::ostream& out, const CollapsedOptions& options) {
  const RecordingInfo& info = p.meta.recording;
  const uint64_t interval_ns = interval_ns_or_assumed(info);
  validate(p);
  // (thread or 0) << 32 | (stack + 1) -> weight; aggregated before any string is built.
  std::unordered_map<uint64_t, uint64_t> weights;
  // --per-process: every thread of a process is keyed by the process's first thread.
  std::unordered_map<int32_t, uint32_t> first_thread_of_pid;
  for (uint32_t ti = 0; ti < p.threads.size(); ++ti) {
    const uint32_t key_thread = options.per_process && !options.per_thread
                                    ? first_thread_of_pid.emplace(p.threads[ti].pid, ti).first->second
                                    : ti;
    const uint64_t thread_key = options.per_thread || options.per_process ? uint64_t{key_thread} << 32 : 0;
    for (const Sample& s : p.threads[ti].samples) {
      uint64_t w = 0;
      if (s.kind == SampleKind::kOnCpu) {
        w = options.weight == CollapsedWeight::kSamples ? 1
            : options.weight == CollapsedWeight::kCpu   ? s.cpu_delta_ns
                                                        : interval_ns;
      } else if (options.weight == CollapsedWeight::kWall) {
        w = s.off_cpu_ns;
      } else if (options.weight == CollapsedWeight::kCpu) {
        w = s.cpu_delta_ns;  // what the scheduler charged the thread for a wait after its wakeup
      }
      if (w != 0) weights[thread_key | (uint64_t{s.stack} + 1)] += w;
    }
  }
  std::map<std::string, uint64_t> lines;  // sorted, and stacks that render alike are merged
  std::string line;
  for (const auto& [key, weight] : weights) {
    line.clear();
    if (options.per_thread) {
      const Thread& t = p.threads[key >> 32];
      append_name(line, t.process_name.empty() ? "[unknown]" : t.process_name);
      line += ';';
      append_name(line, t.name.empty() ? "[unknown]" : t.name);
      line += " (" + std::to_string(t.tid) + ")";
    } else if (options.per_process) {
      const Thread& t = p.threads[key >> 32];
      append_name(line, t.process_name.empty() ? "[unknown]" : t.process_name);
      line += " (" + std::to_string(t.pid) + ")";
    }
    const uint32_t stack = static_cast<uint32_t>(key & 0xffffffffu) - 1;
    if (stack == kNoIndex) {
      if (!line.empty()) line += ';';
      line += "[unknown]";
    } else {
      for (const uint32_t f : p.stack_frames_root_first(stack)) {
        if (!line.empty()) line += ';';
        append_name(line, p.func_name(p.frames[f].func));
      }
      // The wall weight mixes time on the CPU, blocked and runnable: a stack that waited for a CPU
      // (its frames are in that category) says so in a last frame, since its leaf is no cause.
      if (p.frames[p.stacks[stack].frame].category == Category::kWaitCpu) line += ";[waiting for CPU]";
    }
    lines[line] += weight;
  }
  for (const auto& [stack, weight] : lines) out << stack << ' ' << weight << '\n';
  if (!out) throw ExportError("writing collapsed stacks failed");
}

void write_collapsed_file(const Profile& profile, const std::string& path, const CollapsedOptions& options) {
  std::ostringstream text;
  write_collapsed(profile, text, options);
  const std::string bytes = std::move(text).str();
  AtomicFile file(path);
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
    GzipSink gzip(file, kGzipLevel);
    gzip.write(bytes.data(), bytes.size());
    gzip.finish();
  } else {
    file.write(bytes.data(), bytes.size());
  }
  file.commit();
}

}  // namespace hpd
