// The shared table of hpd's in-process call counter: made before the command starts, read at the end.
#include "hpd/calls/preload_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <tuple>

#include "hpd/calls/call_counter.h"
#include "hpd/calls/discovery.h"
#include "hpd/calls/preload_abi.h"

namespace hpd::calls {

namespace {

constexpr const char* kRuntimeName = "libhpdcalls.so";

uint64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool is_file(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

}  // namespace

std::string find_preload_runtime() {
  if (const char* env = std::getenv("HPD_CALLS_RUNTIME"); env != nullptr && env[0] != '\0')
    return is_file(env) ? std::string(env) : std::string();
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path dir = self.parent_path();
    for (const std::filesystem::path& p :
         {dir / kRuntimeName, dir / "../lib/hpd" / kRuntimeName,
          dir / "../lib/x86_64-linux-gnu/hpd" / kRuntimeName, dir / "../lib64/hpd" / kRuntimeName}) {
      if (is_file(p)) return std::filesystem::weakly_canonical(p, ec).string();
    }
  }
#ifdef HPD_CALLS_RUNTIME_INSTALL_DIR
  const std::filesystem::path installed = std::filesystem::path(HPD_CALLS_RUNTIME_INSTALL_DIR) / kRuntimeName;
  if (is_file(installed)) return installed.string();
#endif
#ifdef HPD_CALLS_RUNTIME_BUILD_DIR
  // The build tree's copy, for a daemon run from it (hpd is not next to hpctl there).
  const std::filesystem::path built = std::filesystem::path(HPD_CALLS_RUNTIME_BUILD_DIR) / kRuntimeName;
  if (is_file(built)) return built.string();
#endif
  return "";
}

std::string preload_unusable_reason(const std::string& executable) {
  const ModuleInstrumentation m = scan_module(executable);
  if (!m.error.empty()) return m.error;
  if (!m.has_interpreter) return executable + " is statically linked (nothing can be preloaded into it)";
  if (m.defines_hook)
    return executable + " defines mcount/__fentry__ itself (its calls never reach hpd's runtime)";
  return "";
}

namespace {

// The header a table of this layout has (and hpd's own clock pair, which readers do not trust).
bool header_matches_layout(const hpd_calls_header& h) {
  return h.magic == HPD_CALLS_MAGIC && h.version == HPD_CALLS_VERSION && h.header_size == sizeof h &&
         h.file_size == hpd_calls_file_size() && h.max_threads == HPD_CALLS_MAX_THREADS &&
         h.edges_per_thread == HPD_CALLS_EDGES_PER_THREAD &&
         h.funcs_per_thread == HPD_CALLS_FUNCS_PER_THREAD && h.hist_blocks == HPD_CALLS_HIST_BLOCKS &&
         h.hist_buckets == HPD_CALLS_HIST_BUCKETS;
}

// Reads `size` bytes at `offset`; what lies past the end of the file (a table its program truncated)
// reads as zeros and sets `short_read`. False on a read error.
bool read_at(int fd, uint64_t offset, void* out, size_t size, bool& short_read) {
  auto* bytes = static_cast<char*>(out);
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::pread(fd, bytes + got, size - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) {
      std::memset(bytes + got, 0, size - got);
      short_read = true;
      return true;
    }
    got += static_cast<size_t>(n);
  }
  return true;
}

// Counts and tick sums a runtime can reach within any recording: 2^40 calls of one edge by one
// thread, 2^52 ticks (weeks) of time. Larger values were written by something else; clamped, every
// sum over the table stays far below 2^64.
constexpr uint64_t kMaxCount = uint64_t{1} << 40;
constexpr uint64_t kMaxTicks = uint64_t{1} << 52;

uint64_t add_saturating(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

}  // namespace

namespace {

hpd_calls_header new_table_header(uint64_t start_tsc, uint64_t start_mono_ns) {
  hpd_calls_header h{};
  h.version = HPD_CALLS_VERSION;
  h.header_size = sizeof(hpd_calls_header);
  h.file_size = hpd_calls_file_size();
  h.max_threads = HPD_CALLS_MAX_THREADS;
  h.edges_per_thread = HPD_CALLS_EDGES_PER_THREAD;
  h.funcs_per_thread = HPD_CALLS_FUNCS_PER_THREAD;
  h.hist_blocks = HPD_CALLS_HIST_BLOCKS;
  h.hist_buckets = HPD_CALLS_HIST_BUCKETS;
  h.clock_tsc = start_tsc;
  h.clock_mono_ns = start_mono_ns;
  // A runtime that maps the file takes it as ready only with the magic (written with the rest, before
  // the command starts).
  h.magic = HPD_CALLS_MAGIC;
  return h;
}

}  // namespace

PreloadTable::PreloadTable() : PreloadTable(mono_ns(), __rdtsc()) {}

PreloadTable::PreloadTable(uint64_t start_mono_ns, uint64_t start_tsc)
    : start_tsc_(start_tsc),
      start_mono_ns_(start_mono_ns),
      file_("hpd-calls", hpd_calls_file_size(), new_table_header(start_tsc, start_mono_ns)) {}

PreloadTable::PreloadTable(UniqueFd handed_over)
    : file_(std::move(handed_over), "the call table", hpd_calls_file_size()) {
  hpd_calls_header h{};
  bool short_read = false;
  if (!read_at(file_.fd(), 0, &h, sizeof h, short_read) || short_read || !header_matches_layout(h))
    throw CallCountError("the call table handed over does not hold this hpd's layout (another hpd version?)");
  // Latency is scaled by hpd's own clock pair, taken now, not by the one in the table's header.
  start_mono_ns_ = mono_ns();
  start_tsc_ = __rdtsc();
}

PreloadTable::~PreloadTable() = default;

const std::string& PreloadTable::path() const {
  return file_.path();
}

int PreloadTable::fd() const {
  return file_.fd();
}

std::vector<std::string> PreloadTable::environment(const std::string& runtime) const {
  return file_.environment(runtime, HPD_CALLS_ENV_TABLE);
}

bool PreloadTable::read(RawProfile& profile, CallCountStats& stats, const std::set<int32_t>* allowed_pids,
                        const Limits& limits) const {
  RuntimeCallStats& rs = stats.runtime;
  // The TSC's scale over the whole recording: the runtime times in ticks. Above 1 ns per tick (a TSC
  // below 1 GHz) clamped ticks would still fit in 64 bits after scaling.
  const uint64_t tsc = __rdtsc(), now = mono_ns();
  rs.ns_per_tick = tsc > start_tsc_ ? double(now - start_mono_ns_) / double(tsc - start_tsc_) : 0;
  const auto ns = [&](uint64_t ticks) {
    return static_cast<uint64_t>(double(std::min(ticks, kMaxTicks)) * rs.ns_per_tick + 0.5);
  };
  const int fd = file_.fd();
  bool short_read = false;
  auto unreadable = [&](const char* what) {
    stats.messages.push_back(std::string("call counts: cannot read the runtime's table (") + what +
                             "): " + std::strerror(errno) + "; nothing counted by it is reported");
    return false;
  };

  hpd_calls_header h{};
  if (!read_at(fd, 0, &h, sizeof h, short_read)) return unreadable("its header");
  if (short_read || !header_matches_layout(h)) {
    stats.messages.push_back(
        "call counts: the runtime's table was overwritten (its header no longer holds hpd's layout; a "
        "program of the recording wrote into it); nothing counted by it is reported");
    return false;
  }
  rs.processes = std::min<uint64_t>(h.processes, kMaxCount);
  rs.threads_refused = std::min(h.threads_refused, kMaxCount);
  rs.sites_patched = std::min(h.sites_patched, kMaxCount);
  rs.sites_unpatched = std::min(h.sites_unpatched, kMaxCount);
  const uint32_t threads = std::min(h.threads_used, HPD_CALLS_MAX_THREADS);

  std::vector<hpd_calls_thread> slots(HPD_CALLS_MAX_THREADS);
  if (!read_at(fd, hpd_calls_threads_offset(), slots.data(), slots.size() * sizeof slots[0], short_read))
    return unreadable("its thread slots");
  std::vector<hpd_calls_edge> edge_table(HPD_CALLS_EDGES_PER_THREAD);
  std::vector<hpd_calls_func> func_table(HPD_CALLS_FUNCS_PER_THREAD);
  std::vector<uint64_t> buckets(HPD_CALLS_HIST_BUCKETS);

  std::map<std::tuple<int32_t, uint64_t, uint64_t>, uint64_t> edges;  // (pid, caller, callee) -> calls
  std::map<std::pair<int32_t, uint64_t>, RawCallLatency> latency;     // (pid, callee)
  uint64_t bucket_count = 0;                                          // histogram buckets kept
  uint64_t clamped = 0;                                               // values above what a runtime can write
  uint64_t bad_hist = 0;                                              // histogram references out of range
  uint64_t foreign_slots = 0;  // thread slots of processes the recording does not follow
  int32_t foreign_pid = 0;
  bool over_budget = false;
  const auto clamp = [&](uint64_t v, uint64_t limit) {
    if (v <= limit) return v;
    ++clamped;
    return limit;
  };
  for (uint32_t t = 0; t < threads; ++t) {
    const hpd_calls_thread& slot = slots[t];
    if (slot.state == 0) continue;
    const int32_t pid = slot.pid;
    if (allowed_pids != nullptr && allowed_pids->count(pid) == 0) {
      ++foreign_slots;
      foreign_pid = pid;
      continue;
    }
    if (over_budget) continue;  // the slots are still checked for foreign processes (in memory already)
    ++rs.threads;
    stats.calls_not_counted = add_saturating(stats.calls_not_counted, clamp(slot.calls_lost, kMaxCount));
    rs.calls_untimed = add_saturating(rs.calls_untimed, clamp(slot.calls_untimed, kMaxCount));
    rs.frames_abandoned = add_saturating(rs.frames_abandoned, clamp(slot.frames_abandoned, kMaxCount));
    if (!read_at(fd, hpd_calls_edges_offset(t), edge_table.data(), edge_table.size() * sizeof edge_table[0],
                 short_read))
      return unreadable("a thread's edges");
    for (const hpd_calls_edge& e : edge_table) {
      if (e.callee == 0 || e.count == 0) continue;
      const auto key = std::make_tuple(pid, e.caller, e.callee);
      if (edges.size() >= limits.edges && edges.count(key) == 0) {
        over_budget = true;
        break;
      }
      const uint64_t count = clamp(e.count, kMaxCount);
      uint64_t& sum = edges[key];
      sum = add_saturating(sum, count);
      rs.calls = add_saturating(rs.calls, count);
    }
    if (!read_at(fd, hpd_calls_funcs_offset(t), func_table.data(), func_table.size() * sizeof func_table[0],
                 short_read))
      return unreadable("a thread's functions");
    for (const hpd_calls_func& f : func_table) {
      if (over_budget) break;
      if (f.callee == 0 || f.timed == 0) continue;
      const auto key = std::make_pair(pid, f.callee);
      if (latency.size() >= limits.functions && latency.count(key) == 0) {
        over_budget = true;
        break;
      }
      const uint64_t timed = clamp(f.timed, kMaxCount);
      RawCallLatency& l = latency[key];
      l.pid = pid;
      l.callee_address = f.callee;
      l.calls = add_saturating(l.calls, timed);
      rs.calls_timed = add_saturating(rs.calls_timed, timed);
      l.sum_ns = add_saturating(l.sum_ns, ns(clamp(f.sum_ticks, kMaxTicks)));
      l.outer_ns = add_saturating(l.outer_ns, ns(clamp(f.outer_ticks, kMaxTicks)));
      l.max_ns = std::max(l.max_ns, ns(clamp(f.max_ticks, kMaxTicks)));
      if (f.hist == HPD_CALLS_NO_HIST) continue;
      if (f.hist >= HPD_CALLS_HIST_BLOCKS) {
        ++bad_hist;
        continue;
      }
      if (!read_at(fd, hpd_calls_hist_offset(f.hist), buckets.data(), buckets.size() * sizeof buckets[0],
                   short_read))
        return unreadable("a latency histogram");
      LatencyHistogram hist;
      hist.ns_per_tick = rs.ns_per_tick;
      for (uint32_t b = 0; b < HPD_CALLS_HIST_BUCKETS && !over_budget; ++b) {
        if (buckets[b] == 0) continue;
        if (++bucket_count > limits.buckets) {
          over_budget = true;
          break;
        }
        hist.buckets.emplace_back(b, clamp(buckets[b], kMaxCount));
      }
      l.histogram.merge(hist);
    }
  }
  for (const auto& [key, count] : edges) {
    const auto& [pid, caller, callee] = key;
    profile.call_edges.push_back(RawCallEdge{pid, caller, callee, count});
    profile.process(pid);
  }
  for (auto& [key, l] : latency) profile.call_latency.push_back(std::move(l));
  stats.edges += edges.size();

  if (short_read)
    stats.messages.push_back(
        "call counts: the runtime's table was truncated while recording (a program of the recording did "
        "it); what it no longer holds reads as nothing counted");
  if (foreign_slots != 0)
    stats.messages.push_back("call counts: " + std::to_string(foreign_slots) +
                             " thread slot(s) of the runtime's table name processes this recording does "
                             "not follow (pid " +
                             std::to_string(foreign_pid) +
                             "); ignored: a program of the recording wrote into the table");
  if (clamped != 0 || bad_hist != 0)
    stats.messages.push_back("call counts: the runtime's table held values no runtime writes (" +
                             std::to_string(clamped) + " counts or times out of range, clamped; " +
                             std::to_string(bad_hist) +
                             " histogram references out of range, ignored): a program of the recording "
                             "wrote into it, and its counts cannot be trusted");
  if (over_budget)
    stats.messages.push_back(
        "call counts: the runtime's table holds more than hpd keeps of it (" + std::to_string(limits.edges) +
        " caller->callee edges, " + std::to_string(limits.functions) + " timed functions, " +
        std::to_string(limits.buckets) + " latency histogram buckets); the rest was not read");
  return true;
}

}  // namespace hpd::calls
