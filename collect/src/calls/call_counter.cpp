// CallCounter: loads calls.bpf.c, attaches it to each instrumented module's probe points with
// uprobe_multi links, follows the targets' maps for modules loaded later, and reads the edge counts.
#include "hpd/calls/call_counter.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "calls_event.h"
#include "hpd/base/proc_files.h"
#include "hpd/base/proc_maps.h"
#include "hpd/base/unique_fd.h"
#include "hpd/calls/discovery.h"
#include "uprobe_multi_link.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include "calls.skel.h"
#pragma GCC diagnostic pop

extern "C" {
void hpd_calls_calibration_nop5();
void hpd_calls_calibration_nop1();
void hpd_calls_calibration_call(uint64_t caller, uint64_t callee);
}

namespace hpd::calls {

namespace {

// Functions whose first instruction is each kind of probe site (nop5, nop1, a call), for measuring
// what one probe hit adds on this machine (measure_ns_per_hit): the kernel's uprobe path differs by
// kernel and CPU by several times (a nop5 site is turned into a call to a trampoline from Linux 6.17).
// The call site's arguments stand for __mcount_internal's (caller, callee).
asm(R"(
  .pushsection .text.hpd_calls_calibration,"ax",@progbits
  .p2align 4
  .globl hpd_calls_calibration_nop5
  .hidden hpd_calls_calibration_nop5
  .type hpd_calls_calibration_nop5,@function
hpd_calls_calibration_nop5:
  .byte 0x0f, 0x1f, 0x44, 0x00, 0x00
  ret
  .size hpd_calls_calibration_nop5, .-hpd_calls_calibration_nop5
  .p2align 4
  .globl hpd_calls_calibration_nop1
  .hidden hpd_calls_calibration_nop1
  .type hpd_calls_calibration_nop1,@function
hpd_calls_calibration_nop1:
  nop
  ret
  .size hpd_calls_calibration_nop1, .-hpd_calls_calibration_nop1
  .p2align 4
  .globl hpd_calls_calibration_call
  .hidden hpd_calls_calibration_call
  .type hpd_calls_calibration_call,@function
hpd_calls_calibration_call:
  call hpd_calls_calibration_return
  ret
hpd_calls_calibration_return:
  ret
  .size hpd_calls_calibration_call, .-hpd_calls_calibration_call
  .popsection
)");

uint64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

struct SkeletonDeleter {
  void operator()(calls_bpf* skel) const { calls_bpf__destroy(skel); }
};
using Skeleton = std::unique_ptr<calls_bpf, SkeletonDeleter>;

struct LinkDeleter {
  void operator()(bpf_link* link) const { bpf_link__destroy(link); }
};
using TracepointLink = std::unique_ptr<bpf_link, LinkDeleter>;

// One uprobe_multi link: closing its fd detaches every site of it.
using UprobeLink = UniqueFd;

Skeleton open_program(const CallCounterOptions& options, bool timing) {
  Skeleton skel(calls_bpf__open());
  if (!skel)
    throw CallCountError(std::string("cannot open hpd's call-counting eBPF object: ") + std::strerror(errno));
  skel->rodata->follow_children = options.follow_children ? 1 : 0;
  skel->rodata->client_uid = options.client_uid;
  skel->rodata->client_gid = options.client_gid;
  bpf_program__set_autoload(skel->progs.hpd_calls_exec, options.restrict_to_client);
  uprobe_multi::set_expected_attach_types(skel->obj);
  bpf_program__set_autoload(skel->progs.hpd_time_call, timing);
  // The timed calls' entries go to the sampling programs' map, when there is one (and it takes it: the
  // two objects define it alike); else the map is a placeholder nobody writes.
  if (timing && options.timed_entries_fd >= 0 &&
      bpf_map__reuse_fd(skel->maps.timed_entries, options.timed_entries_fd) == 0)
    skel->rodata->share_timed_entries = 1;
  else
    bpf_map__set_max_entries(skel->maps.timed_entries, 1);
  return skel;
}

// The counting program, and the timing one (session mode) when `timing` and the kernel takes it;
// when it does not, `timing_refused` says why and the counting program is loaded alone.
Skeleton load_program(const CallCounterOptions& options, std::string& timing_refused) {
  if (options.time_calls) {
    Skeleton skel = open_program(options, true);
    const int err = calls_bpf__load(skel.get());
    if (err == 0) return skel;
    timing_refused = std::string("the kernel refused the timing program (") + std::strerror(-err) +
                     "; it needs uprobe sessions, Linux 6.13 or later)";
  }
  Skeleton skel = open_program(options, false);
  if (const int err = calls_bpf__load(skel.get()); err != 0) {
    throw CallCountError(std::string("the kernel refused hpd's call-counting eBPF program: ") +
                         std::strerror(-err) +
                         " (it needs Linux 6.6 or later for uprobe_multi links, CAP_BPF and CAP_PERFMON)");
  }
  return skel;
}

// The executable file mappings of /proc/PID/maps; empty when the process is gone.
std::vector<MapsEntry> read_executable_maps(int32_t pid) {
  std::vector<MapsEntry> out = read_proc_maps(pid);
  std::erase_if(out,
                [](const MapsEntry& m) { return !m.executable || m.path.empty() || m.path.front() != '/'; });
  return out;
}

bool is_libc(const std::string& path) {
  const std::string base = path.substr(path.rfind('/') + 1);
  return base.starts_with("libc.so") || (base.starts_with("libc-") && base.ends_with(".so"));
}

std::string self_libc() {
  for (const MapsEntry& m : read_executable_maps(static_cast<int32_t>(::getpid())))
    if (is_libc(m.path)) return m.path;
  return "";
}

using FileId = std::pair<uint64_t, uint64_t>;  // (st_dev, st_ino)

}  // namespace

class CallCounter::Impl {
 public:
  explicit Impl(const CallCounterOptions& options)
      : options_(options),
        skel_(load_program(options, timing_refused_)),
        timing_(options.time_calls && timing_refused_.empty()) {
    // Targets before the hook: a process they fork once it is attached is followed.
    for (const int32_t pid : options.targets) add_target(pid);
    fork_link_.reset(bpf_program__attach(skel_->progs.hpd_calls_fork));
    if (!fork_link_)
      throw CallCountError(std::string("cannot attach the call counter's fork hook: ") +
                           std::strerror(errno));
    if (options.restrict_to_client) {
      exec_link_.reset(bpf_program__attach(skel_->progs.hpd_calls_exec));
      if (!exec_link_)
        throw CallCountError(std::string("cannot attach the call counter's exec hook: ") +
                             std::strerror(errno));
    }
    stats_.enabled = true;
    stats_.timed = timing_;
    time_asked_ = options.time_calls;
    for (size_t k = 0; k < kSiteKindCount; ++k)
      stats_.probe_points.push_back(CallProbeHits{to_string(static_cast<SiteKind>(k)), 0, 0, 0});
    // The sites probed at entry and return (timed): indices kSiteKindCount + nop5, + nop1.
    for (const SiteKind k : {SiteKind::kNop5, SiteKind::kNop1})
      stats_.probe_points.push_back(CallProbeHits{std::string(to_string(k)) + "+return", 0, 0, 0});
    if (!timing_refused_.empty()) note_once("timing", "call latency: not measured: " + timing_refused_);
  }

  void add_target(int32_t pid) {
    const uint8_t yes = 1;
    if (bpf_map_update_elem(bpf_map__fd(skel_->maps.call_targets), &pid, &yes, BPF_ANY) != 0)
      throw CallCountError("cannot add pid " + std::to_string(pid) +
                           " to the call counter: " + std::strerror(errno));
    processes_.insert(pid);
  }

  void add_launched(int32_t pid, const std::string& executable, const std::string& shown) {
    add_target(pid);
    const FileState& exe = probe_file(executable, shown);
    if (!exe.scan.error.empty()) {
      stats_.messages.push_back("call counts: " + exe.scan.error);
    } else if (!exe.scan.instrumented()) {
      stats_.messages.push_back("call counts: " + shown + " has no mcount/__fentry__ instrumentation; " +
                                kBuildAdvice);
    } else if (exe.scan.counted_in_libc()) {
      // The dynamic loader will map the same libc as ours, almost always; another one is probed
      // when it shows up in the maps.
      if (const std::string libc = self_libc(); !libc.empty()) probe_libc_hooks(libc, libc, shown);
    }
  }

  void add_process(int32_t pid) {
    add_target(pid);
    const bool instrumented = scan_process(pid);
    if (!instrumented) {
      std::string exe;
      char buf[4096];
      const ssize_t n = ::readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), buf, sizeof buf - 1);
      if (n > 0) exe.assign(buf, size_t(n));
      stats_.messages.push_back("call counts: pid " + std::to_string(pid) +
                                (exe.empty() ? "" : " (" + exe + ")") +
                                " has no mcount/__fentry__ instrumentation in any module; " + kBuildAdvice);
    }
  }

  void add_child(int32_t pid) {
    add_target(pid);
    scan_process(pid);
  }

  void rescan(uint32_t min_interval_ms) {
    const uint64_t now = mono_ns();
    if (now - last_rescan_ < uint64_t{min_interval_ms} * 1000000) return;
    last_rescan_ = now;
    // Followed children are in the map only (the fork hook put them there).
    const int fd = bpf_map__fd(skel_->maps.call_targets);
    int32_t key = 0, next = 0;
    bool first = true;
    while (bpf_map_get_next_key(fd, first ? nullptr : &key, &next) == 0) {
      first = false;
      key = next;
      processes_.insert(key);
    }
    const int left = bpf_map__fd(skel_->maps.call_left);
    for (auto it = processes_.begin(); it != processes_.end();) {
      uint8_t value = 0;
      if (bpf_map_lookup_elem(left, &*it, &value) == 0) {
        // Out of the targets since its exec (hpd_calls_exec): its new program is not probed.
        note_left(*it);
        it = processes_.erase(it);
        continue;
      }
      if (::access(("/proc/" + std::to_string(*it)).c_str(), F_OK) != 0) {
        exited_.insert(*it);
        it = processes_.erase(it);
        continue;
      }
      scan_process(*it);
      ++it;
    }
  }

  CallCountStats finish(RawProfile& profile) {
    // Detach first: the counts are final, and the targets run unprobed from here on.
    links_.clear();
    fork_link_.reset();
    exec_link_.reset();
    read_counters();
    read_edges(profile);
    read_latency(profile);
    add_missing_mappings(profile);
    if (!time_asked_ && timeable_sites_ != 0)
      stats_.messages.push_back(
          "call latency: not measured (counting only, no return probes); ask for call latency to time "
          "the " +
          std::to_string(timeable_sites_) +
          " functions probed at their first instruction (more cost per call, and sampled stacks taken "
          "inside a timed call may not reach their root)");
    for (CallProbeHits& p : stats_.probe_points) {
      if (p.hits == 0) continue;
      std::string why;
      const auto index = static_cast<size_t>(&p - stats_.probe_points.data());
      const bool timed = index >= kSiteKindCount;
      p.ns_per_hit =
          measure_ns_per_hit(static_cast<SiteKind>(timed ? index - kSiteKindCount : index), timed, why);
      if (p.ns_per_hit == 0)
        note_once("cost",
                  "call counts: the probes' added cost is not stated: it could not be measured on "
                  "this machine (" +
                      why + ")");
    }
    return stats_;
  }

  const CallCountStats& stats() const { return stats_; }
  bool writes_timed_entries() const { return timing_ && skel_->rodata->share_timed_entries != 0; }

 private:
  struct FileState {
    ModuleInstrumentation scan;
    bool attached = false;
  };

  // A module a process maps, at which address (for the profile's mappings).
  struct SeenMapping {
    int32_t pid;
    MapsEntry line;
    const FileState* file;
    uint64_t time_ns;
  };

  // Scans and probes the modules `pid` maps; whether any of them is instrumented.
  bool scan_process(int32_t pid) {
    const std::vector<MapsEntry> maps = read_executable_maps(pid);
    // Read after the maps: a program the maps show was mapped by an exec that had committed its
    // credentials already, so a set-user-ID one is seen here even before hpd_calls_exec ran.
    if (options_.restrict_to_client && !maps.empty() &&
        !process_runs_as(pid, options_.client_uid, options_.client_gid)) {
      // Gone meanwhile (its status unreadable): an exit, not other credentials; the rescan sees it.
      if (::access(("/proc/" + std::to_string(pid)).c_str(), F_OK) != 0) return false;
      note_left(pid);
      // Out of the targets, and marked as left: the next rescan drops it (as after hpd_calls_exec).
      const int32_t key = pid;
      const uint8_t yes = 1;
      bpf_map_update_elem(bpf_map__fd(skel_->maps.call_left), &key, &yes, BPF_ANY);
      bpf_map_delete_elem(bpf_map__fd(skel_->maps.call_targets), &key);
      return false;
    }
    bool instrumented = false;
    bool needs_libc = false;
    std::string libc;
    std::string libc_user;
    for (const MapsEntry& m : maps) {
      const std::string openable = openable_path(pid, m);
      const FileState& f = probe_file(openable, m.path);
      if (seen_ranges_.insert({pid, m.start}).second) seen_.push_back(SeenMapping{pid, m, &f, mono_ns()});
      if (is_libc(m.path)) libc = openable;
      if (f.scan.instrumented() && !is_libc(m.path)) instrumented = true;
      if (f.scan.counted_in_libc()) {
        needs_libc = true;
        libc_user = m.path;
      }
    }
    if (needs_libc) {
      if (libc.empty()) {
        note_once("no libc in pid " + std::to_string(pid),
                  "call counts: " + libc_user + " calls mcount/__fentry__ but process " +
                      std::to_string(pid) + " maps no glibc; not counted");
      } else {
        probe_libc_hooks(libc, libc, libc_user);
      }
    }
    return instrumented;
  }

  // The mapped file, reached through the process's root when it lives in another mount namespace.
  static std::string openable_path(int32_t pid, const MapsEntry& m) {
    const std::string rooted = "/proc/" + std::to_string(pid) + "/root" + m.path;
    struct stat a, b;
    if (::stat(m.path.c_str(), &a) == 0 && ::stat(rooted.c_str(), &b) == 0 &&
        (a.st_dev != b.st_dev || a.st_ino != b.st_ino))
      return rooted;
    return m.path;
  }

  // Scans `path` once per file and attaches its NOP sites; files are told apart by device and inode.
  const FileState& probe_file(const std::string& path, const std::string& shown) {
    struct stat st;
    FileId id{0, 0};
    if (::stat(path.c_str(), &st) == 0) id = {st.st_dev, st.st_ino};
    auto it = files_.find(id);
    if (it != files_.end() && id != FileId{0, 0}) return it->second;
    FileState& f = files_[id];
    f.scan = scan_module(path);
    f.scan.path = shown;
    if (id != FileId{0, 0}) remember_file(st, shown, f.scan.build_id);
    if (f.scan.error.empty() && !f.scan.nop_sites.empty()) {
      attach(path, shown, f.scan.nop_sites);
      f.attached = true;
      ++stats_.modules_instrumented;
    } else if (f.scan.error.empty() && f.scan.counted_in_libc()) {
      ++stats_.modules_instrumented;
    }
    return f;
  }

  void probe_libc_hooks(const std::string& path, const std::string& shown, const std::string& user) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return;
    const FileId id{st.st_dev, st.st_ino};
    if (!libc_probed_.insert(id).second) return;
    const ModuleInstrumentation libc = scan_module(path);
    remember_file(st, shown, libc.build_id);
    if (timing_)
      note_once("timing libc",
                "call latency: not measured for the calls " + user +
                    " makes through glibc's mcount/__fentry__ (counted inside the hook, where the "
                    "function's return cannot be probed); build with -pg -mfentry -mnop-mcount "
                    "-mrecord-mcount (NOP sites at each function's first instruction) to have them timed");
    if (libc.hook_internal_sites.empty()) {
      stats_.messages.push_back(
          "call counts: " + user + " calls mcount/__fentry__, but the call to __mcount_internal inside " +
          shown +
          "'s hooks was not found (not a glibc of known layout); its calls are not counted. Probing the "
          "hook's "
          "entry would cost about 12 us per call; rebuild with -pg -mfentry -mnop-mcount -mrecord-mcount "
          "-fno-pie -no-pie to get NOP sites instead");
      return;
    }
    attach(path, shown, libc.hook_internal_sites);
  }

  // Whether a site is probed at entry and return: a NOP at the function's first instruction, where
  // the return address is on top of the stack (the kernel's return probe swaps it there).
  bool timed(const ProbeSite& s) const {
    return timing_ && s.mode == SiteMode::kAtEntry && s.kind != SiteKind::kCall;
  }

  void attach(const std::string& path, const std::string& shown, const std::vector<ProbeSite>& sites) {
    std::vector<ProbeSite> counted, timed_sites;
    for (const ProbeSite& s : sites) (timed(s) ? timed_sites : counted).push_back(s);
    if (!time_asked_)
      timeable_sites_ += static_cast<uint64_t>(std::ranges::count_if(sites, [](const ProbeSite& s) {
        return s.mode == SiteMode::kAtEntry && s.kind != SiteKind::kCall;
      }));
    const auto after_prologue =
        std::ranges::count_if(counted, [](const ProbeSite& s) { return s.mode == SiteMode::kAfterPrologue; });
    if (timing_ && after_prologue != 0)
      note_once("timing prologue " + shown,
                "call latency: not measured for the " + std::to_string(after_prologue) + " functions of " +
                    shown +
                    " probed after their prologue (built with -pg -mnop-mcount without -mfentry), where "
                    "the function's return cannot be probed; build with -pg -mfentry -mnop-mcount "
                    "-mrecord-mcount to have them timed");
    attach_sites(path, shown, counted, false);
    attach_sites(path, shown, timed_sites, true);
  }

  void attach_sites(const std::string& path, const std::string& shown, const std::vector<ProbeSite>& sites,
                    bool timed_sites) {
    if (sites.empty()) return;
    std::vector<uint64_t> offsets, cookies;
    offsets.reserve(sites.size());
    cookies.reserve(sites.size());
    for (const ProbeSite& s : sites) {
      offsets.push_back(s.file_offset);
      cookies.push_back(HPD_CALLS_COOKIE(static_cast<uint64_t>(s.mode), static_cast<uint64_t>(s.kind)));
    }
    const uint64_t begin = mono_ns();
    const int fd = link_sites(path, offsets, cookies, timed_sites);
    stats_.attach_ns += mono_ns() - begin;
    if (fd < 0) {
      stats_.messages.push_back("call counts: cannot attach " + std::to_string(sites.size()) + " probes to " +
                                shown + ": " + std::strerror(errno));
      return;
    }
    links_.emplace_back(fd);
    for (const ProbeSite& s : sites)
      ++stats_.probe_points[static_cast<size_t>(s.kind) + (timed_sites ? kSiteKindCount : 0)].sites;
  }

  // One uprobe_multi link on `offsets` of `path`: of the counting program, or of the timing one in
  // session mode; its fd, or -1 (errno set).
  int link_sites(const std::string& path, const std::vector<uint64_t>& offsets,
                 const std::vector<uint64_t>& cookies, bool timed_sites) {
    if (timed_sites)
      return uprobe_multi::link(bpf_program__fd(skel_->progs.hpd_time_call),
                                uprobe_multi::kAttachUprobeSession, path, offsets, cookies);
    return uprobe_multi::link(bpf_program__fd(skel_->progs.hpd_count_call), uprobe_multi::kAttachUprobeMulti,
                              path, offsets, cookies);
  }

  // What one hit of a probe on a site of `kind` adds to a target's CPU time on this machine, in ns:
  // this program (the timing one at entry and return when `timed`) attached to a function of hpd's
  // own executable whose first instruction is such a site, hpd's pid a target meanwhile; (CPU of N probed
  // calls - CPU of N unprobed calls) / N on this thread's CPU clock (the kernel's uprobe work is charged
  // to it). On a virtual machine the cost of a hit drifts between states that last 50-100 ms (here 550
  // and 850 ns per nop5 hit): the median of rounds taken back to back measured one state, up to 1.5x
  // what the probes added to a target over its recording. So the probed rounds are spread over about
  // 100 ms and their trimmed mean taken, as a target's calls average over its run. Runs after the
  // targets' counts were read. 0, with `why`, when it could not be measured.
  uint64_t measure_ns_per_hit(SiteKind kind, bool timed_site, std::string& why) {
    const auto address = reinterpret_cast<uint64_t>(
        kind == SiteKind::kNop5   ? reinterpret_cast<void*>(&hpd_calls_calibration_nop5)
        : kind == SiteKind::kNop1 ? reinterpret_cast<void*>(&hpd_calls_calibration_nop1)
                                  : reinterpret_cast<void*>(&hpd_calls_calibration_call));
    std::string path;
    uint64_t file_offset = 0;
    for (const MapsEntry& m : read_executable_maps(static_cast<int32_t>(::getpid()))) {
      if (address < m.start || address >= m.end) continue;
      path = m.path;
      file_offset = address - m.start + m.offset;
      break;
    }
    if (path.empty()) {
      why = "hpd's own code is not mapped from a file";
      return 0;
    }
    auto call = [kind](int n) {
      for (int i = 0; i < n; ++i) {
        if (kind == SiteKind::kNop5)
          hpd_calls_calibration_nop5();
        else if (kind == SiteKind::kNop1)
          hpd_calls_calibration_nop1();
        else
          hpd_calls_calibration_call(0x1000, 0x2000);
      }
    };
    constexpr int kCalls = 500;
    constexpr int kRounds = 32;
    constexpr int kTrimmed = kRounds / 8;  // dropped at each end: a round an interrupt or steal landed in
    // The mean over kRounds rounds of kCalls calls, `gap_us` apart, less the kTrimmed extremes each way.
    auto round_ns = [&](unsigned gap_us) {
      std::vector<uint64_t> rounds;
      for (int r = 0; r < kRounds; ++r) {
        if (gap_us != 0) {
          ::usleep(gap_us);
          call(4);  // back on a CPU: the site's code and the kernel's path warm again, as in a target's loop
        }
        timespec a{}, b{};
        ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
        call(kCalls);
        ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        rounds.push_back(uint64_t((b.tv_sec - a.tv_sec) * 1000000000ll + (b.tv_nsec - a.tv_nsec)));
      }
      std::sort(rounds.begin(), rounds.end());
      uint64_t sum = 0;
      for (int r = kTrimmed; r < kRounds - kTrimmed; ++r) sum += rounds[static_cast<size_t>(r)];
      return sum / (kRounds - 2 * kTrimmed);
    };
    const uint64_t plain = round_ns(0);
    const SiteMode mode = kind == SiteKind::kCall ? SiteMode::kMcountInternal : SiteMode::kAtEntry;
    const int fd =
        link_sites(path, {file_offset},
                   {HPD_CALLS_COOKIE(static_cast<uint64_t>(mode), static_cast<uint64_t>(kind))}, timed_site);
    if (fd < 0) {
      why = std::string("cannot probe hpd's own ") + to_string(kind) + " site: " + std::strerror(errno);
      return 0;
    }
    const UprobeLink link(fd);
    const int32_t self = static_cast<int32_t>(::getpid());
    const uint8_t yes = 1;
    const int targets = bpf_map__fd(skel_->maps.call_targets);
    const bool targeted = bpf_map_update_elem(targets, &self, &yes, BPF_ANY) == 0;
    call(1);  // the first hit may set the site up (a nop5 becomes a call to the kernel's trampoline)
    const uint64_t probed = round_ns(3000);
    if (targeted) bpf_map_delete_elem(targets, &self);
    if (!targeted || probed <= plain) {
      why = !targeted ? "cannot make hpd a target of its own probe" : "the probed calls were not slower";
      return 0;
    }
    return (probed - plain) / kCalls;
  }

  void remember_file(const struct stat& st, const std::string& path, const std::string& build_id) {
    known_files_[{major(st.st_dev), minor(st.st_dev), st.st_ino}] = {path, build_id};
  }

  // A target that executed a program with credentials the client may not trace: said once.
  void note_left(int32_t pid) {
    note_once("left " + std::to_string(pid),
              "call counts: pid " + std::to_string(pid) +
                  " executed a program that runs with credentials other than yours; its calls from then on "
                  "were not counted");
  }

  void note_once(const std::string& key, const std::string& message) {
    if (noted_.insert(key).second) stats_.messages.push_back(message);
  }

  void read_counters() {
    const int cpus = libbpf_num_possible_cpus();
    if (cpus <= 0) return;
    std::vector<uint64_t> per_cpu(static_cast<size_t>(cpus));
    uint64_t totals[HPD_CALLS_COUNTER_COUNT] = {};
    for (uint32_t i = 0; i < HPD_CALLS_COUNTER_COUNT; ++i) {
      if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.call_counters), &i, per_cpu.data()) != 0) continue;
      for (const uint64_t v : per_cpu) totals[i] += v;
    }
    for (size_t k = 0; k < kSiteKindCount; ++k) stats_.probe_points[k].hits = totals[HPD_CALLS_HITS_NOP5 + k];
    stats_.probe_points[kSiteKindCount + size_t(SiteKind::kNop5)].hits = totals[HPD_CALLS_HITS_NOP5_TIMED];
    stats_.probe_points[kSiteKindCount + size_t(SiteKind::kNop1)].hits = totals[HPD_CALLS_HITS_NOP1_TIMED];
    stats_.calls_not_timed = totals[HPD_CALLS_NOT_TIMED];
    stats_.other_process_hits = totals[HPD_CALLS_OTHER_HITS];
    stats_.calls_not_counted = totals[HPD_CALLS_MAP_FULL] + totals[HPD_CALLS_READ_FAILED];
  }

  void read_edges(RawProfile& profile) {
    const int cpus = libbpf_num_possible_cpus();
    if (cpus <= 0) return;
    const int fd = bpf_map__fd(skel_->maps.call_edges);
    std::vector<uint64_t> per_cpu(static_cast<size_t>(cpus));
    hpd_call_edge_key key{}, next{};
    bool first = true;
    while (bpf_map_get_next_key(fd, first ? nullptr : &key, &next) == 0) {
      first = false;
      key = next;
      if (bpf_map_lookup_elem(fd, &key, per_cpu.data()) != 0) continue;
      uint64_t count = 0;
      for (const uint64_t v : per_cpu) count += v;
      if (count == 0) continue;
      profile.call_edges.push_back(RawCallEdge{key.pid, key.caller, key.callee, count});
      ++stats_.edges;
    }
  }

  // The timed functions' latency, summed over CPUs: per (process, function) the sums, and the
  // histogram in ns (one tick = 1 ns: the program reads bpf_ktime_get_ns, CLOCK_MONOTONIC).
  void read_latency(RawProfile& profile) {
    if (!timing_) return;
    const int cpus = libbpf_num_possible_cpus();
    if (cpus <= 0) return;
    std::map<std::pair<int32_t, uint64_t>, RawCallLatency> by_fn;
    const int fd = bpf_map__fd(skel_->maps.call_latency);
    std::vector<hpd_call_latency> per_cpu(static_cast<size_t>(cpus));
    hpd_call_fn_key key{}, next{};
    bool first = true;
    while (bpf_map_get_next_key(fd, first ? nullptr : &key, &next) == 0) {
      first = false;
      key = next;
      if (bpf_map_lookup_elem(fd, &key, per_cpu.data()) != 0) continue;
      RawCallLatency l;
      l.pid = key.pid;
      l.callee_address = key.callee;
      l.histogram.ns_per_tick = 1.0;
      for (const hpd_call_latency& v : per_cpu) {
        l.calls += v.calls;
        l.sum_ns += v.sum_ns;
        l.outer_ns += v.outer_ns;
        l.max_ns = std::max<uint64_t>(l.max_ns, v.max_ns);
      }
      if (l.calls != 0) by_fn[{key.pid, key.callee}] = std::move(l);
    }
    const int hist_fd = bpf_map__fd(skel_->maps.call_hist);
    std::vector<uint64_t> counts(static_cast<size_t>(cpus));
    std::map<std::pair<int32_t, uint64_t>, std::map<uint32_t, uint64_t>> buckets;
    hpd_call_hist_key hkey{}, hnext{};
    first = true;
    while (bpf_map_get_next_key(hist_fd, first ? nullptr : &hkey, &hnext) == 0) {
      first = false;
      hkey = hnext;
      if (bpf_map_lookup_elem(hist_fd, &hkey, counts.data()) != 0) continue;
      uint64_t n = 0;
      for (const uint64_t v : counts) n += v;
      if (n != 0) buckets[{hkey.pid, hkey.callee}][hkey.bucket] += n;
    }
    for (auto& [fn, l] : by_fn) {
      if (auto it = buckets.find(fn); it != buckets.end())
        l.histogram.buckets.assign(it->second.begin(), it->second.end());
      profile.call_latency.push_back(std::move(l));
    }
  }

  // The sampling backend may never have seen a module that only the call edges touch (a library
  // dlopen'd and left without samples, a command that exited before its maps were read): give the
  // profile the mappings the counter saw in /proc, and those the program recorded per new edge.
  void add_missing_mappings(RawProfile& profile) {
    std::set<int32_t> edge_pids;
    for (const RawCallEdge& e : profile.call_edges) edge_pids.insert(e.pid);
    const auto add = [&](int32_t pid, uint64_t start, uint64_t end, uint64_t offset, const std::string& path,
                         const std::string& build_id, uint64_t time_ns) {
      RawProcess& process = profile.process(pid);
      const bool known = std::any_of(
          process.mappings.begin(), process.mappings.end(),
          [&](const RawMapping& m) { return m.start <= start && end <= m.end && m.unmapped_ns == 0; });
      if (known) return;
      RawMapping m;
      m.start = start;
      m.end = end;
      m.file_offset = offset;
      m.module = profile.intern_module(path, build_id);
      m.time_ns = time_ns;
      process.mappings.push_back(m);
    };
    for (const SeenMapping& s : seen_) {
      if (!edge_pids.contains(s.pid) || !s.file->scan.error.empty()) continue;
      add(s.pid, s.line.start, s.line.end, s.line.offset, s.line.path, s.file->scan.build_id, s.time_ns);
    }
    const int fd = bpf_map__fd(skel_->maps.call_vmas);
    const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    hpd_call_vma_key key{}, next{};
    hpd_call_vma vma{};
    bool first = true;
    while (bpf_map_get_next_key(fd, first ? nullptr : &key, &next) == 0) {
      first = false;
      key = next;
      if (!edge_pids.contains(key.pid) || bpf_map_lookup_elem(fd, &key, &vma) != 0 || vma.ino == 0) continue;
      const auto file = known_files_.find({vma.dev_major, vma.dev_minor, vma.ino});
      if (file == known_files_.end()) continue;
      // Time 0: valid for the whole recording, as for mappings present when it began.
      add(key.pid, key.start, vma.end, vma.pgoff * page, file->second.first, file->second.second, 0);
    }
  }

  std::string timing_refused_;  // why the timing program could not be loaded ("" = it was, or not asked)
  CallCounterOptions options_;
  Skeleton skel_;
  bool timing_ = false;          // NOP sites at functions' entries are probed at entry and return
  bool time_asked_ = false;      // CallCounterOptions::time_calls
  uint64_t timeable_sites_ = 0;  // not asked: sites --call-latency would have timed
  TracepointLink fork_link_;
  TracepointLink exec_link_;  // hpd_calls_exec, for a restricted client
  std::vector<UprobeLink> links_;
  std::map<FileId, FileState> files_;
  std::set<FileId> libc_probed_;
  // (major, minor, inode) -> (path, build-id) of every file scanned, to name the program's mappings.
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, std::pair<std::string, std::string>> known_files_;
  std::set<int32_t> processes_;
  std::set<int32_t> exited_;
  std::set<std::pair<int32_t, uint64_t>> seen_ranges_;
  std::vector<SeenMapping> seen_;
  std::set<std::string> noted_;
  uint64_t last_rescan_ = 0;
  CallCountStats stats_;
};

CallCounter::CallCounter(CallCounterOptions options) : impl_(std::make_unique<Impl>(options)) {}
CallCounter::~CallCounter() = default;

void CallCounter::add_launched(int32_t pid, const std::string& executable, const std::string& shown) {
  impl_->add_launched(pid, executable, shown.empty() ? executable : shown);
}
void CallCounter::add_process(int32_t pid) {
  impl_->add_process(pid);
}
void CallCounter::add_child(int32_t pid) {
  impl_->add_child(pid);
}
void CallCounter::rescan(uint32_t min_interval_ms) {
  impl_->rescan(min_interval_ms);
}
CallCountStats CallCounter::finish(RawProfile& profile) {
  return impl_->finish(profile);
}
bool CallCounter::writes_timed_entries() const {
  return impl_->writes_timed_entries();
}

const CallCountStats& CallCounter::stats() const {
  return impl_->stats();
}

std::string call_counter_unavailable_reason() {
  try {
    std::string timing_refused;
    Skeleton skel = load_program(CallCounterOptions{.follow_children = false}, timing_refused);
    return "";
  } catch (const CallCountError& e) {
    return e.what();
  }
}

}  // namespace hpd::calls
