// The shared table of hpd's in-process call counter: made before the command starts, read at the end.
#include "hpd/calls/preload_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include <atomic>
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

template <typename T>
T load(const T& field) {
  return std::atomic_ref<const T>(field).load(std::memory_order_acquire);
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

PreloadTable::PreloadTable() {
  static std::atomic<unsigned> serial{0};
  path_ = "/dev/shm/hpd-calls-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw CallCountError("cannot create " + path_ + ": " + std::strerror(errno));
  size_ = hpd_calls_file_size();
  void* map = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(size_)) == 0)
    map = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (map == MAP_FAILED) {
    ::unlink(path_.c_str());
    throw CallCountError("cannot map " + path_ + ": " + std::strerror(err));
  }
  // 0600: the command runs as the recording user; one that switches to another user (su, sudo -u)
  // cannot open the table, and its runtime says so on stderr.
  map_ = map;
  auto* h = static_cast<hpd_calls_header*>(map_);
  h->version = HPD_CALLS_VERSION;
  h->header_size = sizeof(hpd_calls_header);
  h->file_size = size_;
  h->max_threads = HPD_CALLS_MAX_THREADS;
  h->edges_per_thread = HPD_CALLS_EDGES_PER_THREAD;
  h->funcs_per_thread = HPD_CALLS_FUNCS_PER_THREAD;
  h->hist_blocks = HPD_CALLS_HIST_BLOCKS;
  h->hist_buckets = HPD_CALLS_HIST_BUCKETS;
  start_mono_ns_ = mono_ns();
  start_tsc_ = __rdtsc();
  h->clock_tsc = start_tsc_;
  h->clock_mono_ns = start_mono_ns_;
  std::atomic_ref<uint64_t>(h->magic).store(HPD_CALLS_MAGIC, std::memory_order_release);
}

PreloadTable::~PreloadTable() {
  if (map_ != nullptr) ::munmap(map_, size_);
  ::unlink(path_.c_str());
}

std::vector<std::string> PreloadTable::environment(const std::string& runtime) const {
  std::string preload = runtime;
  if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && old[0] != '\0')
    preload += ":" + std::string(old);
  return {"LD_PRELOAD=" + preload, std::string(HPD_CALLS_ENV_TABLE) + "=" + path_};
}

void PreloadTable::read(RawProfile& profile, CallCountStats& stats) const {
  const auto* base = static_cast<const char*>(map_);
  const auto* h = static_cast<const hpd_calls_header*>(map_);
  RuntimeCallStats& rs = stats.runtime;
  // The TSC's scale over the whole recording: the runtime times in ticks.
  const uint64_t tsc = __rdtsc(), now = mono_ns();
  rs.ns_per_tick = tsc > start_tsc_ ? double(now - start_mono_ns_) / double(tsc - start_tsc_) : 0;
  rs.processes = load(h->processes);
  rs.threads_refused = load(h->threads_refused);
  rs.sites_patched = load(h->sites_patched);
  rs.sites_unpatched = load(h->sites_unpatched);
  const uint32_t threads = std::min(load(h->threads_used), HPD_CALLS_MAX_THREADS);
  const auto ns = [&](uint64_t ticks) { return static_cast<uint64_t>(double(ticks) * rs.ns_per_tick + 0.5); };

  std::map<std::tuple<int32_t, uint64_t, uint64_t>, uint64_t> edges;  // (pid, caller, callee) -> calls
  std::map<std::pair<int32_t, uint64_t>, RawCallLatency> latency;     // (pid, callee)
  for (uint32_t t = 0; t < threads; ++t) {
    const auto* slot = reinterpret_cast<const hpd_calls_thread*>(base + hpd_calls_threads_offset()) + t;
    if (load(slot->state) == 0) continue;
    ++rs.threads;
    const int32_t pid = slot->pid;
    stats.calls_not_counted += load(slot->calls_lost);
    rs.calls_untimed += load(slot->calls_untimed);
    rs.frames_abandoned += load(slot->frames_abandoned);
    const auto* e = reinterpret_cast<const hpd_calls_edge*>(base + hpd_calls_edges_offset(t));
    for (uint32_t i = 0; i < HPD_CALLS_EDGES_PER_THREAD; ++i) {
      const uint64_t callee = load(e[i].callee);
      if (callee == 0) continue;
      const uint64_t count = load(e[i].count);
      if (count == 0) continue;
      edges[{pid, e[i].caller, callee}] += count;
      rs.calls += count;
    }
    const auto* f = reinterpret_cast<const hpd_calls_func*>(base + hpd_calls_funcs_offset(t));
    for (uint32_t i = 0; i < HPD_CALLS_FUNCS_PER_THREAD; ++i) {
      const uint64_t callee = load(f[i].callee);
      const uint64_t timed = callee != 0 ? load(f[i].timed) : 0;
      if (timed == 0) continue;
      RawCallLatency& l = latency[{pid, callee}];
      l.pid = pid;
      l.callee_address = callee;
      l.calls += timed;
      rs.calls_timed += timed;
      l.sum_ns += ns(load(f[i].sum_ticks));
      l.outer_ns += ns(load(f[i].outer_ticks));
      l.max_ns = std::max(l.max_ns, ns(load(f[i].max_ticks)));
      const uint32_t block = load(f[i].hist);
      if (block >= HPD_CALLS_HIST_BLOCKS) continue;
      const auto* buckets = reinterpret_cast<const uint64_t*>(base + hpd_calls_hist_offset(block));
      LatencyHistogram hist;
      hist.ns_per_tick = rs.ns_per_tick;
      for (uint32_t b = 0; b < HPD_CALLS_HIST_BUCKETS; ++b)
        if (const uint64_t n = load(buckets[b]); n != 0) hist.buckets.emplace_back(b, n);
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
}

}  // namespace hpd::calls
