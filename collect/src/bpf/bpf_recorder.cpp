// eBPF recording: load the programs, point them at the targets, drive them with perf events (per
// thread task-clock for pid and command targets, per-CPU cpu-clock for --all and --cgroup), and
// turn their ring-buffer records into a RawProfile.
//
// Resources are owned by RAII members declared in the order they must be released in reverse:
// the skeleton (programs, maps, tracepoint links) outlives the perf-event links and the ring-buffer
// reader that refer to its maps and programs.
#include "bpf/bpf_recorder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstring>

#include "hpd/base/proc_files.h"

#ifdef HPD_HAVE_BPF
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include <algorithm>
#include <condition_variable>
#include <cstdarg>
#include <exception>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "bpf/bpf_event_decoder.h"
#include "bpf/cfi_maps.h"
#include "bpf/mmap_watch.h"
#include "bpf/off_cpu_rewalk.h"
#include "bpf/sched_frames.h"
#include "hpd/base/proc_maps.h"
#include "hpd/base/process.h"
#include "hpd/base/unique_fd.h"
#include "hpd/calls/preload_abi.h"
#include "hpd/collect/call_graph_choice.h"
#include "hpd/symbolizer/symbolizer.h"
#include "proc/build_id.h"
#include "raw_profile_builder.h"
#include "recording_calls.h"
#include "recording_common.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include "profile.skel.h"
#pragma GCC diagnostic pop
#endif

namespace hpd {

bool needs_bpf(const RecordOptions& options) {
  return options.all_processes || !options.cgroup.empty() || options.call_graph == CallGraph::kCfi;
}

bool off_cpu_enabled(const RecordOptions& options) {
  if (options.off_cpu == OffCpu::kAuto) return !options.all_processes;
  return options.off_cpu == OffCpu::kOn;
}

std::string bpf_unavailable_reason(const PerfPrivileges& privileges) {
#ifndef HPD_HAVE_BPF
  (void)privileges;
  return "hpd was built without the eBPF backend (clang, bpftool or libbpf were missing at build time)";
#else
  struct stat st;
  if (::stat("/sys/kernel/btf/vmlinux", &st) != 0) {
    return "the kernel has no BTF type information (/sys/kernel/btf/vmlinux is missing; it needs "
           "CONFIG_DEBUG_INFO_BTF=y)";
  }
  if (!privileges.may_use_bpf()) {
    return "loading eBPF programs needs CAP_BPF and CAP_PERFMON (or root)";
  }
  return "";
#endif
}

#ifndef HPD_HAVE_BPF

std::string bpf_load_check() {
  return bpf_unavailable_reason(PerfPrivileges{});
}

RecordResult record_with_bpf(const RecordOptions&, const PerfPrivileges& privileges) {
  throw BpfUnavailable("the eBPF backend cannot be used: " + bpf_unavailable_reason(privileges));
}

void bpf_prepare(const RecordOptions&, const PerfPrivileges&) {}

PreparedRecordingStatus bpf_prepared_status() {
  return {};
}

void bpf_release_prepared() {}

// Without the eBPF backend no recording has CFI maps.
CfiMapsStatus cfi_maps_status() {
  return {};
}

// Nor keeps a table: the bound is only remembered.
namespace {
uint64_t kept_limit_bytes = kDefaultKeptCfiTablesBytes;
}  // namespace

KeptCfiTablesStatus kept_cfi_tables_status() {
  KeptCfiTablesStatus out;
  out.limit_bytes = kept_limit_bytes;
  return out;
}

uint64_t set_kept_cfi_tables_limit(uint64_t bytes) {
  kept_limit_bytes = bytes;
  return 0;
}

#else

namespace {

constexpr int kPollTimeoutMs = 100;
// The loop's timeout while the kernel's symbols are read in the background.
constexpr int kKallsymsPollMs = 5;
// Pid and command targets are sampled with one inherited task-clock event per thread: its timer runs
// only while the thread runs, so neither the target's CPU nor an idle one takes interrupts that
// find nothing to record (per-CPU events cost the target ~15 us more per sample on the project's
// machine, docs/performance.md). Beyond this many threads (two descriptors each) per-CPU events
// are cheaper to hold.
constexpr size_t kMaxPerTaskEvents = 4096;
// Rounds of looking for threads that a not-yet-attached thread created during the attach.
constexpr int kMaxAttachRescans = 8;

// libbpf reports through one global callback; warnings of the current thread's attempt are kept for
// the error message, debug chatter is dropped.
thread_local std::string* libbpf_log = nullptr;

int libbpf_print(enum libbpf_print_level level, const char* format, va_list args) {
  if (level == LIBBPF_DEBUG || libbpf_log == nullptr || libbpf_log->size() > 16384) return 0;
  char line[1024];
  const int n = std::vsnprintf(line, sizeof line, format, args);
  if (n > 0) libbpf_log->append(line, std::min<size_t>(size_t(n), sizeof line - 1));
  return 0;
}

// Captures libbpf's messages for the lifetime of the object.
class LibbpfLogCapture {
 public:
  LibbpfLogCapture() {
    static std::once_flag once;
    std::call_once(once, [] { libbpf_set_print(libbpf_print); });
    previous_ = libbpf_log;
    libbpf_log = &text_;
  }
  ~LibbpfLogCapture() { libbpf_log = previous_; }
  LibbpfLogCapture(const LibbpfLogCapture&) = delete;
  LibbpfLogCapture& operator=(const LibbpfLogCapture&) = delete;

  // The last lines, which name the failing program or map.
  [[nodiscard]] std::string tail() const {
    std::string t = text_;
    while (!t.empty() && t.back() == '\n') t.pop_back();
    size_t cut = t.size();
    for (int lines = 0; lines < 3 && cut != std::string::npos && cut > 0; ++lines)
      cut = t.rfind('\n', cut - 1);
    if (cut != std::string::npos && cut < t.size()) t = t.substr(cut + 1);
    return t;
  }

 private:
  std::string text_;
  std::string* previous_ = nullptr;
};

struct SkeletonDeleter {
  void operator()(profile_bpf* skel) const { profile_bpf__destroy(skel); }
};
using Skeleton = std::unique_ptr<profile_bpf, SkeletonDeleter>;

struct LinkDeleter {
  void operator()(bpf_link* link) const { bpf_link__destroy(link); }
};
using Link = std::unique_ptr<bpf_link, LinkDeleter>;

struct RingBufferDeleter {
  void operator()(ring_buffer* rb) const { ring_buffer__free(rb); }
};
using RingReader = std::unique_ptr<ring_buffer, RingBufferDeleter>;

std::string errno_text(int err) {
  return std::strerror(err < 0 ? -err : err);
}

std::string with_log(std::string text, const LibbpfLogCapture& log) {
  const std::string tail = log.tail();
  if (!tail.empty()) text += " (libbpf: " + tail + ")";
  return text;
}

// Opens the skeleton; throws BpfUnavailable when libbpf cannot parse the embedded object.
Skeleton open_skeleton(const LibbpfLogCapture& log) {
  Skeleton skel(profile_bpf__open());
  if (!skel) throw BpfUnavailable(with_log("cannot open hpd's eBPF object: " + errno_text(errno), log));
  return skel;
}

void load_skeleton(profile_bpf* skel, const LibbpfLogCapture& log) {
  const int err = profile_bpf__load(skel);
  if (err != 0) {
    throw BpfUnavailable(with_log("the kernel refused hpd's eBPF programs: " + errno_text(err), log));
  }
}

// fp mode copies this much stack per on-CPU sample, for the frameless leaf's return address (CFI
// puts it within the first few dozen bytes). Every byte is written into the ring and costs the
// target time: 128 put back as many callers as 256 on the test fixtures and 1% fewer on xz, 64 lost
// 3% on xz, 32 lost most (docs/performance.md).
constexpr uint32_t kLeafStackBytes = 128;
// hpd_warm_ring writes one record per page of this size (its PAGE_BYTES).
constexpr long kWarmPageBytes = 4096;
// cfi mode copies this much stack with an on-CPU sample whose walk met a table not published yet (a
// process's first milliseconds, a library just loaded), for user space to walk it again with the
// tables (BpfEventDecoder::release_held): the frames of most programs' stacks, not a deep recursion's.
constexpr uint32_t kPendingStackBytes = 16384;
// Records held for a second walk at most (BpfEventDecoder::hold_pending_walks): a few seconds of samples
// of a CPU; beyond, they keep the programs' walk.
constexpr size_t kMaxHeldBytes = 64u << 20;
// At the end of a recording, how long held samples wait for the tables they need.
constexpr int kFinalTablesWaitMs = 3000;
// The verifier bounds the stack copy's offset and its last read's size separately: one page of room.
constexpr uint32_t kScratchSlackBytes = 4096;

// Writing the ring's pages once before recording (hpd_warm_ring) needs syscall programs and
// bpf_loop (Linux 5.17); without them the target pays each page's first write instead. Probed once
// per process (each probe loads a program), not per recording.
bool kernel_can_warm_ring() {
  static const bool can = ::sysconf(_SC_PAGESIZE) == kWarmPageBytes &&
                          libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_SYSCALL, nullptr) == 1 &&
                          libbpf_probe_bpf_helper(BPF_PROG_TYPE_SYSCALL, BPF_FUNC_loop, nullptr) == 1;
  return can;
}

// How long the recording waits, before sampling starts, for the tables of the modules mapped then.
constexpr int kInitialTablesWaitMs = 10000;

uint32_t stack_copy_bytes(const RecordOptions& options) {
  // cfi mode walks the whole stack in the kernel: no copy, no registers.
  if (options.call_graph == CallGraph::kCfi) return 0;
  if (options.call_graph != CallGraph::kDwarf) return kLeafStackBytes;
  return options.stack_copy_bytes == 0 ? kDefaultStackCopyBytes : options.stack_copy_bytes;
}

// The ring buffer: about a quarter of a second of samples from every CPU, a power of two in
// [1, 64] MiB. The recorder drains it every 100 ms and when a quarter of it is full, so that is
// ample; a larger ring costs the target time, because every record then goes to memory that has
// left the caches since the ring last came round (8 MiB instead of 1 MiB cost about 0.4 us more per
// sample on the project's machine).
uint32_t choose_ring_bytes(const RecordOptions& options, size_t cpus) {
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (options.ring_pages != 0) return static_cast<uint32_t>(std::max<uint64_t>(options.ring_pages, 1) * page);
  // The fixed part and a 24-frame stack, plus the stack copy (most of a dwarf record).
  const uint64_t record = offsetof(hpd_sample_event, ips) + 24 * sizeof(uint64_t) + stack_copy_bytes(options);
  const uint64_t want = uint64_t{options.frequency_hz} * std::max<size_t>(cpus, 1) * record / 4;
  uint64_t bytes = 1ULL << 20;
  while (bytes < (64ULL << 20) && bytes < want) bytes *= 2;
  return static_cast<uint32_t>(std::max(bytes, page));
}

UniqueFd open_cgroup(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) throw RecordError("cannot open cgroup " + path + ": " + std::strerror(errno));
  return fd;
}

// The process ran out of file descriptors while attaching per-thread events (two each).
class OutOfDescriptors : public RecordError {
 public:
  using RecordError::RecordError;
};

// Everything a loaded skeleton is fixed to: its read-only configuration, the sizes of its maps, the
// programs loaded. Recordings with equal LoadConfigs can use programs loaded alike, ahead of time.
// The client's uid and gid are not in it: they are written after the load (.bss).
struct LoadConfig {
  uint32_t filter_mode = HPD_FILTER_PIDS;
  bool follow_children = false;
  bool capture_kernel = false;
  bool restrict_creds = false;
  uint64_t off_cpu_min_ns = 0;
  uint64_t sample_period_ns = 0;
  uint32_t ring_bytes = 0;
  uint32_t stack_copy = 0;
  uint32_t pending_copy = 0;  // cfi mode: the stack copied with samples whose tables were pending
  bool dwarf = false;
  bool cfi = false;
  uint32_t cfi_rows = 0;
  uint32_t cfi_index = 0;
  bool off_cpu = false;
  bool attach_state = false;  // hpd_attach_state loaded (pid targets with off-CPU samples)
  bool warm_ring = false;
  bool operator==(const LoadConfig&) const = default;
};

LoadConfig load_config_of(const RecordOptions& options, const PerfPrivileges& privileges, size_t cpus) {
  LoadConfig c;
  if (options.all_processes)
    c.filter_mode = HPD_FILTER_ALL;
  else if (!options.cgroup.empty())
    c.filter_mode = HPD_FILTER_CGROUP;
  c.follow_children = options.follow_children;
  c.capture_kernel = options.kernel == KernelFrames::kOn ||
                     (options.kernel == KernelFrames::kAuto && privileges.may_see_kernel());
  c.restrict_creds = options.restrict_to_client;
  c.off_cpu_min_ns = uint64_t{options.off_cpu_min_us} * 1000;
  c.sample_period_ns = std::max<uint64_t>(1, 1'000'000'000ULL / options.frequency_hz);
  c.ring_bytes = choose_ring_bytes(options, cpus);
  c.stack_copy = stack_copy_bytes(options);
  c.dwarf = options.call_graph == CallGraph::kDwarf;
  c.cfi = options.call_graph == CallGraph::kCfi;
  // Pid targets and commands only: system-wide, a cold cache leaves most samples waiting for tables for
  // seconds (docs/performance.md), and copying each would multiply the ring's traffic by 40.
  c.pending_copy = c.cfi && c.filter_mode == HPD_FILTER_PIDS ? kPendingStackBytes : 0;
  const uint32_t rows = options.cfi_row_capacity != 0 ? options.cfi_row_capacity : kDefaultCfiRowCapacity;
  // Each module's index has at most a quarter as many buckets as the module has rows, and at least
  // one: room for as many tiny modules again.
  c.cfi_rows = c.cfi ? rows : 1;
  c.cfi_index = c.cfi ? rows / 4 + 16384 : 1;
  c.off_cpu = off_cpu_enabled(options);
  // Attach-time state (attach_state.bpf.h): the threads of pid targets that are off the CPU when the
  // recording begins. A launched command has none; system-wide recordings are not covered. (A command
  // hpctl launches through hpd is a pid target held at its exec: it has the program, which finds none.)
  c.attach_state = c.off_cpu && c.filter_mode == HPD_FILTER_PIDS && !options.pids.empty();
  c.warm_ring = kernel_can_warm_ring();
  return c;
}

// Opens and loads the programs and maps for `c`. Throws BpfUnavailable when the object cannot be
// parsed or the kernel refuses it, RecordError for a map that cannot be sized.
Skeleton load_skeleton_for(const LoadConfig& c, const LibbpfLogCapture& log) {
  Skeleton skel = open_skeleton(log);
  auto* config = skel->rodata;
  config->filter_mode = c.filter_mode;
  config->self_pid = ::getpid();
  config->follow_children = c.follow_children ? 1 : 0;
  config->capture_kernel = c.capture_kernel ? 1 : 0;
  config->restrict_creds = c.restrict_creds ? 1 : 0;
  config->off_cpu_min_ns = c.off_cpu_min_ns;
  config->sample_period_ns = c.sample_period_ns;
  config->wakeup_bytes = c.ring_bytes / 4;
  int err = bpf_map__set_max_entries(skel->maps.events, c.ring_bytes);
  if (err != 0) throw RecordError("cannot size the eBPF ring buffer: " + errno_text(err));
  config->stack_copy_bytes = c.stack_copy;
  config->user_stack_from_copy = c.dwarf ? 1 : 0;
  // dwarf mode unwinds off-CPU stacks too, from a copy taken at the switch-out.
  config->switch_stack_copy = c.dwarf && c.off_cpu ? 1 : 0;
  config->cfi_unwind = c.cfi ? 1 : 0;
  config->pending_stack_copy_bytes = c.pending_copy;
  // Without cfi mode the table maps take no memory.
  err = bpf_map__set_max_entries(skel->maps.cfi_rows, c.cfi_rows);
  if (err == 0) err = bpf_map__set_max_entries(skel->maps.cfi_index, c.cfi_index);
  if (err == 0 && !c.cfi) err = bpf_map__set_max_entries(skel->maps.proc_mappings, 1);
  if (err != 0) throw RecordError("cannot size the eBPF CFI maps: " + errno_text(err));
  // One record buffer per possible CPU: every frame, the copy and a page (see profile.bpf.c).
  const int possible = libbpf_num_possible_cpus();
  if (possible <= 0) throw RecordError("cannot count the possible CPUs: " + errno_text(possible));
  err = bpf_map__set_max_entries(skel->maps.sample_scratch, static_cast<uint32_t>(possible));
  if (err == 0)
    err = bpf_map__set_value_size(
        skel->maps.sample_scratch,
        static_cast<uint32_t>(sizeof(hpd_sample_event) + std::max(c.stack_copy, c.pending_copy) +
                              kScratchSlackBytes));
  if (err != 0) throw RecordError("cannot size the eBPF record buffers: " + errno_text(err));
  // One per program that walks (on-CPU, sched_switch, exit): CFI_WINDOW_SLOTS in cfi_walk.bpf.h.
  err = bpf_map__set_max_entries(skel->maps.cfi_windows, static_cast<uint32_t>(3 * possible));
  if (err != 0) throw RecordError("cannot size the eBPF stack windows: " + errno_text(err));
  // Without off-CPU samples the scheduler hooks are not even loaded: context switches and wakeups cost
  // nothing.
  bpf_program__set_autoload(skel->progs.hpd_sched_switch, c.off_cpu);
  bpf_program__set_autoload(skel->progs.hpd_sched_wakeup, c.off_cpu);
  bpf_program__set_autoload(skel->progs.hpd_attach_state, c.attach_state);
  bpf_program__set_autoattach(skel->progs.hpd_attach_state, false);  // run, not attached, by user space
  config->warm_pages = c.warm_ring ? c.ring_bytes / kWarmPageBytes : 0;
  bpf_program__set_autoload(skel->progs.hpd_warm_ring, c.warm_ring);
  load_skeleton(skel.get(), log);
  return skel;
}

// hpd's programs loaded ahead (RecordOptions::load_next_ahead, prepare_recording): one worker thread
// keeps one skeleton loaded for the LoadConfig wanted, and a recording with that LoadConfig takes it
// instead of loading its own, then only fills its maps and attaches. The skeleton taken is the
// session's, destroyed with it as a cold one is; the next is loaded once the session has attached,
// so that the load does not compete with the attach for the CPU.
class Preloader {
 public:
  static Preloader& instance() {
    static Preloader preloader;
    return preloader;
  }
  ~Preloader() { stop(); }

  // Keeps a skeleton like `c` loaded from now on (a ready one of another LoadConfig is dropped).
  void want(const LoadConfig& c) {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    wanted_ = c;
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    changed_.notify_all();
  }

  // The ready skeleton when its LoadConfig is `c` (one being loaded for `c` is waited for); nothing
  // otherwise. The next is loaded when want() is called again. cfi mode: `arrays` gets its row and
  // index maps, mapped into this process ahead too (empty when that failed: the session maps them).
  Skeleton take(const LoadConfig& c, CfiMaps::MappedArrays* arrays) {
    std::unique_lock lock(mutex_);
    if (loading_ && loading_config_ == c) changed_.wait(lock, [&] { return !loading_; });
    if (!ready_ || !(ready_config_ == c)) return {};
    wanted_.reset();
    ++taken_;
    *arrays = std::move(ready_arrays_);
    return std::move(ready_);
  }

  // Drops the ready skeleton and ends the worker (hpd's stop); want() does nothing afterwards.
  void stop() {
    std::thread worker;
    Skeleton dropped;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      wanted_.reset();
      ready_arrays_.reset();
      dropped = std::move(ready_);
      worker = std::move(thread_);
      changed_.notify_all();
    }
    if (worker.joinable()) worker.join();
  }

  PreparedRecordingStatus status() {
    std::lock_guard lock(mutex_);
    PreparedRecordingStatus s;
    s.ready = ready_ != nullptr;
    s.loading = loading_;
    s.loads = loads_;
    s.taken = taken_;
    s.error = error_;
    return s;
  }

 private:
  Preloader() = default;

  bool needs_load() const {
    if (!wanted_) return false;
    if (ready_ && ready_config_ == *wanted_) return false;
    return !(failed_config_ && *failed_config_ == *wanted_);
  }

  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stopping_ || needs_load(); });
      if (stopping_) return;
      const LoadConfig c = *wanted_;
      Skeleton old = std::move(ready_);  // of another LoadConfig
      CfiMaps::MappedArrays old_arrays = std::move(ready_arrays_);
      loading_ = true;
      loading_config_ = c;
      lock.unlock();
      old_arrays.reset();
      old.reset();
      Skeleton skel;
      CfiMaps::MappedArrays arrays;
      std::string error;
      try {
        LibbpfLogCapture log;
        skel = load_skeleton_for(c, log);
      } catch (const std::exception& e) {
        error = e.what();
      }
      if (skel && c.cfi) {
        try {
          arrays = CfiMaps::map_arrays(bpf_map__fd(skel->maps.cfi_rows), c.cfi_rows,
                                       bpf_map__fd(skel->maps.cfi_index), c.cfi_index);
        } catch (const RecordError&) {
          // The session maps them itself, and says why if it cannot.
        }
      }
      lock.lock();
      loading_ = false;
      if (skel) {
        ++loads_;
        ready_arrays_ = std::move(arrays);
        ready_ = std::move(skel);
        ready_config_ = c;
        error_.clear();
      } else {
        failed_config_ = c;  // not tried again for it: the session's own load reports the error
        error_ = error;
      }
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<LoadConfig> wanted_;
  Skeleton ready_;
  CfiMaps::MappedArrays ready_arrays_;  // cfi mode: ready_'s row and index maps, mapped here
  LoadConfig ready_config_;
  bool loading_ = false;
  LoadConfig loading_config_;
  std::optional<LoadConfig> failed_config_;
  std::string error_;
  uint64_t loads_ = 0;
  uint64_t taken_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

class BpfSession {
 public:
  BpfSession(const RecordOptions& options, const PerfPrivileges& privileges)
      : options_(options), cpus_(online_cpus()), config_(load_config_of(options, privileges, cpus_.size())) {
    kernel_frames_ = config_.capture_kernel;
    off_cpu_ = config_.off_cpu;
    dwarf_ = config_.dwarf;
    cfi_ = config_.cfi;
    stack_copy_ = config_.stack_copy;
    period_ns_ = config_.sample_period_ns;
    filter_ = config_.filter_mode;
    attach_state_ = config_.attach_state;
    warm_ring_ = config_.warm_ring;
  }

  RecordResult run();

 private:
  void load();
  void warm_ring();
  void set_targets();
  void attach_sampling();
  void attach_calls_unwind(const std::string& runtime);
  bool attach_per_task();
  void attach_per_cpu();
  bool attach_clock(uint64_t config, uint64_t period_ns, int pid, int cpu, const std::string& what);
  bool attach_thread(int32_t tid, uint64_t period_ns);  // false when the thread is gone
  void attach_process(int32_t pid);
  void seed_cpu_baselines();
  void seed_thread(int32_t pid, int32_t tid);
  void describe_process(RawProcess& process);
  void describe_initial(int32_t pid);
  // `rewalk`: also walk again the waiting off-CPU stacks (OffCpuRewalk), which is sound only while the
  // programs are attached (they take a thread's entry away when it runs again).
  void drain(bool rewalk = true);
  // Decodes the records the decoder held for a second walk, as far as their tables allow
  // (`mappings_read_at`: the mappings made before then have been read); `final`: all of them.
  void release_held(uint64_t mappings_read_at, bool final);
  // The kernel's symbols, which the builder needs before it reads the first records (the off-CPU samples'
  // scheduler frames): given to the builder and the result.
  void use_kallsyms(std::shared_ptr<KernelSymbols> symbols);
  // Whether the kernel's symbols read in the background (kallsyms_) are in use; `wait`: wait for them.
  bool kallsyms_ready(bool wait);
  std::future<std::shared_ptr<KernelSymbols> > kallsyms_;  // valid while read in the background
  void load_initial_tables();
  uint32_t cfi_row_capacity() const { return config_.cfi_rows; }
  uint32_t cfi_index_capacity() const { return config_.cfi_index; }
  void note_for_cfi(const Event& event);
  // The second walk of an on-CPU sample held by the decoder, with the tables as published now.
  BpfEventDecoder::HeldWalk walk_held(const hpd_sample_event& e, std::span<const uint8_t> stack,
                                      BpfEventDecoder::UserWalk& out);
  void open_mmap_watch();
  void drain_mmaps();
  void collect_leftovers();
  void snapshot_switches();
  void read_attach_state();
  void finish_launched(bool stopped_early);
  static void read_program_stats(const bpf_program* program, uint64_t& runs, uint64_t& ns);
  static int on_ring_record(void* ctx, void* data, size_t size);

  const RecordOptions& options_;
  std::vector<int> cpus_;
  const LoadConfig config_;
  bool kernel_frames_ = false;
  bool off_cpu_ = false;
  bool dwarf_ = false;
  bool cfi_ = false;
  uint32_t stack_copy_ = 0;
  uint64_t period_ns_ = 0;
  uint32_t filter_ = HPD_FILTER_PIDS;
  bool per_task_ = false;
  bool warm_ring_ = false;
  bool attach_state_ = false;  // hpd_attach_state runs once after the scheduler hooks are attached
  // The target threads' context switches before the recording's start (attach_switches).
  std::vector<std::pair<int32_t, uint64_t> > switches_before_start_;

  LibbpfLogCapture log_;
  Skeleton skel_;
  std::unique_ptr<CfiMaps> cfi_maps_;     // cfi mode: the tables in skel_'s maps
  CfiMaps::MappedArrays cfi_arrays_;      // skel_'s row and index maps, mapped ahead with it (or empty)
  std::unique_ptr<OffCpuRewalk> rewalk_;  // cfi mode with off-CPU samples
  UniqueFd cgroup_fd_;
  std::vector<Link> sampling_;  // one per CPU or per target thread; each owns its perf_event fd
  Link calls_announce_;         // the uprobe on the call-counting runtime's hpd_calls_announce
  RingReader ring_;
  MmapWatch mmap_watch_;
  std::unique_ptr<LaunchedCommand> command_;
  std::vector<WatchedTarget> targets_;

  RecordResult result_;
  BuildIdReader build_ids_;
  // One per recording: its CFI and rule caches serve every process of the recording.
  Unwinder unwinder_;
  // The ring's records become events (decoder_), which the one builder turns into the profile.
  std::unique_ptr<BpfEventDecoder> decoder_;
  std::unique_ptr<RawProfileBuilder> builder_;
  EventSink to_builder_;
  std::exception_ptr callback_error_;
  std::unique_ptr<RecordingCallCounter> calls_;  // detached (destroyed) before the skeleton
};

// The programs and maps: the ones hpd loaded ahead when they were loaded alike, else loaded now.
void BpfSession::load() {
  skel_ = Preloader::instance().take(config_, &cfi_arrays_);
  result_.bpf_loaded_ahead = skel_ != nullptr;
  if (!skel_) skel_ = load_skeleton_for(config_, log_);
  // Not part of the load: the same loaded programs serve any client.
  skel_->bss->client_uid = options_.client_uid;
  skel_->bss->client_gid = options_.client_gid;
}

// Runs hpd_warm_ring, then consumes the discarded records it leaves, so that the ring is empty when
// the first event is attached. A failed run costs only speed, never data.
void BpfSession::warm_ring() {
  if (!warm_ring_) return;
  bpf_test_run_opts run{};
  run.sz = sizeof run;
  if (bpf_prog_test_run_opts(bpf_program__fd(skel_->progs.hpd_warm_ring), &run) == 0)
    result_.bpf_ring_pages_warmed = run.retval;
  if (ring_buffer__consume(ring_.get()) < 0)
    throw RecordError("cannot read the eBPF ring buffer: " + errno_text(errno));
}

void BpfSession::set_targets() {
  if (filter_ == HPD_FILTER_CGROUP) {
    cgroup_fd_ = open_cgroup(options_.cgroup);
    const uint32_t key = 0;
    const uint32_t fd = static_cast<uint32_t>(cgroup_fd_.get());
    if (bpf_map_update_elem(bpf_map__fd(skel_->maps.target_cgroup), &key, &fd, BPF_ANY) != 0) {
      throw RecordError("cannot select cgroup " + options_.cgroup + ": " + std::strerror(errno) +
                        " (it must be a cgroup v2 directory)");
    }
  }
  if (filter_ != HPD_FILTER_PIDS) return;
  const int fd = bpf_map__fd(skel_->maps.targets);
  const uint8_t yes = 1;
  std::vector<int32_t> pids = options_.pids;
  if (command_) pids.push_back(command_->pid());
  for (const int32_t pid : pids) {
    if (bpf_map_update_elem(fd, &pid, &yes, BPF_ANY) != 0)
      throw RecordError("cannot add pid " + std::to_string(pid) +
                        " to the eBPF targets: " + std::strerror(errno));
  }
}

// A command that runs hpd's call-counting runtime: each of its processes announces where it keeps the
// return addresses its hook replaced, and the walkers put them back (calls_unwind.bpf.h). Without the
// uprobe, stacks of instrumented code end at the hook; the recording goes on and says so.
// The walkers read the runtime's shadow stacks with the layout preload_abi.h gives.
static_assert(HPD_CALLS_RT_STATE_SHADOW == HPD_CALLS_STATE_SHADOW_OFFSET);
static_assert(HPD_CALLS_RT_STATE_DEPTH == HPD_CALLS_STATE_DEPTH_OFFSET);
static_assert(sizeof(hpd_calls_rt_frame) == sizeof(hpd_calls_shadow_frame));
static_assert(offsetof(hpd_calls_rt_frame, slot) == offsetof(hpd_calls_shadow_frame, slot));
static_assert(offsetof(hpd_calls_rt_frame, original) == offsetof(hpd_calls_shadow_frame, original));
static_assert(offsetof(hpd_calls_rt_frame, restored) == offsetof(hpd_calls_shadow_frame, restored));

void BpfSession::attach_calls_unwind(const std::string& runtime) {
  if (runtime.empty()) return;
  LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = HPD_CALLS_ANNOUNCE_SYMBOL);
  calls_announce_.reset(
      bpf_program__attach_uprobe_opts(skel_->progs.hpd_calls_announced, -1, runtime.c_str(), 0, &opts));
  if (!calls_announce_) {
    calls_->note("call counts: stacks of instrumented code end at the runtime's return hook (cannot probe " +
                 runtime + ": " + errno_text(errno) + ")");
    return;
  }
  skel_->bss->calls_runtime_active = 1;
  // dwarf mode unwinds on-CPU stacks in user space, from a copy, where the shadow stack is out of reach.
  if (!dwarf_) calls_->set_stacks_through_hook();
}

void BpfSession::attach_sampling() {
  // Tracepoints first, so that no fork or exec of a target between them and sampling is missed.
  if (const int err = profile_bpf__attach(skel_.get()); err != 0)
    throw RecordError(with_log("cannot attach the eBPF scheduler hooks: " + errno_text(err), log_));
  if (filter_ == HPD_FILTER_PIDS && attach_per_task()) return;
  attach_per_cpu();
}

bool BpfSession::attach_per_task() {
  size_t threads = command_ ? 1 : 0;
  for (const int32_t pid : options_.pids) threads += list_threads(pid).size();
  if (threads > kMaxPerTaskEvents) return false;
  raise_fd_limit();
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      limit.rlim_cur < 2 * threads + 256)
    return false;
  per_task_ = true;
  try {
    // The launched command has not exec'd yet: its one event is inherited by everything it starts.
    if (command_ && !attach_thread(command_->pid(), period_ns_))
      throw RecordError("cannot sample the launched command: it exited before it started");
    for (const int32_t pid : options_.pids) attach_process(pid);
  } catch (const OutOfDescriptors&) {
    // Other sessions (in hpd) hold descriptors too: per-CPU events need only a few. The samples
    // already taken stay; the program's period check accepts the per-CPU events' period.
    sampling_.clear();
    per_task_ = false;
    return false;
  }
  return true;
}

void BpfSession::attach_process(int32_t pid) {
  std::set<int32_t> seen;
  size_t attached = 0;
  for (const int32_t tid : list_threads(pid)) {
    seen.insert(tid);
    attached += attach_thread(tid, period_ns_) ? 1 : 0;
  }
  // A thread created meanwhile by a thread not yet attached inherited nothing; one created by an
  // attached thread inherited its event and gets a second one here. The second has a longer period
  // (by the round number, in ns), by which the sampling program tells the copy apart and drops it.
  for (int round = 1; round <= kMaxAttachRescans; ++round) {
    bool found = false;
    for (const int32_t tid : list_threads(pid)) {
      if (!seen.insert(tid).second) continue;
      found = true;
      attached += attach_thread(tid, period_ns_ + static_cast<uint64_t>(round)) ? 1 : 0;
    }
    if (!found) break;
  }
  if (attached == 0) throw RecordError("no process with pid " + std::to_string(pid) + " (it exited)");
}

// Opens a software clock event on `pid` (a thread, or -1) and `cpu` (or -1) and drives the sampling
// program with it. False when the errno says the thread or CPU is gone; throws on any other failure.
bool BpfSession::attach_clock(uint64_t config, uint64_t period_ns, int pid, int cpu,
                              const std::string& what) {
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = config;
  attr.sample_period = period_ns;
  attr.inherit = pid != -1;  // new threads and child processes; the program filters the children
  UniqueFd fd(static_cast<int>(::syscall(SYS_perf_event_open, &attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)));
  if (!fd) {
    if (errno == ESRCH || errno == ENODEV || errno == ENOENT) return false;
    if (errno == EMFILE || errno == ENFILE)
      throw OutOfDescriptors("cannot open the sampling event of " + what + ": " + std::strerror(errno));
    throw RecordError("cannot open the sampling event of " + what + ": " + std::strerror(errno));
  }
  Link link(bpf_program__attach_perf_event(skel_->progs.hpd_on_cpu, fd.get()));
  if (!link && (errno == EMFILE || errno == ENFILE))
    throw OutOfDescriptors("cannot attach the sampling program to " + what + ": " + errno_text(errno));
  if (!link)
    throw RecordError(
        with_log("cannot attach the sampling program to " + what + ": " + errno_text(errno), log_));
  fd.release();  // the link closes it
  sampling_.push_back(std::move(link));
  return true;
}

bool BpfSession::attach_thread(int32_t tid, uint64_t period_ns) {
  return attach_clock(PERF_COUNT_SW_TASK_CLOCK, period_ns, tid, -1, "thread " + std::to_string(tid));
}

void BpfSession::attach_per_cpu() {
  for (const int cpu : cpus_)
    attach_clock(PERF_COUNT_SW_CPU_CLOCK, period_ns_, -1, cpu, "CPU " + std::to_string(cpu));
  if (sampling_.empty()) throw RecordError("no online CPU could be sampled");
}

void BpfSession::seed_thread(int32_t pid, int32_t tid) {
  const auto runtime = read_thread_runtime_ns(pid, tid);
  if (!runtime) return;
  hpd_thread_state state{};
  state.last_runtime_ns = *runtime;
  state.pid = pid;
  state.seeded = 1;
  // BPF_NOEXIST: a sample or fork that got there first has the better baseline.
  bpf_map_update_elem(bpf_map__fd(skel_->maps.threads), &tid, &state, BPF_NOEXIST);
}

// Before the recording's start: each target thread's context switches so far. A thread that is off
// the CPU when hpd_attach_state runs and has not switched since was off the CPU since before the start.
void BpfSession::snapshot_switches() {
  if (!attach_state_) return;
  for (const int32_t pid : options_.pids) {
    for (const int32_t tid : list_threads(pid)) {
      if (const auto n = read_thread_context_switches(pid, tid)) switches_before_start_.emplace_back(tid, *n);
    }
  }
}

// Once the scheduler hooks are attached: the record of each target thread that is off the CPU, in the
// `blocked` map its switch-in consumes (attach_state.bpf.h), so that a thread blocked before the
// recording began and all through it is seen where it waits. Without it (a kernel that refuses the
// iterator) the recording goes on, and its summary says what is missing.
void BpfSession::read_attach_state() {
  if (!attach_state_) return;
  const int fd = bpf_map__fd(skel_->maps.attach_switches);
  for (auto [tid, switches] : switches_before_start_) bpf_map_update_elem(fd, &tid, &switches, BPF_ANY);
  skel_->bss->attach_start_ns = result_.profile.info.start_mono_ns;
  Link link(bpf_program__attach_iter(skel_->progs.hpd_attach_state, nullptr));
  if (!link) {
    result_.attach_state_error = "cannot attach the task iterator: " + errno_text(errno);
    return;
  }
  const UniqueFd iter(bpf_iter_create(bpf_link__fd(link.get())));
  if (!iter) {
    result_.attach_state_error = "cannot run the task iterator: " + errno_text(errno);
    return;
  }
  // The program writes nothing: reading to the end runs it over every task.
  char buffer[64];
  ssize_t n = 0;
  while ((n = ::read(iter.get(), buffer, sizeof buffer)) > 0) {
  }
  if (n < 0) result_.attach_state_error = "the task iterator failed: " + errno_text(errno);
  const auto* bss = skel_->bss;
  result_.off_cpu_at_attach = bss->attach_blocked_records + bss->attach_runnable_records - bss->attach_raced;
  // Their user stacks are walked now, while they are still off the CPU (most stay so).
  if (rewalk_ && !skel_->bss->calls_runtime_active) rewalk_->poll(*cfi_maps_, *decoder_, mono_now());
}

// Threads that exist before sampling starts get their current sum_exec_runtime as the baseline, so
// that their first sample's CPU delta is exact rather than a guess.
void BpfSession::seed_cpu_baselines() {
  std::vector<int32_t> pids = options_.pids;
  if (filter_ != HPD_FILTER_PIDS) pids = list_processes();
  const int32_t self = ::getpid();
  for (const int32_t pid : pids) {
    if (pid == self) continue;
    for (const int32_t tid : list_threads(pid)) seed_thread(pid, tid);
  }
}

void BpfSession::describe_process(RawProcess& process) {
  const std::string exe = read_exe(process.pid);
  if (!exe.empty()) process.exe = exe;
  auto cmdline = read_cmdline(process.pid);
  if (!cmdline.empty()) process.cmdline = std::move(cmdline);
  std::string cgroup = read_cgroup(process.pid);
  if (!cgroup.empty()) process.cgroup = std::move(cgroup);
  if (process.name.empty()) process.name = read_comm(process.pid);
}

// The processes of a cgroup v2 directory and of the cgroups below it.
std::vector<int32_t> cgroup_processes(const std::string& directory) {
  std::vector<int32_t> out;
  std::error_code ec;
  std::vector<std::string> dirs = {directory};
  for (auto it = std::filesystem::recursive_directory_iterator(directory, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec)) dirs.push_back(it->path().string());
  }
  for (const std::string& dir : dirs) {
    std::ifstream procs(dir + "/cgroup.procs");
    for (int32_t pid = 0; procs >> pid;) out.push_back(pid);
  }
  return out;
}

// cfi mode: the tables of what the targets have mapped now (and, for a command, of what it will map
// first), in place before sampling starts.
void BpfSession::load_initial_tables() {
  if (!cfi_) return;
  const bool system_wide = filter_ != HPD_FILTER_PIDS;
  cfi_maps_ = std::make_unique<CfiMaps>(bpf_map__fd(skel_->maps.cfi_rows), cfi_row_capacity(),
                                        bpf_map__fd(skel_->maps.cfi_index), cfi_index_capacity(),
                                        bpf_map__fd(skel_->maps.proc_mappings), system_wide,
                                        options_.cfi_row_index, std::move(cfi_arrays_));
  std::vector<int32_t> pids = options_.pids;
  if (filter_ == HPD_FILTER_ALL) pids = list_processes();
  if (filter_ == HPD_FILTER_CGROUP) pids = cgroup_processes(options_.cgroup);
  timing_mark("cfi-maps-open");
  const int32_t self = ::getpid();
  for (const int32_t pid : pids) {
    if (pid != self) cfi_maps_->add_process_maps(pid, read_proc_maps(pid));
  }
  timing_mark("tables-asked");
  if (off_cpu_) rewalk_ = std::make_unique<OffCpuRewalk>(bpf_map__fd(skel_->maps.pending_walks), system_wide);
  if (command_) cfi_maps_->prewarm(likely_modules(resolve_command(options_.command.front())));
  // A command its launcher holds stopped at its exec (hpctl through hpd) has mapped only its executable
  // and interpreter yet: its libraries' tables too are put in place before it runs, as for a command
  // launched here, so that the threads it blocks in its first microseconds are walked with them.
  if (options_.pid_held_at_exec) {
    for (const int32_t pid : options_.pids) {
      if (const std::string exe = read_exe(pid); !exe.empty()) cfi_maps_->prewarm(likely_modules(exe));
    }
  }
  // System-wide, tables are compiled while the recording runs, for the processes sampled; samples
  // taken while their tables are compiled are walked by frame pointer and counted (tables pending).
  // Those in the cache on disk are loaded before sampling starts.
  if (system_wide)
    cfi_maps_->wait_for_cached_tables(kInitialTablesWaitMs);
  else
    cfi_maps_->wait_for_tables(kInitialTablesWaitMs);
}

// Forks and exits seen by the programs keep the per-process mapping tables current.
void BpfSession::note_for_cfi(const Event& event) {
  if (const auto* f = std::get_if<ForkEvent>(&event)) {
    if (f->parent_pid != f->pid) cfi_maps_->fork(f->parent_pid, f->pid);
  } else if (const auto* x = std::get_if<ExitEvent>(&event)) {
    if (x->pid == x->tid) cfi_maps_->exit(x->pid);
  } else if (const auto* s = std::get_if<SampleEvent>(&event)) {
    cfi_maps_->sampled(s->pid);
  }
}

BpfEventDecoder::HeldWalk BpfSession::walk_held(const hpd_sample_event& e, std::span<const uint8_t> stack,
                                                BpfEventDecoder::UserWalk& out) {
  const int32_t pid = e.header.pid;
  // Its image is gone: what is published now is the one its exec brought.
  if (const uint64_t exec = cfi_maps_->exec_ns(pid); exec != 0 && e.header.time_ns < exec)
    return BpfEventDecoder::HeldWalk::kAsIs;
  const CfiMaps::Published published = cfi_maps_->published(pid);
  if (published.at == 0 || published.tables_pending) return BpfEventDecoder::HeldWalk::kWait;
  CfiMaps::StackWalk walk = cfi_maps_->walk_stack(pid, e.regs[static_cast<size_t>(DwarfReg::kRip)],
                                                  e.regs[static_cast<size_t>(DwarfReg::kRsp)],
                                                  e.regs[static_cast<size_t>(DwarfReg::kRbp)], stack);
  if (walk.pending) return BpfEventDecoder::HeldWalk::kAsIs;  // a table that will not come (map full)
  out = BpfEventDecoder::UserWalk{std::move(walk.ips), walk.end, walk.fp_frames};
  return BpfEventDecoder::HeldWalk::kWalked;
}

void BpfSession::describe_initial(int32_t pid) {
  RawProcess& process = result_.profile.process(pid);
  process.start_ns = result_.profile.info.start_mono_ns;
  process.name = read_comm(pid);
  describe_process(process);
  for (const int32_t tid : list_threads(pid)) {
    RawThread& thread = result_.profile.thread(pid, tid);
    thread.start_ns = result_.profile.info.start_mono_ns;
    thread.name = read_thread_comm(pid, tid);
  }
  builder_->processes().add_initial_process(pid, read_proc_maps(pid));
}

int BpfSession::on_ring_record(void* ctx, void* data, size_t size) {
  auto* self = static_cast<BpfSession*>(ctx);
  try {
    self->decoder_->decode({static_cast<const uint8_t*>(data), size}, self->to_builder_);
    return 0;
  } catch (...) {
    // Nothing may unwind through libbpf's C frames; stop the drain and rethrow outside.
    self->callback_error_ = std::current_exception();
    return -1;
  }
}

// Executable mappings as the kernel makes them (mmap_watch.h): the targets and their future children,
// the cgroup, or the whole system, as the programs filter.
void BpfSession::open_mmap_watch() {
  MmapWatch::Scope scope;
  if (filter_ == HPD_FILTER_PIDS) {
    scope.pids = options_.pids;
    if (command_) scope.pids.push_back(command_->pid());
    scope.children = options_.follow_children;
    scope.wake_per_record = cfi_;
  } else if (filter_ == HPD_FILTER_CGROUP) {
    scope.cgroup_fd = cgroup_fd_.get();
  }
  constexpr size_t kMmapRingPages = 16;
  try {
    mmap_watch_.open(scope, cpus_, kMmapRingPages);
  } catch (const RecordError& e) {
    // The recording does not need the watch: without it, a process's mappings are read from
    // /proc/PID/maps when its first record is handled, as before the watch existed. Only the
    // processes that are gone by then lose their modules; the user is told.
    result_.mmap_watch_fallback_reason = e.what();
    return;
  }
  builder_->processes().set_mmap_source([this] { drain_mmaps(); });
}

void BpfSession::drain_mmaps() {
  mmap_watch_.drain(
      [this](const Mmap2Record& r) {
        if (auto event = mmap_event_of(r)) builder_->on_event(*event);
        if (cfi_maps_)
          cfi_maps_->add_mapping(r.pid, r.address, r.length, r.page_offset, r.filename, r.build_id,
                                 r.sample_id.present ? r.sample_id.time : 0);
      },
      [this](const CommRecord& c) {
        builder_->on_event(ExecStartEvent{c.pid, time_of(c.sample_id)});
        if (cfi_maps_) cfi_maps_->exec(c.pid, c.sample_id.present ? c.sample_id.time : 0);
      });
}

void BpfSession::drain(bool rewalk) {
  // Mappings first: a sample in the ring was taken after the mmap that explains it. Every mapping made
  // before this moment is read by drain_mmaps (unless the watch lost it).
  const uint64_t mappings_read_at = mono_now();
  drain_mmaps();
  if (!kallsyms_ready(!rewalk)) {
    // The records wait in the ring for the kernel's symbols; the targets' tables are published and
    // their blocked threads' stacks walked again meanwhile.
    if (cfi_maps_) cfi_maps_->poll();
    if (rewalk && rewalk_ && !skel_->bss->calls_runtime_active)
      rewalk_->poll(*cfi_maps_, *decoder_, mono_now());
    return;
  }
  const int n = ring_buffer__consume(ring_.get());
  if (callback_error_) std::rethrow_exception(std::exchange(callback_error_, nullptr));
  if (n < 0 && n != -EINTR) throw RecordError("cannot read the eBPF ring buffer: " + errno_text(n));
  if (cfi_maps_) cfi_maps_->poll();
  // Not with the call-counting runtime, whose return hooks on the stack only the programs replace.
  if (rewalk && rewalk_ && !skel_->bss->calls_runtime_active)
    rewalk_->poll(*cfi_maps_, *decoder_, mono_now());
  if (cfi_maps_ && decoder_->holding()) release_held(mappings_read_at, false);
}

void BpfSession::use_kallsyms(std::shared_ptr<KernelSymbols> symbols) {
  timing_mark("kallsyms-read");
  result_.kernel_symbols = symbols;
  auto sched = std::make_shared<SchedulerFrames>(SchedulerFrames::from_symbols(*symbols));
  if (sched->size() > 0) builder_->set_scheduler_frames([sched](uint64_t a) { return sched->contains(a); });
}

bool BpfSession::kallsyms_ready(bool wait) {
  if (!kallsyms_.valid()) return true;
  if (!wait && kallsyms_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
  use_kallsyms(kallsyms_.get());
  return true;
}

void BpfSession::release_held(uint64_t mappings_read_at, bool final) {
  decoder_->release_held([this](const hpd_sample_event& e, std::span<const uint8_t> stack,
                                BpfEventDecoder::UserWalk& out) { return walk_held(e, stack, out); },
                         mappings_read_at, to_builder_, final);
}

// After sampling stopped: threads still off the CPU, per-thread drop counts, global counters.
void BpfSession::collect_leftovers() {
  const uint64_t end = result_.profile.info.end_mono_ns;
  uint64_t switch_ins_inferred_at_end = 0;
  if (off_cpu_) {
    const int fd = bpf_map__fd(skel_->maps.blocked);
    auto value = std::make_unique<hpd_sample_event>();
    int32_t key = 0;
    bool first = true;
    int32_t next = 0;
    while (bpf_map_get_next_key(fd, first ? nullptr : &key, &next) == 0) {
      first = false;
      key = next;
      if (bpf_map_lookup_elem(fd, &key, value.get()) != 0) continue;
      // A thread whose switch-in went unseen (emit_unseen_switch_in in profile.bpf.c) and that has run
      // ever since: its CPU time since the switch-out (the record's off_cpu_ns until it is emitted) says
      // when it came back.
      uint64_t until = end;
      const uint64_t now = mono_now();
      if (const auto runtime = read_thread_runtime_ns(value->header.pid, value->header.tid);
          runtime && *runtime > value->off_cpu_ns && now > *runtime - value->off_cpu_ns) {
        const uint64_t back = now - (*runtime - value->off_cpu_ns);
        if (back < end) {
          until = std::max<uint64_t>(back, value->header.time_ns);
          value->flags |= HPD_SAMPLE_SWITCH_IN_INFERRED;
          ++switch_ins_inferred_at_end;
        }
      }
      decoder_->decode_still_off_cpu(*value, until,
                                     [this](const Event& event) { builder_->on_event(event); });
    }
  }
  {
    const int fd = bpf_map__fd(skel_->maps.threads);
    hpd_thread_state state{};
    int32_t key = 0, next = 0;
    bool first = true;
    while (bpf_map_get_next_key(fd, first ? nullptr : &key, &next) == 0) {
      first = false;
      key = next;
      // Every drop belongs to a target thread, even one none of whose records arrived.
      if (bpf_map_lookup_elem(fd, &key, &state) == 0 && state.ringbuf_drops > 0)
        builder_->on_event(ThreadLostEvent{state.pid, key, state.ringbuf_drops});
    }
  }
  read_program_stats(skel_->progs.hpd_on_cpu, result_.bpf_sample_prog_runs, result_.bpf_sample_prog_ns);
  read_program_stats(skel_->progs.hpd_sched_switch, result_.bpf_switch_prog_runs, result_.bpf_switch_prog_ns);
  read_program_stats(skel_->progs.hpd_sched_wakeup, result_.bpf_wakeup_prog_runs, result_.bpf_wakeup_prog_ns);
  const int possible = libbpf_num_possible_cpus();
  if (possible > 0) {
    std::vector<uint64_t> per_cpu(static_cast<size_t>(possible));
    uint64_t totals[HPD_COUNTER_COUNT] = {};
    for (uint32_t i = 0; i < HPD_COUNTER_COUNT; ++i) {
      if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.counters), &i, per_cpu.data()) != 0) continue;
      for (const uint64_t v : per_cpu) totals[i] += v;
    }
    result_.profile.lost.lost_records += totals[HPD_COUNTER_RINGBUF_DROPS];
    result_.off_cpu_intervals_lost = totals[HPD_COUNTER_OFFCPU_MAP_FULL];
    result_.off_cpu_switch_ins_inferred = totals[HPD_COUNTER_SWITCH_IN_UNSEEN] + switch_ins_inferred_at_end;
    result_.threads_without_cpu_baseline = totals[HPD_COUNTER_THREAD_MAP_FULL];
    result_.samples_with_stale_cpu_time = totals[HPD_COUNTER_STALE_RUNTIME];
  }
}

// The kernel counts these only while kernel.bpf_stats_enabled is 1; they stay 0 otherwise.
void BpfSession::read_program_stats(const bpf_program* program, uint64_t& runs, uint64_t& ns) {
  const int fd = bpf_program__fd(program);
  if (fd < 0) return;  // not loaded (the scheduler hooks without off-CPU samples)
  bpf_prog_info info{};
  uint32_t length = sizeof info;
  if (bpf_obj_get_info_by_fd(fd, &info, &length) != 0) return;
  runs = info.run_cnt;
  ns = info.run_time_ns;
}

void BpfSession::finish_launched(bool stopped_early) {
  if (!command_) return;
  if (stopped_early)
    command_->terminate(std::chrono::milliseconds(2000));
  else
    command_->try_reap();
  if (!command_->reaped()) command_->terminate(std::chrono::milliseconds(2000));
  result_.command_exit_status = command_->exit_status();
}

RecordResult BpfSession::run() {
  timing_mark("bpf-session");
  load();  // the only step that throws BpfUnavailable: nothing has been started yet
  timing_mark("bpf-loaded");
  // Before anything reads or attaches by pid: the processes the targets are now (or were at the caller's
  // check).
  std::vector<UniqueFd> bound = bind_targets(options_);

  snapshot_switches();
  RawProfile& profile = result_.profile;
  take_clock_pair(profile.info.start_mono_ns, profile.info.start_unix_ns);
  RecordingInfo& info = profile.info;
  info.interval_ns = period_ns_;
  info.frequency_hz = options_.frequency_hz;
  info.backend = "bpf";
  info.call_graph = dwarf_ ? "dwarf" : cfi_ ? "cfi" : "fp";
  info.kernel_frames = kernel_frames_;
  info.logical_cpus = static_cast<uint32_t>(cpus_.size());
  describe_recording(options_, info);
  result_.cpu_time_source = CpuTimeSource::kSchedRuntimeAtSample;
  if (kernel_frames_) profile.intern_module("[kernel.kallsyms]", kernel_build_id(), true);

  decoder_ = std::make_unique<BpfEventDecoder>(stack_copy_);
  if (dwarf_ && off_cpu_) decoder_->expect_switch_stacks();
  // cfi mode: samples taken before their tables were published wait for them (walk_held); their process
  // counts as sampled, so that system-wide its tables are compiled.
  if (cfi_)
    decoder_->hold_pending_walks(
        [this](int32_t pid) {
          if (cfi_maps_) cfi_maps_->sampled(pid);
        },
        kMaxHeldBytes);
  builder_ = std::make_unique<RawProfileBuilder>(
      profile, BuilderConfig{TrackerConfig{profile.info.start_mono_ns}, dwarf_},
      SystemLookups{[](int32_t pid) { return read_proc_maps(pid); },
                    [this](int32_t pid, uint64_t start, uint64_t end, const std::string& path) {
                      return build_ids_.for_mapping(pid, start, end, path);
                    },
                    [this](RawProcess& process) { describe_process(process); }});
  builder_->set_unwinder(&unwinder_);
  // The ring's events also keep cfi mode's per-process tables current (forks, exits, sampled processes).
  to_builder_ = [this](const Event& event) {
    if (cfi_maps_) note_for_cfi(event);
    builder_->on_event(event);
  };

  ring_.reset(ring_buffer__new(bpf_map__fd(skel_->maps.events), on_ring_record, this, nullptr));
  if (!ring_) throw RecordError("cannot read the eBPF ring buffer: " + errno_text(errno));
  warm_ring();
  timing_mark("ring-ready");

  // Before the fork: the counter decides whether the command starts with hpd's runtime preloaded.
  calls_ = std::make_unique<RecordingCallCounter>(options_);
  attach_calls_unwind(calls_->runtime_in_use());
  if (!options_.command.empty()) command_ = launch_command(options_.command, calls_->launch_environment());
  set_targets();
  timing_mark("targets-set");
  open_mmap_watch();
  timing_mark("mmap-watch-open");
  load_initial_tables();
  timing_mark("tables-ready");
  attach_sampling();
  timing_mark("sampling-attached");
  info.event = per_task_ ? "task-clock" : "cpu-clock";
  seed_cpu_baselines();
  if (command_) seed_thread(command_->pid(), command_->pid());
  for (const int32_t pid : options_.pids) describe_initial(pid);
  read_attach_state();
  timing_mark("attach-state-read");

  if (command_) calls_->add_launched(command_->pid(), options_.command.front());
  for (const int32_t pid : options_.pids) {
    if (options_.pid_held_at_exec)
      calls_->add_held_at_exec(pid);
    else
      calls_->add_process(pid);
  }

  // Everything keyed by pid is in place: each target must still be the bound process, and running, so
  // that its exit hook (which takes it out of the targets) is yet to come.
  check_targets_running(options_.pids, bound);
  // /proc/kallsyms, read once for the recording: the symbolization of its kernel frames uses the same
  // table (RecordResult::kernel_symbols), rather than reading and parsing it again. Only the builder
  // needs it, for the off-CPU samples' scheduler frames, when it reads the first records: with pid
  // targets it is read after sampling began (their tables are loaded), so that the first sample does
  // not wait for it; a launched command is released after it, because the loop that compiles the tables
  // of the program it execs runs only after it (else 35% of a 0.3 s command's samples were walked by
  // frame pointer while 0.3-0.5 s of kallsyms were read).
  // A command its launcher holds at its exec (hpctl through hpd) is released by on_attached: its
  // symbols are read on another thread meanwhile, and the loop publishes its tables and walks its
  // blocked threads again from its first microseconds (read here first, a thread that blocked in them
  // kept its frame-pointer walk, which lacks its callers in a library without frame pointers).
  const auto load_kallsyms = [] {
    auto symbols = std::make_shared<KernelSymbols>();
    symbols->load();
    return symbols;
  };
  auto read_kallsyms = [&] {
    if (!off_cpu_ || !kernel_frames_) return;
    use_kallsyms(load_kallsyms());
  };
  if (options_.pid_held_at_exec && !command_ && off_cpu_ && kernel_frames_)
    kallsyms_ = std::async(std::launch::async, load_kallsyms);
  if (command_) {
    read_kallsyms();
    start_command(*command_);
    targets_.push_back(WatchedTarget{command_->pid(), open_pidfd(command_->pid()), false});
  } else {
    for (size_t i = 0; i < options_.pids.size(); ++i)
      targets_.push_back(WatchedTarget{options_.pids[i], std::move(bound[i]), false});
  }
  if (options_.on_attached) options_.on_attached();
  timing_mark("started");
  // Sampling runs: what follows is needed only once the first records are read. The next session's
  // programs are loaded now, not while this one attached.
  if (options_.load_next_ahead) Preloader::instance().want(config_);
  if (!command_ && !kallsyms_.valid()) read_kallsyms();

  std::vector<pollfd> pfds;
  pfds.push_back(pollfd{ring_buffer__epoll_fd(ring_.get()), POLLIN, 0});
  const size_t first_target = pfds.size();
  for (const WatchedTarget& t : targets_) pfds.push_back(pollfd{t.pidfd ? t.pidfd.get() : -1, POLLIN, 0});
  // cfi mode, pid and command targets: a new mapping wakes the loop, so that the process's tables are
  // published within milliseconds rather than at the next 100 ms poll.
  if (cfi_ && filter_ == HPD_FILTER_PIDS) {
    for (const int fd : mmap_watch_.fds()) pfds.push_back(pollfd{fd, POLLIN, 0});
  }
  // cfi mode: a table compiled by the worker is loaded and published at once.
  if (cfi_maps_) pfds.push_back(pollfd{cfi_maps_->ready_fd(), POLLIN, 0});

  const uint64_t loop_cpu_start = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  const uint64_t start = profile.info.start_mono_ns;
  RecordingTicker ticker(options_, start);
  bool stopped_early = false;
  const int ring_fd = pfds[0].fd;
  for (;;) {
    // While the kernel's symbols are read, the ring's records wait: its descriptor would wake the loop
    // at once, so it is left out, and the loop looks every few milliseconds whether they are read.
    const bool reading_kallsyms = kallsyms_.valid();
    pfds[0].fd = reading_kallsyms ? -1 : ring_fd;
    const int n = ::poll(pfds.data(), pfds.size(), reading_kallsyms ? kKallsymsPollMs : kPollTimeoutMs);
    if (n < 0 && errno != EINTR) throw RecordError(std::string("poll failed: ") + std::strerror(errno));
    drain();
    calls_->poll();
    const auto outcome = ticker.tick(update_targets_exited(targets_, pfds, first_target, command_.get()),
                                     builder_->samples(), profile);
    if (outcome == RecordingTicker::Outcome::kTargetsExited) {
      result_.target_exited = true;
      break;
    }
    if (outcome == RecordingTicker::Outcome::kStopped) {
      stopped_early = true;
      break;
    }
  }
  profile.info.end_mono_ns = mono_now();
  // Stop every source before the last drain, so the ring holds everything that will ever come.
  sampling_.clear();
  profile_bpf__detach(skel_.get());
  drain(false);
  if (cfi_maps_ && decoder_->walks_held() != 0) {
    // The samples taken last may wait for tables still being loaded or compiled.
    const uint64_t mappings_read_at = mono_now();
    drain_mmaps();
    cfi_maps_->wait_for_tables(kFinalTablesWaitMs);
    release_held(mappings_read_at, false);
  }
  if (decoder_->holding()) release_held(~uint64_t{0}, true);
  collect_leftovers();
  calls_->finish(result_);
  result_.collection_cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - loop_cpu_start;
  finish_launched(stopped_early);
  result_.processes_without_maps = builder_->processes().processes_without_maps();
  result_.samples_without_cpu_baseline = decoder_->samples_without_baseline();
  result_.blocked_split_at_wakeup = decoder_->blocked_split_at_wakeup();
  result_.blocked_without_wakeup = decoder_->blocked_without_wakeup();
  result_.off_cpu_with_stack_copy = decoder_->off_cpu_with_stack_copy();
  result_.off_cpu_without_stack_copy = decoder_->off_cpu_without_stack_copy();
  result_.call_graph = dwarf_ ? CallGraph::kDwarf : cfi_ ? CallGraph::kCfi : CallGraph::kFp;
  if (cfi_maps_) {
    const CfiMapStats t = cfi_maps_->stats();
    RecordResult::CfiSummary& c = result_.cfi;
    c.modules = t.modules;
    c.modules_loaded = t.modules_loaded;
    c.rows = t.rows;
    c.map_bytes = t.map_bytes;
    c.row_capacity = t.row_capacity;
    c.modules_evicted = t.modules_evicted;
    c.modules_refused = t.modules_refused;
    c.compile_ns = t.compile_ns;
    c.tables_compiled = t.tables_compiled;
    c.tables_kept = t.tables_kept;
    c.tables_stored = t.tables_stored;
    c.disk_cache = t.disk_cache;
    c.tables_from_disk = t.tables_from_disk;
    c.disk_load_ns = t.disk_load_ns;
    c.disk_refused = t.disk_refused;
    c.disk_refusal = t.disk_refusal;
    c.mappings_dropped = t.mappings_dropped;
    c.without_table = t.without_table;
    c.samples_tables_pending = decoder_->samples_tables_pending();
    c.off_cpu_rewalked = decoder_->off_cpu_rewalked();
    c.off_cpu_rewalked_from_copy = decoder_->off_cpu_rewalked_from_copy();
    c.on_cpu_rewalked = decoder_->on_cpu_rewalked();
    c.samples_with_fp_frames = decoder_->samples_with_fp_frames();
  }
  static const char* const kEndNames[HPD_USER_END_COUNT] = {"no walk",
                                                            "root",
                                                            "frame pointer 0",
                                                            "too deep",
                                                            "read fault",
                                                            "no CFI for the pc",
                                                            "unsupported CFI row",
                                                            "broken frame pointer",
                                                            "stack did not grow"};
  for (int kind = 0; kind < 2; ++kind) {
    for (int end = 1; end < HPD_USER_END_COUNT; ++end) {
      const uint64_t n = decoder_->user_ends()[static_cast<size_t>(kind)][static_cast<size_t>(end)];
      if (n != 0) result_.user_stack_ends[kind].emplace_back(kEndNames[end], n);
    }
  }
  result_.stack_copy_bytes = stack_copy_;
  const UnwindCounters& unwound = builder_->unwind_counters();
  result_.unwind_ns = unwound.ns;
  result_.unwound_samples = unwound.unwound;
  result_.leaf_callers_added = unwound.leaf_callers;
  result_.sample_bytes = unwound.sample_bytes;
  profile.lost.lost_records += decoder_->malformed_records();
  // Mappings the kernel could not report (a full ring) or that were not kept (too many pending).
  result_.mmap_records_lost = mmap_watch_.lost() + builder_->processes().mmaps_dropped();
  result_.mmap_records = builder_->processes().mmaps_recorded();
  result_.cpu_tail_samples = builder_->cpu_tails();
  profile.lost.lost_records += result_.mmap_records_lost;
  return std::move(result_);
}

}  // namespace

std::string bpf_load_check() {
  try {
    LibbpfLogCapture log;
    Skeleton skel = open_skeleton(log);
    load_skeleton(skel.get(), log);
    return "";
  } catch (const RecordError& e) {
    return e.what();
  }
}

RecordResult record_with_bpf(const RecordOptions& options, const PerfPrivileges& privileges) {
  if (const std::string why = bpf_unavailable_reason(privileges); !why.empty())
    throw BpfUnavailable("the eBPF backend cannot be used: " + why);
  BpfSession session(options, privileges);
  return session.run();
}

void bpf_prepare(const RecordOptions& options, const PerfPrivileges& privileges) {
  if (!bpf_unavailable_reason(privileges).empty()) return;
  Preloader::instance().want(load_config_of(options, privileges, online_cpus().size()));
}

PreparedRecordingStatus bpf_prepared_status() {
  return Preloader::instance().status();
}

void bpf_release_prepared() {
  Preloader::instance().stop();
}

#endif  // HPD_HAVE_BPF

}  // namespace hpd
