// Loading hpd's eBPF programs (bpf_load.h).
#include "bpf/bpf_load.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "hpd/collect/call_graph_choice.h"

namespace hpd::bpf_recording {

namespace {

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

}  // namespace

LibbpfLogCapture::LibbpfLogCapture() {
  static std::once_flag once;
  std::call_once(once, [] { libbpf_set_print(libbpf_print); });
  previous_ = libbpf_log;
  libbpf_log = &text_;
}

LibbpfLogCapture::~LibbpfLogCapture() {
  libbpf_log = previous_;
}

namespace {

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

// The steal clock's place (steal_clock_from_run_queue): the difference of steal_time's and runqueues'
// places in vmlinux's per-CPU section, as its BTF gives them.
std::optional<int64_t> read_steal_clock_from_run_queue() {
  btf* vmlinux = btf__load_vmlinux_btf();
  if (vmlinux == nullptr) return std::nullopt;
  std::optional<int64_t> steal_time, runqueues;
  const int section = btf__find_by_name_kind(vmlinux, ".data..percpu", BTF_KIND_DATASEC);
  const btf_type* type = section > 0 ? btf__type_by_id(vmlinux, static_cast<uint32_t>(section)) : nullptr;
  if (type != nullptr) {
    const btf_var_secinfo* var = btf_var_secinfos(type);
    for (int i = 0; i < btf_vlen(type); ++i, ++var) {
      const btf_type* var_type = btf__type_by_id(vmlinux, var->type);
      if (var_type == nullptr) continue;
      const std::string_view name = btf__name_by_offset(vmlinux, var_type->name_off);
      const btf_type* value = btf__type_by_id(vmlinux, var_type->type);
      const std::string_view value_name =
          value == nullptr ? std::string_view{} : btf__name_by_offset(vmlinux, value->name_off);
      if (name == "steal_time" && value_name == "kvm_steal_time" && var->size >= 16) steal_time = var->offset;
      if (name == "runqueues" && value_name == "rq") runqueues = var->offset;
    }
  }
  btf__free(vmlinux);
  if (!steal_time || !runqueues) return std::nullopt;
  return *steal_time - *runqueues;
}

// The read, once per process, on a thread of its own from the first call (or at the first wait, when
// no thread can be started).
const std::shared_future<std::optional<int64_t>>& steal_clock_read() {
  static const std::shared_future<std::optional<int64_t>> read = [] {
    try {
      return std::async(std::launch::async, read_steal_clock_from_run_queue).share();
    } catch (const std::system_error&) {
      return std::async(std::launch::deferred, read_steal_clock_from_run_queue).share();
    }
  }();
  return read;
}

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

}  // namespace

std::string errno_text(int err) {
  return std::strerror(err < 0 ? -err : err);
}

std::string with_log(std::string text, const LibbpfLogCapture& log) {
  const std::string tail = log.tail();
  if (!tail.empty()) text += " (libbpf: " + tail + ")";
  return text;
}

Skeleton open_skeleton(const LibbpfLogCapture& log) {
  Skeleton skel(profile_bpf__open());
  if (!skel) throw BpfUnavailable(with_log("cannot open hpd's eBPF object: " + errno_text(errno), log));
  return skel;
}

// With HPD_VERIFIER_STATS set (to anything but "" or "0"), each program's verifier statistics (its
// time, the instructions it processed) on stderr as "hpd-verifier PROGRAM: ...": how
// docs/performance.md measures what loading the programs costs. With HPD_VERIFIER_LOG=DIR, each
// program's whole log (every instruction the verifier processed, with the state it had and the source
// line) in DIR/PROGRAM.log: bench/verifier_profile.py counts where the instructions went.
class VerifierStats {
 public:
  explicit VerifierStats(bpf_object* obj) : obj_(obj) {
    const char* stats = std::getenv("HPD_VERIFIER_STATS");
    const char* dir = std::getenv("HPD_VERIFIER_LOG");
    if (dir != nullptr && *dir != '\0') log_dir_ = dir;
    if (log_dir_.empty() && (stats == nullptr || *stats == '\0' || std::string_view(stats) == "0")) return;
    // A whole log of the largest program is tens of MiB. The buffers are not filled beforehand, so
    // only the pages the kernel writes are touched.
    const size_t bytes = log_dir_.empty() ? size_t{1} << 20 : size_t{1} << 28;
    bpf_program* prog = nullptr;
    bpf_object__for_each_program(prog, obj_) {
      logs_.emplace_back(new char[bytes]);
      logs_.back()[0] = '\0';
      bpf_program__set_log_buf(prog, logs_.back().get(), bytes);
      // BPF_LOG_STATS, and BPF_LOG_LEVEL2 for the whole log (level 1 keeps only a failing path's).
      bpf_program__set_log_level(prog, log_dir_.empty() ? 4 : 4 | 2);
    }
  }
  void print() const {
    if (logs_.empty()) return;
    bpf_program* prog = nullptr;
    size_t i = 0;
    bpf_object__for_each_program(prog, obj_) {
      if (i >= logs_.size()) break;
      std::string text = logs_[i++].get();
      if (bpf_program__fd(prog) < 0) continue;
      if (!log_dir_.empty()) {
        const std::string path = log_dir_ + "/" + bpf_program__name(prog) + ".log";
        if (FILE* out = std::fopen(path.c_str(), "w")) {
          std::fwrite(text.data(), 1, text.size(), out);
          std::fclose(out);
        } else {
          std::fprintf(stderr, "hpd-verifier: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
        }
        // The statistics are the log's last lines.
        const size_t tail = text.rfind("verification time");
        text = tail == std::string::npos ? std::string() : text.substr(tail);
      }
      std::replace(text.begin(), text.end(), '\n', ' ');
      std::fprintf(stderr, "hpd-verifier %s: %s\n", bpf_program__name(prog), text.c_str());
    }
  }

 private:
  bpf_object* obj_;
  std::string log_dir_;
  std::vector<std::unique_ptr<char[]>> logs_;
};

void load_skeleton(profile_bpf* skel, const LibbpfLogCapture& log) {
  const VerifierStats stats(skel->obj);
  const int err = profile_bpf__load(skel);
  stats.print();
  if (err != 0) {
    throw BpfUnavailable(with_log("the kernel refused hpd's eBPF programs: " + errno_text(err), log));
  }
}

LoadConfig load_config_of(const RecordOptions& options, const PerfPrivileges& privileges, size_t cpus) {
  LoadConfig c;
  if (options.target.all_processes)
    c.filter_mode = HPD_FILTER_ALL;
  else if (!options.target.cgroup.empty())
    c.filter_mode = HPD_FILTER_CGROUP;
  c.follow_children = options.follow_children;
  c.capture_kernel =
      options.kernel == Switch::kOn || (options.kernel == Switch::kAuto && privileges.may_see_kernel());
  c.restrict_creds = options.restrict_to_client;
  c.off_cpu_min_ns = uint64_t{options.off_cpu_min_us} * 1000;
  c.sample_period_ns = std::max<uint64_t>(1, 1'000'000'000ULL / options.frequency_hz);
  c.ring_bytes = choose_ring_bytes(options, cpus);
  c.stack_copy = stack_copy_bytes(options);
  c.dwarf = options.call_graph == CallGraph::kDwarf;
  c.cfi = options.call_graph == CallGraph::kCfi;
  // System-wide too: with a cold cache most samples wait for tables at first, and each copy is 40
  // samples' worth of the ring, but the program takes none once the ring is too full (below), the tables the
  // most held samples wait for are compiled first (CfiMaps::waiting), and past the held bound the process
  // holding the most gives its up first (BpfEventDecoder::decode).
  c.pending_copy = c.cfi ? kPendingStackBytes : 0;
  // Stack copies that may be left out (cfi mode's for samples whose tables are pending, dwarf mode's at
  // switch-outs) are taken while the ring is less than half full: the samples come first.
  c.copies_below = c.ring_bytes / 2;
  // System-wide the ring is sized for the samples alone (1 MiB at the default rate on 2 CPUs), and a cold
  // start gives most samples a 16 KiB copy. It is eight times as large, and the copies may fill it but for
  // twice the samples' own ring (6 of 8 MiB there; without room kept for the samples, a recorder that fell
  // 0.65 s behind lost records: docs/performance.md). Twice as large with copies up to half of it (1 MiB,
  // 64 copies) was too little for a recorder that falls behind on a loaded machine: beside two compilers
  // and two busy loops 6-13% of a program's samples kept a frame-pointer walk that did not reach main. The
  // sampling program's time per run does not depend on the ring's size (docs/performance.md).
  if (c.pending_copy != 0 && c.filter_mode != HPD_FILTER_PIDS && options.ring_pages == 0) {
    const uint32_t samples_ring = c.ring_bytes;
    c.ring_bytes = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{samples_ring} * 8, 64u << 20));
    c.copies_below = std::max(c.ring_bytes / 2, c.ring_bytes - std::min(c.ring_bytes, 2 * samples_ring));
  }
  const uint32_t rows = options.cfi_row_capacity != 0 ? options.cfi_row_capacity : kDefaultCfiRowCapacity;
  // Each module's index has at most a quarter as many buckets as the module has rows, and at least
  // one: room for as many tiny modules again.
  c.cfi_rows = c.cfi ? rows : 1;
  c.cfi_index = c.cfi ? rows / 4 + 16384 : 1;
  c.off_cpu = off_cpu_enabled(options);
  // Attach-time state (attach_state.bpf.h): the threads of pid targets that are off the CPU when the
  // recording begins. A launched command has none; system-wide recordings are not covered. (A command
  // hpctl launches through hpd is a pid target held at its exec: it has the program, which finds none.)
  c.attach_state = c.off_cpu && c.filter_mode == HPD_FILTER_PIDS && !options.target.pids.empty();
  c.warm_ring = kernel_can_warm_ring();
  return c;
}

// Opens and loads the programs and maps for `c`. Throws BpfUnavailable when the object cannot be
// parsed or the kernel refuses it, RecordError for a map that cannot be sized.
Skeleton load_skeleton_for(const LoadConfig& c, const LibbpfLogCapture& log) {
  // Read while the kernel verifies the programs; the session writes it after the load.
  (void)steal_clock_read();
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
  config->copies_below_bytes = c.copies_below;
  // Without cfi mode the table maps take no memory.
  err = bpf_map__set_max_entries(skel->maps.cfi_rows, c.cfi_rows);
  if (err == 0) err = bpf_map__set_max_entries(skel->maps.cfi_index, c.cfi_index);
  if (err == 0 && !c.cfi) err = bpf_map__set_max_entries(skel->maps.proc_mappings, 1);
  if (err != 0) throw RecordError("cannot size the eBPF CFI maps: " + errno_text(err));
  // Two record buffers per possible CPU (the exit program's and the others'): every frame, the copy
  // and a page (see profile.bpf.c).
  const int possible = libbpf_num_possible_cpus();
  if (possible <= 0) throw RecordError("cannot count the possible CPUs: " + errno_text(possible));
  config->scratch_cpus = static_cast<uint32_t>(possible);
  err = bpf_map__set_max_entries(skel->maps.sample_scratch, static_cast<uint32_t>(2 * possible));
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

std::optional<int64_t> steal_clock_from_run_queue() {
  return steal_clock_read().get();
}

}  // namespace hpd::bpf_recording
