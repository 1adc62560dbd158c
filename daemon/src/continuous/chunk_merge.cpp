// Reading chunks back: the chunks overlapping a time window merged into one RawProfile.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "hpd/capture/capture.h"
#include "hpd/continuous/continuous.h"

namespace hpd::continuous {
namespace {

namespace fs = std::filesystem;

// Linux pids stay below 2^22 (PID_MAX_LIMIT); a reused pid's later process is shown above it.
constexpr int64_t kPidSpace = int64_t{1} << 22;

int64_t add_signed(uint64_t value, int64_t delta) {
  return static_cast<int64_t>(value) + delta;
}

uint64_t non_negative(int64_t v) {
  return v < 0 ? 0 : static_cast<uint64_t>(v);
}

std::string file_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// One process as identified across chunks: a pid of one boot, from its first appearance until it
// was seen to exit or its pid turned out to hold another program.
struct Incarnation {
  std::string boot_id;
  std::string exe;
  int32_t merged_pid = 0;
  bool ended = false;
  bool in_output = false;
};

class ChunkMerger {
 public:
  ChunkMerger(const ExportFilter& filter, uint64_t since, uint64_t until, std::vector<std::string>* notes)
      : filter_(filter), since_(since), until_(until), notes_(notes) {}

  void add(const CaptureContents& chunk, const std::string& source) {
    const RawProfile& in = chunk.profile;
    const RecordingInfo& info = in.info;
    if (chunks_ == 0) {
      reference_ = info;
      boot_id_ = chunk.info.boot_id;
      out_.info = info;
      out_.info.kernel_frames = false;
    } else {
      if (chunk.info.boot_id != boot_id_) mixed_boots_ = true;
      if (info.frequency_hz != out_.info.frequency_hz && !frequency_noted_) {
        frequency_noted_ = true;
        note("the sampling rate changed between chunks (" + std::to_string(out_.info.frequency_hz) +
             " Hz, then " + std::to_string(info.frequency_hz) + " Hz in " + source +
             "): sample counts are not comparable across it");
      }
    }
    ++chunks_;
    out_.info.kernel_frames = out_.info.kernel_frames || info.kernel_frames;
    // Times go on the reference chunk's monotonic clock. The same boot shares it as is; another boot's
    // clock is placed by wall-clock time.
    const bool same_boot = !boot_id_.empty() && chunk.info.boot_id == boot_id_;
    shift_ =
        same_boot
            ? 0
            : static_cast<int64_t>(reference_.start_mono_ns) - static_cast<int64_t>(info.start_mono_ns) +
                  (static_cast<int64_t>(info.start_unix_ns) - static_cast<int64_t>(reference_.start_unix_ns));
    chunk_start_mono_ = non_negative(add_signed(info.start_mono_ns, shift_));
    const uint64_t chunk_end_mono = std::max(info.end_mono_ns, info.start_mono_ns);
    last_end_mono_ = std::max(last_end_mono_, non_negative(add_signed(chunk_end_mono, shift_)));
    first_start_unix_ = std::min(first_start_unix_, info.start_unix_ns);
    // The hypervisor's steal of the part of the chunk inside the window: a share of the chunk's by
    // the time inside (how it was spread within a chunk is not known).
    if (info.host_steal_known && info.end_mono_ns > info.start_mono_ns) {
      const uint64_t from = std::max(since_, info.start_unix_ns);
      const uint64_t to = std::min(until_, info.start_unix_ns + (info.end_mono_ns - info.start_mono_ns));
      if (to > from)
        steal_ns_ += static_cast<double>(info.host_steal_ns) * static_cast<double>(to - from) /
                     static_cast<double>(info.end_mono_ns - info.start_mono_ns);
    } else {
      steal_unknown_ = true;
    }
    to_unix_ = static_cast<int64_t>(info.start_unix_ns) - static_cast<int64_t>(info.start_mono_ns);

    // Which merged process each of this chunk's pids is, and whether it passes the filter.
    pid_map_.clear();
    execed_.clear();
    selected_.clear();
    for (const RawProcess& p : in.processes) {
      pid_map_[p.pid] = identify(p, chunk.info.boot_id, info);
      if (matches(p)) selected_.insert(p.pid);
    }
    stack_map_.assign(in.stacks.size(), kNoIndex);
    processes_done_.clear();
    threads_done_.clear();

    for (const RawSample& s : in.samples) {
      if (selected_.count(s.pid) == 0) continue;
      const int64_t unix_time = add_signed(s.time_ns, to_unix_);
      if (unix_time < static_cast<int64_t>(since_) || unix_time > static_cast<int64_t>(until_)) continue;
      const int32_t pid = pid_map_.at(s.pid);
      ensure_process(in, s.pid, pid);
      ensure_thread(in, s.pid, s.tid, pid);
      RawSample copy = s;
      copy.pid = pid;
      copy.tid = s.tid;
      copy.time_ns = non_negative(add_signed(s.time_ns, shift_));
      if (s.stack != kNoIndex && s.stack < in.stacks.size()) {
        uint32_t& mapped = stack_map_[s.stack];
        if (mapped == kNoIndex)
          mapped = out_.stacks.intern(in.stacks.kernel_frames(s.stack), in.stacks.user_frames(s.stack),
                                      in.stacks[s.stack].user_leaf);
        copy.stack = mapped;
      } else {
        copy.stack = kNoIndex;
      }
      out_.samples.push_back(copy);
    }
    for (const RawCallEdge& e : in.call_edges) {
      if (selected_.count(e.pid) == 0) continue;
      const int32_t pid = pid_map_.at(e.pid);
      ensure_process(in, e.pid, pid);
      RawCallEdge copy = e;
      copy.pid = pid;
      out_.call_edges.push_back(copy);
    }
    for (const RawMipSnapshot& m : in.mip_snapshots) {
      if (selected_.count(m.pid) == 0 || m.module >= in.modules.size()) continue;
      const int32_t pid = pid_map_.at(m.pid);
      ensure_process(in, m.pid, pid);
      RawMipSnapshot copy = m;
      copy.pid = pid;
      copy.time_ns = non_negative(add_signed(m.time_ns, shift_));
      copy.module = module(in, m.module);
      out_.mip_snapshots.push_back(std::move(copy));
    }
    // The JIT symbols each chunk kept for its processes' generated code, of the processes merged from
    // it: one per (merged process, start), the later chunk's when a runtime wrote new code there.
    for (const RawJitSymbol& j : in.jit_symbols) {
      if (selected_.count(j.pid) == 0) continue;
      const int32_t pid = pid_map_.at(j.pid);
      if (processes_done_.count(pid) == 0) continue;  // none of its samples in the window
      const auto [at, added] = jit_index_.try_emplace({pid, j.start}, out_.jit_symbols.size());
      if (added) {
        out_.jit_symbols.push_back(j);
        out_.jit_symbols.back().pid = pid;
      } else {
        out_.jit_symbols[at->second].size = j.size;
        out_.jit_symbols[at->second].name = j.name;
      }
    }
    out_.lost += in.lost;
    // The kallsyms lines each chunk kept for its kernel addresses, each line once: chunks of one boot
    // share the kernel's addresses (BPF programs loaded and unloaded between chunks included).
    std::string_view lines = in.kernel_symbols;
    while (!lines.empty()) {
      const size_t end = std::min(lines.find('\n'), lines.size());
      if (end != 0 && kernel_lines_.emplace(lines.substr(0, end)).second) {
        out_.kernel_symbols.append(lines.substr(0, end));
        out_.kernel_symbols += '\n';
      }
      lines.remove_prefix(std::min(end + 1, lines.size()));
    }
  }

  LoadedChunks finish() {
    LoadedChunks result;
    result.since_unix_ns = since_;
    result.until_unix_ns = until_;
    result.boot_id = mixed_boots_ ? "" : boot_id_;
    if (chunks_ == 0) return result;
    // The profile starts where the window or the first chunk does, whichever is later.
    const uint64_t start_unix = std::max(since_, first_start_unix_);
    const int64_t ref_to_unix =
        static_cast<int64_t>(reference_.start_unix_ns) - static_cast<int64_t>(reference_.start_mono_ns);
    out_.info.start_unix_ns = start_unix;
    out_.info.start_mono_ns = non_negative(static_cast<int64_t>(start_unix) - ref_to_unix);
    const uint64_t until_mono = non_negative(static_cast<int64_t>(until_) - ref_to_unix);
    out_.info.end_mono_ns = std::max(out_.info.start_mono_ns, std::min(last_end_mono_, until_mono));
    out_.info.host_steal_known = !steal_unknown_;
    out_.info.host_steal_ns = steal_unknown_ ? 0 : static_cast<uint64_t>(std::llround(steal_ns_));
    out_.info.target =
        std::string(kContinuousTargetPrefix) + " (" + std::to_string(chunks_) +
        (chunks_ == 1 ? " chunk" : " chunks") + ", " + format_unix_time(start_unix) + " to " +
        format_unix_time(non_negative(static_cast<int64_t>(out_.info.end_mono_ns) + ref_to_unix)) + ")";
    // Registration times before the window would start the tracks before the profile does.
    for (RawProcess& p : out_.processes) p.start_ns = std::max(p.start_ns, out_.info.start_mono_ns);
    for (RawThread& t : out_.threads) t.start_ns = std::max(t.start_ns, out_.info.start_mono_ns);
    if (mixed_boots_) out_.kernel_symbols.clear();  // one boot's names would misname another's addresses
    if (mixed_boots_)
      note(
          "the chunks come from several boots: kernel frames stay addresses, and times of other boots are "
          "placed by the wall clock");
    result.profile = std::move(out_);
    return result;
  }

 private:
  void note(std::string text) {
    if (notes_ != nullptr) notes_->push_back(std::move(text));
  }

  bool matches(const RawProcess& p) const {
    if (!filter_.pids.empty() &&
        std::find(filter_.pids.begin(), filter_.pids.end(), p.pid) == filter_.pids.end())
      return false;
    if (filter_.comms.empty()) return true;
    const std::string exe_name = file_name(p.exe);
    for (const std::string& c : filter_.comms) {
      if (c == p.name || (!exe_name.empty() && c == exe_name)) return true;
      // comm is cut at 15 characters: a longer name given by the user matches its first 15.
      if (p.name.size() == 15 && c.size() > 15 && c.compare(0, 15, p.name) == 0) return true;
    }
    return false;
  }

  int32_t identify(const RawProcess& p, const std::string& boot_id, const RecordingInfo& info) {
    auto it = latest_.find(p.pid);
    const bool existed_before = p.start_ns <= info.start_mono_ns;
    if (it != latest_.end()) {
      Incarnation& known = it->second;
      if (known.boot_id == boot_id && !known.ended && existed_before) {
        // Another executable under a pid that never exited: it exec'd between the chunks (a pid
        // reused within the gap would need the old process to exit and the pids to wrap around).
        if (!known.exe.empty() && !p.exe.empty() && known.exe != p.exe) execed_.insert(known.merged_pid);
        if (!p.exe.empty()) known.exe = p.exe;
        known.ended = p.end_ns != 0;
        return known.merged_pid;
      }
    }
    Incarnation next;
    next.boot_id = boot_id;
    next.exe = p.exe;
    next.ended = p.end_ns != 0;
    int64_t candidate = p.pid;
    while (used_pids_.count(static_cast<int32_t>(candidate)) != 0 &&
           candidate + kPidSpace <= std::numeric_limits<int32_t>::max())
      candidate += kPidSpace;
    next.merged_pid = static_cast<int32_t>(candidate);
    used_pids_.insert(next.merged_pid);
    latest_[p.pid] = next;
    return next.merged_pid;
  }

  uint32_t module(const RawProfile& in, uint32_t index) {
    if (index >= in.modules.size()) return kNoIndex;
    const RawModule& m = in.modules[index];
    const uint32_t merged = out_.intern_module(m.path, m.build_id, m.is_kernel);
    if (out_.modules[merged].image.empty()) out_.modules[merged].image = m.image;  // the vDSO's
    return merged;
  }

  // Adds (or extends) the merged process with this chunk's name, mappings and times.
  void ensure_process(const RawProfile& in, int32_t chunk_pid, int32_t pid) {
    if (!processes_done_.insert(pid).second) return;
    const RawProcess* p = in.find_process(chunk_pid);
    const bool first = out_.find_process(pid) == nullptr;
    RawProcess& q = out_.process(pid);
    if (pid != chunk_pid && first) {
      note("pid " + std::to_string(chunk_pid) + " was reused" +
           (p != nullptr ? " by " + p->name : std::string()) +
           " in a later chunk: that process is shown as pid " + std::to_string(pid));
    }
    if (p == nullptr) return;
    if (!p->name.empty()) q.name = p->name;
    if (!p->exe.empty()) q.exe = p->exe;
    if (!p->cmdline.empty()) q.cmdline = p->cmdline;
    if (!p->cgroup.empty()) q.cgroup = p->cgroup;
    const uint64_t start = non_negative(add_signed(p->start_ns, shift_));
    q.start_ns = first ? start : std::min(q.start_ns, start);
    q.end_ns = p->end_ns != 0 ? non_negative(add_signed(p->end_ns, shift_)) : 0;
    if (!first && execed_.count(pid) != 0) {
      // The old program's mappings end where this chunk begins, as the recorder marks them at an exec.
      for (RawMapping& old : q.mappings) {
        if (old.unmapped_ns == 0) old.unmapped_ns = std::max(chunk_start_mono_, old.time_ns + 1);
      }
    }
    for (const RawMapping& m : p->mappings) {
      RawMapping copy = m;
      copy.module = module(in, m.module);
      // "Mapped before the recording began" holds for the first chunk of the process only; in a
      // later one it means "seen at that chunk's start", so that an older mapping of the range keeps
      // serving the earlier samples.
      copy.time_ns =
          m.time_ns != 0 ? non_negative(add_signed(m.time_ns, shift_)) : (first ? 0 : chunk_start_mono_);
      copy.unmapped_ns = m.unmapped_ns != 0 ? non_negative(add_signed(m.unmapped_ns, shift_)) : 0;
      bool duplicate = false;
      for (RawMapping& old : q.mappings) {
        if (old.start == copy.start && old.end == copy.end && old.file_offset == copy.file_offset &&
            old.module == copy.module && old.unmapped_ns == 0) {
          old.unmapped_ns = copy.unmapped_ns;
          duplicate = true;
          break;
        }
      }
      if (!duplicate) q.mappings.push_back(copy);
    }
  }

  void ensure_thread(const RawProfile& in, int32_t chunk_pid, int32_t tid, int32_t pid) {
    const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(pid)) << 32 | static_cast<uint32_t>(tid);
    if (!threads_done_.insert(key).second) return;
    const RawThread* t = in.find_thread(chunk_pid, tid);
    const bool first = out_.find_thread(pid, tid) == nullptr;
    RawThread& q = out_.thread(pid, tid);
    if (t == nullptr) {
      if (first) q.start_ns = chunk_start_mono_;
      return;
    }
    if (!t->name.empty()) q.name = t->name;
    const uint64_t start = non_negative(add_signed(t->start_ns, shift_));
    q.start_ns = first ? start : std::min(q.start_ns, start);
    q.end_ns = t->end_ns != 0 ? non_negative(add_signed(t->end_ns, shift_)) : 0;
    q.lost += t->lost;
  }

  const ExportFilter& filter_;
  uint64_t since_, until_;
  std::vector<std::string>* notes_;
  RawProfile out_;
  std::unordered_set<std::string> kernel_lines_;
  std::map<std::pair<int32_t, uint64_t>, size_t> jit_index_;  // (merged pid, start) -> out_.jit_symbols
  RecordingInfo reference_;
  std::string boot_id_;
  bool mixed_boots_ = false;
  bool frequency_noted_ = false;
  size_t chunks_ = 0;
  int64_t shift_ = 0;    // this chunk's monotonic times -> the reference timeline
  int64_t to_unix_ = 0;  // this chunk's monotonic times -> Unix time
  uint64_t chunk_start_mono_ = 0;
  uint64_t last_end_mono_ = 0;
  double steal_ns_ = 0;         // the hypervisor's steal within the window, of the chunks added
  bool steal_unknown_ = false;  // a chunk did not know its steal
  uint64_t first_start_unix_ = std::numeric_limits<uint64_t>::max();
  std::unordered_map<int32_t, Incarnation> latest_;  // by the pid the chunks recorded
  std::unordered_set<int32_t> used_pids_;            // merged pids handed out
  std::unordered_map<int32_t, int32_t> pid_map_;     // this chunk: recorded pid -> merged pid
  std::unordered_set<int32_t> selected_;             // this chunk: recorded pids passing the filter
  std::unordered_set<int32_t> execed_;               // this chunk: merged pids that exec'd since the last
  std::vector<uint32_t> stack_map_;                  // this chunk: stack index -> merged stack index
  std::unordered_set<int32_t> processes_done_;       // this chunk: merged pids whose process was merged
  std::unordered_set<uint64_t> threads_done_;        // this chunk: merged (pid, tid) keys
};

}  // namespace

LoadedChunks load_chunk_window(const fs::path& dir, const ExportFilter& filter,
                               std::vector<std::string>* notes) {
  const uint64_t until = filter.until_unix_ns != 0 ? filter.until_unix_ns : unix_now_ns();
  const uint64_t since = filter.since_unix_ns;
  if (since > until)
    throw std::runtime_error("the window is empty: " + format_unix_time(since) + " is after " +
                             format_unix_time(until));
  StoreScan scan = scan_store(dir);
  if (notes != nullptr) notes->insert(notes->end(), scan.notes.begin(), scan.notes.end());
  ChunkMerger merger(filter, since, until, notes);
  size_t read = 0, skipped = 0;
  for (const ChunkFile& chunk : scan.chunks) {
    if (chunk.start_unix_ns > until || chunk.end_unix_ns < since) continue;
    CaptureContents contents;
    try {
      contents = read_capture_file(chunk.path.string());
    } catch (const std::exception& e) {
      ++skipped;
      if (notes != nullptr) notes->push_back("skipping " + chunk.path.string() + ": " + e.what());
      continue;
    }
    if (notes != nullptr) {
      for (const std::string& n : contents.info.notes)
        notes->push_back(chunk.path.filename().string() + ": " + n);
    }
    merger.add(contents, chunk.path.filename().string());
    ++read;
  }
  LoadedChunks result = merger.finish();
  result.chunks_read = read;
  result.chunks_skipped = skipped;
  return result;
}

RawProfile load_chunks(const fs::path& dir, const ExportFilter& filter, std::vector<std::string>* notes) {
  return load_chunk_window(dir, filter, notes).profile;
}

}  // namespace hpd::continuous
