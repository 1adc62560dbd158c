// CfiMaps: the cfi walk's row and per-process mapping maps, fed from compiled module tables.
#include "bpf/cfi_maps.h"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <set>
#include <string_view>
#include <utility>

#include "hpd/base/elf.h"
#include "hpd/collect/recorder.h"
#include "process_tracker.h"
#include "profile_event.h"
#include "unwind_cache.h"

namespace hpd {

namespace {

// Buckets are copied byte for byte into the index map (at kBucketStride, the BPF arrays' 8-byte-aligned
// stride, which their shared mappings keep): the layouts must agree. A row is written as its pc and the
// rule map's entry of its rule (kRowStride, kRuleStride).
static_assert(sizeof(hpd_cfi_bucket) == sizeof(CfiBucket));
static_assert(sizeof(hpd_cfi_row) == 8 && sizeof(hpd_cfi_rule) == 8);
static_assert(HPD_CFA_PLT == static_cast<int>(CfaKind::kPlt) &&
              HPD_CFA_SIGNAL == static_cast<int>(CfaKind::kSignal) &&
              HPD_CFA_OUTERMOST == static_cast<int>(CfaKind::kOutermost) &&
              HPD_CFA_UNSUPPORTED == static_cast<int>(CfaKind::kUnsupported) &&
              HPD_CFA_RSP_RA_RDI == static_cast<int>(CfaKind::kRspRaInRdi));
static_assert(HPD_RBP_AT_CFA == static_cast<int>(RbpKind::kAtCfa) &&
              HPD_RBP_UNDEFINED == static_cast<int>(RbpKind::kUndefined));
static_assert(HPD_SIGFRAME_RIP == kSigframeRip && HPD_SIGFRAME_RSP == kSigframeRsp &&
              HPD_SIGFRAME_RBP == kSigframeRbp);

constexpr const char* kVdso = "[vdso]";
constexpr const char* kUprobeTrampoline = "[uprobes-trampoline]";

// The page Linux maps where it turned nop5 uprobes into calls: "[uprobes-trampoline]" in /proc/PID/maps,
// "[uprobes-trampo" in perf's mmap records (the kernel copies a special mapping's name into 16 bytes).
bool is_uprobe_trampoline(const std::string& path) {
  return path == kUprobeTrampoline || path == "[uprobes-trampo";
}

// The page Linux maps as "[uprobes]" in a process with return probes (the xol area): its first slot is
// the return probes' trampoline.
constexpr const char* kUretprobeTrampoline = "[uprobes]";

// The two one-page mappings of code the kernel writes that hpd has rows for: how to recognise their
// code and their rows.
struct KernelPage {
  const char* name;
  size_t code_bytes;
  bool (*is_code)(std::span<const uint8_t>, std::string*);
  std::shared_ptr<const CfiTable> (*table)();
};
const KernelPage kUprobePage{kUprobeTrampoline, kUprobeTrampolineCodeBytes, is_uprobe_trampoline_code,
                             uprobe_trampoline_cfi_table};
const KernelPage kUretprobePage{kUretprobeTrampoline, kUretprobeTrampolineCodeBytes,
                                is_uretprobe_trampoline_code, uretprobe_trampoline_cfi_table};

// The kernel page named `path`, or null.
const KernelPage* kernel_page(const std::string& path) {
  if (is_uprobe_trampoline(path)) return &kUprobePage;
  if (path == kUretprobeTrampoline) return &kUretprobePage;
  return nullptr;
}

// A module the walk has a table for: a file, the vDSO, or the uprobe trampoline. Not anonymous memory,
// which perf's mmap records name "//anon" (or "/anon_hugepage"): no file is there to open.
bool may_have_table(const std::string& path) {
  return kernel_page(path) != nullptr || names_mapped_file(path);
}

}  // namespace

CfiTableCache& shared_cfi_tables() {
  static CfiTableCache cache;
  return cache;
}

static_assert(kDefaultKeptCfiTablesBytes == CfiTableCache::kDefaultLimitBytes);

KeptCfiTablesStatus kept_cfi_tables_status() {
  const CfiTableCache::Usage usage = shared_cfi_tables().usage();
  return KeptCfiTablesStatus{usage.tables, usage.bytes, usage.limit_bytes, usage.evicted};
}

uint64_t set_kept_cfi_tables_limit(uint64_t bytes) {
  return shared_cfi_tables().set_limit_bytes(bytes);
}

namespace {

// The CfiMaps of the recordings running in this process, for cfi_maps_status().
std::mutex& live_mutex() {
  static std::mutex m;
  return m;
}
std::set<const CfiMaps*>& live_maps() {
  static std::set<const CfiMaps*> maps;
  return maps;
}

uint8_t* map_shared(int fd, size_t entries, size_t stride, size_t* bytes, const char* what) {
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  *bytes = (entries * stride + page - 1) / page * page;
  void* p = ::mmap(nullptr, *bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    throw RecordError(std::string("cannot map the eBPF CFI ") + what + ": " + std::strerror(errno));
  return static_cast<uint8_t*>(p);
}

}  // namespace

CfiMapsStatus cfi_maps_status() {
  CfiMapsStatus out;
  std::lock_guard lock(live_mutex());
  for (const CfiMaps* maps : live_maps()) {
    const CfiMapStats s = maps->stats();
    ++out.recordings;
    out.rows += s.rows;
    out.row_capacity += s.row_capacity;
    out.modules_loaded += s.modules_loaded;
    out.modules_evicted += s.modules_evicted;
    out.modules_refused += s.modules_refused;
    out.rows_wanted = std::max(out.rows_wanted, s.rows_wanted);
    out.map_bytes += s.map_bytes;
  }
  return out;
}

uint64_t CfiMaps::RuleSlots::key(const CfiRow& row) {
  return uint64_t{static_cast<uint32_t>(row.cfa_offset)} |
         uint64_t{static_cast<uint16_t>(row.rbp_offset)} << 32 | uint64_t{row.cfa_kind} << 48 |
         uint64_t{row.rbp_kind} << 56;
}

bool CfiMaps::RuleSlots::take(uint64_t rule, uint32_t* index) {
  if (const auto it = by_rule_.find(rule); it != by_rule_.end()) {
    *index = it->second;
    ++users_[it->second];
    return true;
  }
  uint32_t entry = 0;
  if (!free_.empty()) {
    entry = free_.back();
    free_.pop_back();
  } else if (rule_of_.size() < capacity_) {
    entry = static_cast<uint32_t>(rule_of_.size());
    rule_of_.push_back(0);
    users_.push_back(0);
  } else {
    return false;
  }
  rule_of_[entry] = rule;
  users_[entry] = 1;
  by_rule_.emplace(rule, entry);
  *index = entry;
  return true;
}

void CfiMaps::RuleSlots::give_back(uint32_t index) {
  if (index >= users_.size() || users_[index] == 0) return;
  if (--users_[index] != 0) return;
  by_rule_.erase(rule_of_[index]);
  free_.push_back(index);
}

CfiMaps::SlotRanges::SlotRanges(uint32_t capacity) {
  if (capacity != 0) free_.emplace(0, capacity);
}

bool CfiMaps::SlotRanges::take(uint32_t count, uint32_t* first) {
  if (count == 0) {
    *first = 0;
    return true;
  }
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < count) continue;
    *first = it->first;
    const uint32_t rest = it->second - count;
    const uint32_t rest_first = it->first + count;
    free_.erase(it);
    if (rest != 0) free_.emplace(rest_first, rest);
    used_ += count;
    return true;
  }
  return false;
}

void CfiMaps::SlotRanges::give_back(uint32_t first, uint32_t count) {
  if (count == 0) return;
  used_ -= count;
  auto it = free_.emplace(first, count).first;
  // Merge with the free range after, then with the one before.
  if (auto next = std::next(it); next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

CfiMapArrays& CfiMapArrays::operator=(CfiMapArrays&& other) noexcept {
  if (this != &other) {
    reset();
    rows = std::exchange(other.rows, nullptr);
    rows_bytes = std::exchange(other.rows_bytes, 0);
    rules = std::exchange(other.rules, nullptr);
    rules_bytes = std::exchange(other.rules_bytes, 0);
    index = std::exchange(other.index, nullptr);
    index_bytes = std::exchange(other.index_bytes, 0);
  }
  return *this;
}

void CfiMapArrays::reset() {
  if (rows != nullptr) ::munmap(rows, rows_bytes);
  if (rules != nullptr) ::munmap(rules, rules_bytes);
  if (index != nullptr) ::munmap(index, index_bytes);
  rows = rules = index = nullptr;
  rows_bytes = rules_bytes = index_bytes = 0;
}

CfiMaps::MappedArrays CfiMaps::map_arrays(const Fds& fds) {
  MappedArrays m;
  m.rows = map_shared(fds.rows_fd, fds.row_capacity, kRowStride, &m.rows_bytes, "row table");
  m.rules = map_shared(fds.rules_fd, fds.rule_capacity, kRuleStride, &m.rules_bytes, "rule table");
  m.index = map_shared(fds.index_fd, fds.index_capacity, kBucketStride, &m.index_bytes, "row index");
  return m;
}

CfiMaps::CfiMaps(const Fds& fds, bool lazy, bool use_index, MappedArrays mapped)
    : lazy_(lazy),
      use_index_(use_index),
      procs_fd_(fds.procs_fd),
      capacity_(fds.row_capacity),
      rule_capacity_(fds.rule_capacity),
      index_capacity_(fds.index_capacity),
      row_slots_(fds.row_capacity),
      index_slots_(fds.index_capacity),
      rule_slots_(fds.rule_capacity) {
  if (mapped.rows == nullptr || mapped.rules == nullptr || mapped.index == nullptr) mapped = map_arrays(fds);
  rows_ = std::exchange(mapped.rows, nullptr);
  rows_bytes_ = mapped.rows_bytes;
  rules_ = std::exchange(mapped.rules, nullptr);
  rules_bytes_ = mapped.rules_bytes;
  index_ = std::exchange(mapped.index, nullptr);
  index_bytes_ = mapped.index_bytes;
  ready_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!ready_fd_) {
    ::munmap(rows_, rows_bytes_);
    ::munmap(rules_, rules_bytes_);
    ::munmap(index_, index_bytes_);
    throw RecordError(std::string("cannot create an eventfd: ") + std::strerror(errno));
  }
  stats_.row_capacity = fds.row_capacity;
  if (const auto cache = current_unwind_cache()) stats_.disk_cache = cache->directory();
  if (const char* late = std::getenv("HPD_CFI_LATE_TABLE")) {
    const std::string_view spec(late);
    if (const size_t colon = spec.rfind(':'); colon != std::string_view::npos && colon != 0) {
      late_path_ = std::string(spec.substr(0, colon));
      late_until_ =
          std::chrono::steady_clock::now() +
          std::chrono::milliseconds(std::strtoul(std::string(spec.substr(colon + 1)).c_str(), nullptr, 10));
    }
  }
  worker_ = std::thread([this] { worker_loop(); });
  std::lock_guard lock(live_mutex());
  live_maps().insert(this);
}

CfiMaps::~CfiMaps() {
  {
    std::lock_guard lock(live_mutex());
    live_maps().erase(this);
  }
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    jobs_.clear();
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
  if (rows_ != nullptr) ::munmap(rows_, rows_bytes_);
  if (rules_ != nullptr) ::munmap(rules_, rules_bytes_);
  if (index_ != nullptr) ::munmap(index_, index_bytes_);
}

CfiMaps::MappedArrays CfiMaps::release_arrays() {
  MappedArrays m;
  m.rows = std::exchange(rows_, nullptr);
  m.rows_bytes = rows_bytes_;
  m.rules = std::exchange(rules_, nullptr);
  m.rules_bytes = rules_bytes_;
  m.index = std::exchange(index_, nullptr);
  m.index_bytes = index_bytes_;
  return m;
}

void CfiMaps::worker_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    const auto next = next_job();
    Job job = std::move(*next);
    jobs_.erase(next);
    ++busy_;
    lock.unlock();
    auto table = table_for(job);
    lock.lock();
    if (job.lookup_only) --lookups_;
    done_.push_back(Done{job.key, std::move(table), job.lookup_only});
    --busy_;
    const uint64_t one = 1;
    if (::write(ready_fd_.get(), &one, sizeof one) < 0) {
      // The counter is full (never in practice): the recorder's poll timeout still comes.
    }
    if (lookups_ == 0 || (jobs_.empty() && busy_ == 0)) idle_.notify_all();
  }
}

std::deque<CfiMaps::Job>::iterator CfiMaps::next_job() {
  auto best = jobs_.end();
  uint64_t best_waiting = 0;
  uint64_t best_bytes = 1;
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    if (it->lookup_only) return it;
    // (waiting + 1) / bytes, compared without division; a file of unknown size counts as one page.
    const uint64_t waiting = (it->waiting ? it->waiting->load(std::memory_order_relaxed) : 0) + 1;
    const uint64_t bytes = std::max<uint64_t>(it->file_bytes, 4096);
    if (best == jobs_.end() || waiting * best_bytes > best_waiting * bytes) {
      best = it;
      best_waiting = waiting;
      best_bytes = bytes;
    }
  }
  return best;
}

// The module's table: kept in this process already, else from the cache on disk when it was compiled
// from the same file, else compiled (and stored there); a lookup_only job compiles nothing.
std::shared_ptr<const CfiTable> CfiMaps::table_for(const Job& job) {
  auto elapsed_ns = [](std::chrono::steady_clock::time_point since) {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - since)
            .count());
  };
  bool made = false;  // not found among the tables kept from earlier recordings
  auto kept = shared_cfi_tables().get(
      job.path, job.build_id,
      [&]() -> std::shared_ptr<const CfiTable> {
        made = true;
        const auto begin = std::chrono::steady_clock::now();
        const CfiTableOptions& options = shared_cfi_tables().options();
        const std::shared_ptr<UnwindCache> disk = current_unwind_cache();
        CfiTableSource source;
        std::string source_path;
        const bool cacheable = disk && UnwindCache::source_of(job.candidates, job.build_id,
                                                              options.debug_root, &source, &source_path);
        if (cacheable) {
          std::string refused;
          auto table = disk->load(source, &refused);
          std::lock_guard lock(mutex_);
          if (table) {
            ++stats_.tables_from_disk;
            stats_.disk_load_ns += elapsed_ns(begin);
            return table;
          }
          if (!refused.empty() && stats_.disk_refused++ == 0) stats_.disk_refusal = refused;
        }
        if (job.lookup_only) return nullptr;
        const auto compile_begin = std::chrono::steady_clock::now();
        auto table = compile_cfi_table(job.candidates, job.build_id, options);
        {
          std::lock_guard lock(mutex_);
          ++stats_.tables_compiled;
          stats_.compile_ns += elapsed_ns(compile_begin);
        }
        // Stored when it came from a file (not a failure to open one) with the build-id asked for, with the
        // size and time of the file it was compiled from.
        if (cacheable && !table->opened_path.empty() && table->build_id == job.build_id &&
            (table->opened_path == source_path ||
             UnwindCache::source_of_file(table->opened_path, job.build_id, options.debug_root, &source)) &&
            disk->store(*table, source)) {
          std::lock_guard lock(mutex_);
          ++stats_.tables_stored;
        }
        return table;
      },
      job.identity);
  if (kept && !made && !job.again) {
    std::lock_guard lock(mutex_);
    ++stats_.tables_kept;
  }
  return kept;
}

// The uprobe trampolines have no CFI: rows written for the kernel's code (uprobe_trampoline_cfi_table(),
// uretprobe_trampoline_cfi_table()), used when the page's bytes are that code. Each page's code is the
// same in every process that has one, so one look at it serves all. Linux maps both VM_IO ("io" in their
// smaps VmFlags), which /proc/PID/mem and process_vm_readv refuse to read (EIO, EFAULT): then the rows
// are used on the strength of its name and size, as the kernel that names it so has that code
// (tests/collect/calls/calls_pid_latency_test.cpp checks both from inside a process).
std::string CfiMaps::kernel_page_module(int32_t pid, uint64_t start, uint64_t end, const std::string& path) {
  const KernelPage& page = *kernel_page(path);
  const std::string key = page.name;
  auto [it, inserted] = modules_.try_emplace(key);
  Module& module = it->second;
  if (!inserted) {
    if (module.table && !module.loaded && !module.failed) {  // evicted, or refused for lack of room
      load(key, module);
      if (module.loaded) mark_users_dirty(key);
    }
    return key;
  }
  module.path = key;
  module.queued = true;
  module.wanted = true;
  count(module);
  std::string why;
  if (end - start != 4096) {
    why = "a mapping of " + std::to_string(end - start) + " bytes, not the one page hpd has rows for";
  } else if (pid > 0) {
    std::string error;
    const std::vector<uint8_t> code = read_process_memory(pid, start, start + page.code_bytes, &error);
    if (!code.empty() && !page.is_code(code, &why)) why = "its code differs (" + why + ")";
  }
  if (!why.empty()) {
    module.failed = true;
    std::lock_guard lock(mutex_);
    stats_.without_table.push_back(key + ": " + why);
    return key;
  }
  module.table = page.table();
  load(key, module);
  return key;
}

std::string CfiMaps::module_for(int32_t pid, uint64_t start, uint64_t end, const std::string& path,
                                const MappedModule* found) {
  if (kernel_page(path) != nullptr) return kernel_page_module(pid, start, end, path);
  // For the vDSO no file: the image the process mapped, read from its memory (the same for every
  // process of one kernel and ABI, so one table serves them all).
  MappedModule asked;
  if (found == nullptr) {
    asked = build_ids_.for_mapping(pid > 0 ? pid : ::getpid(), start, end, path);
    found = &asked;
  }
  const std::string& id = found->build_id;
  // The files the module's table is compiled from, and which file that is (device and inode): modules
  // are told apart by it too, not by build-id alone, as anyone can link a program with another's
  // build-id (-Wl,--build-id=0x...), and its table must not unwind the other's stacks. Its size and
  // modification time too, as the cache on disk checks them (UnwindCache::source_of): a table kept in
  // memory (shared_cfi_tables) is not used for a file rewritten in place since.
  std::vector<std::string> candidates;
  std::string identity;
  uint64_t file_bytes = 0;
  if (path != kVdso) {
    if (pid > 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, start, end);
      candidates.emplace_back(buf);
      candidates.push_back("/proc/" + std::to_string(pid) + "/root" + path);
    }
    candidates.push_back(path);
    // The file the build-id was read from, reached through the same candidates in the same order.
    if (const FileIdentity& f = found->identity; f.known()) {
      identity = std::to_string(f.dev) + ":" + std::to_string(f.ino) + ":" + std::to_string(f.size) + ":" +
                 std::to_string(f.mtime_ns);
      file_bytes = static_cast<uint64_t>(f.size);
    }
  }
  std::string key = id.empty() ? "path:" + path : id;
  if (path == kVdso && id.empty()) key += ":" + std::to_string(end - start);
  if (!identity.empty()) key += "@" + identity;
  auto [it, inserted] = modules_.try_emplace(key);
  if (!inserted) {
    // Mapped again after its table was evicted, or refused for lack of room: another try.
    Module& module = it->second;
    if (!module.wanted && pid > 0 && sampled_.count(pid) != 0) {
      module.wanted = true;  // lazy mode: mapped by a process sampled already
      if (!module.table) enqueue(key, module);
    } else if (module.wanted && !module.table && !module.failed &&
               (!module.no_room || room_may_be_made(module))) {
      // Its table was let go when evicted or refused (enqueue skips one already asked for).
      enqueue(key, module);
    }
    if (module.table && !module.loaded && !module.failed) {
      load(key, module, module.wanted);
      if (module.loaded) mark_users_dirty(key);
    }
    return key;
  }
  Module& module = it->second;
  module.path = path;
  module.build_id = id;
  if (path == kVdso) {
    // A few dozen FDEs: compiled here, at once.
    module.queued = true;
    module.wanted = true;
    count(module);
    if (found->image.empty()) {
      module.failed = true;
      std::lock_guard lock(mutex_);
      stats_.without_table.push_back(std::string(kVdso) + ": " +
                                     (found->error.empty() ? "its image could not be read" : found->error));
      return key;
    }
    module.table = compile_cfi_table_image(found->image, kVdso);
    load(key, module);
    return key;
  }
  module.candidates = std::move(candidates);
  module.identity = std::move(identity);
  module.file_bytes = file_bytes;
  module.wanted = !lazy_ || pid <= 0 || sampled_.count(pid) != 0;
  // Lazy mode: a module not wanted yet is still looked up in the cache on disk at once (cheap), so that
  // with a warm cache its process's first samples find the table; it is compiled only once wanted.
  if (module.wanted)
    enqueue(key, module);
  else if (!module.build_id.empty() && current_unwind_cache())
    enqueue(key, module, true);
  return key;
}

void CfiMaps::enqueue(const std::string& key, Module& module, bool lookup_only) {
  if (module.queued) return;
  module.queued = true;
  // A table asked for again (let go when evicted or refused) is this recording's own, not one kept
  // from an earlier recording, wherever it comes from now.
  const bool again = module.asked;
  module.asked = true;
  if (!lookup_only) count(module);
  // Kept by an earlier recording of this process (hpd): handed to poll() at once, not through the
  // worker, so that a warm recording's tables wait for no thread to be scheduled (on a loaded machine
  // that wait was most of the 16-36 ms its tables took).
  if (auto kept = shared_cfi_tables().find(module.path, module.build_id, module.identity)) {
    std::lock_guard lock(mutex_);
    if (!again) ++stats_.tables_kept;
    done_.push_back(Done{key, std::move(kept), lookup_only});
    const uint64_t one = 1;
    if (::write(ready_fd_.get(), &one, sizeof one) < 0) {
      // The counter is full (never in practice): the recorder's poll timeout still comes.
    }
    return;
  }
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(Job{key, module.path, module.build_id, module.candidates, lookup_only, module.identity,
                        again, module.file_bytes, module.waiting});
    if (lookup_only) ++lookups_;
  }
  wake_.notify_one();
}

void CfiMaps::count(Module& module) {
  if (module.counted) return;
  module.counted = true;
  std::lock_guard lock(mutex_);
  ++stats_.modules;
}

void CfiMaps::sampled(int32_t pid) {
  if (!lazy_ || !sampled_.try_emplace(pid, true).second) return;
  const auto it = processes_.find(pid);
  if (it == processes_.end()) return;
  for (const Mapping& m : it->second) {
    Module& module = modules_.at(m.module);
    module.wanted = true;
    if (module.table && !module.loaded && !module.failed) {
      // Found in the cache on disk before it was wanted, and not loaded then: now, making room.
      load(m.module, module);
      if (module.loaded) mark_users_dirty(m.module);
    } else if (!module.no_room || room_may_be_made(module)) {
      enqueue(m.module, module);
    }
  }
}

void CfiMaps::waiting(int32_t pid) {
  const auto it = processes_.find(pid);
  if (it == processes_.end()) return;
  for (const Mapping& m : it->second) {
    const auto module = modules_.find(m.module);
    if (module != modules_.end() && module->second.queued && !module->second.table)
      module->second.waiting->fetch_add(1, std::memory_order_relaxed);
  }
}

void CfiMaps::insert_mapping(int32_t pid, Mapping m) {
  auto& list = processes_[pid];
  // A new mapping replaces whatever it overlaps (mmap over an old range).
  if (std::erase_if(list, [&](const Mapping& old) { return old.start < m.end && m.start < old.end; }) != 0)
    ++releases_;
  list.push_back(std::move(m));
  dirty_.push_back(pid);
}

void CfiMaps::add_process_maps(int32_t pid, const std::vector<MapsEntry>& maps) {
  for (const MapsEntry& e : maps) {
    if (!e.executable || !may_have_table(e.path) || e.end <= e.start) continue;
    // The kernel pages' rows are at offsets from the page's start.
    const uint64_t offset = kernel_page(e.path) != nullptr ? 0 : e.offset;
    insert_mapping(pid, Mapping{e.start, e.end, offset, module_for(pid, e.start, e.end, e.path, nullptr)});
  }
  dirty_.push_back(pid);
}

void CfiMaps::add_mapping(int32_t pid, uint64_t start, uint64_t length, uint64_t file_offset,
                          const std::string& path, const MappedModule* found, uint64_t time_ns) {
  if (!may_have_table(path) || length == 0) return;
  if (const auto e = exec_ns_.find(pid); e != exec_ns_.end() && time_ns != 0 && time_ns < e->second)
    return;  // the old image's, read after the exec's record
  insert_mapping(pid, Mapping{start, start + length, kernel_page(path) != nullptr ? 0 : file_offset,
                              module_for(pid, start, start + length, path, found), time_ns});
}

void CfiMaps::prewarm(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (may_have_table(path)) module_for(0, 0, 0, path, nullptr);
  }
}

void CfiMaps::fork(int32_t parent, int32_t child) {
  const auto it = processes_.find(parent);
  if (it == processes_.end() || parent == child) return;
  // The mmap records are drained before the programs' records: an exec's may be in already.
  if (processes_.count(child) != 0) return;
  std::vector<Mapping> copy = it->second;
  // The kernel does not copy its uprobe pages into a child (VM_DONTCOPY, "dc" in smaps).
  std::erase_if(copy, [](const Mapping& m) { return kernel_page(m.module) != nullptr; });
  for (Mapping& m : copy) m.time_ns = 0;
  processes_[child] = std::move(copy);
  dirty_.push_back(child);
}

void CfiMaps::exec(int32_t pid, uint64_t time_ns) {
  ++releases_;
  exec_ns_[pid] = time_ns;
  std::vector<Mapping>& list = processes_[pid];
  const auto old_image = [&](const Mapping& m) { return m.time_ns < time_ns || time_ns == 0; };
  // The old image's mappings are looked at again only when some module was refused.
  std::vector<Mapping> gone;
  if (refused_rows_ != 0) std::copy_if(list.begin(), list.end(), std::back_inserter(gone), old_image);
  std::erase_if(list, old_image);
  forget_unmapped_refusals(gone);
  // hpd_exec took the old image's mappings out of the kernel's map: the process is not published until
  // the new image is (its held samples wait for that, not for what was published before the exec).
  published_.erase(pid);
  dirty_.push_back(pid);
}

void CfiMaps::exec_in_kernel(int32_t pid, uint64_t time_ns) {
  uint64_t& previous = kernel_exec_ns_[pid];
  // The exec's own record came after the previous exec's hpd_exec: it was read, and what it published
  // may have been taken out since.
  if (exec_ns(pid) > previous) dirty_.push_back(pid);
  previous = time_ns;
}

void CfiMaps::exit(int32_t pid) {
  ++releases_;
  std::vector<Mapping> gone;
  // Its modules were in use until now.
  if (const auto it = processes_.find(pid); it != processes_.end()) {
    ++tick_;
    for (const Mapping& m : it->second) modules_.at(m.module).last_used = tick_;
    gone = std::move(it->second);
    processes_.erase(it);
  }
  forget_unmapped_refusals(gone);
  sampled_.erase(pid);
  exec_ns_.erase(pid);
  kernel_exec_ns_.erase(pid);
  published_.erase(pid);
  bpf_map_delete_elem(procs_fd_, &pid);
}

void CfiMaps::forget_unmapped_refusals(const std::vector<Mapping>& gone) {
  if (refused_rows_ == 0) return;
  for (const Mapping& g : gone) {
    Module& module = modules_.at(g.module);
    if (!module.refused_counted) continue;
    const bool mapped = std::any_of(processes_.begin(), processes_.end(), [&](const auto& process) {
      return std::any_of(process.second.begin(), process.second.end(),
                         [&](const Mapping& m) { return m.module == g.module; });
    });
    if (mapped) continue;
    module.refused_counted = false;
    refused_rows_ -= module.refused_rows;
  }
}

CfiMaps::Placed CfiMaps::place(Module& module) {
  const CfiTable& t = *module.table;
  const auto rows = static_cast<uint32_t>(t.rows.size());
  const auto buckets = static_cast<uint32_t>(t.index.buckets.size());
  uint32_t row_first = 0;
  uint32_t index_first = 0;
  if (!row_slots_.take(rows, &row_first)) return Placed::kNoRoomForRows;
  if (!index_slots_.take(buckets, &index_first)) {
    row_slots_.give_back(row_first, rows);
    return Placed::kNoRoomForRows;
  }
  // Each row's rule by its entry in the rule map, taken once per table (its distinct rules, a few
  // hundred for the largest programs) and written there before any row names it. (libLLVM's 948,864
  // rows: 4.4 ms of lookups here; a cache of the last rules met in front of them saved 2 ms.)
  std::vector<uint32_t> taken;
  std::unordered_map<uint64_t, uint32_t> entry_of;
  for (uint32_t i = 0; i < rows; ++i) {
    const CfiRow& r = t.rows[i];
    const uint64_t key = RuleSlots::key(r);
    uint32_t entry = 0;
    if (const auto it = entry_of.find(key); it != entry_of.end()) {
      entry = it->second;
    } else {
      if (!rule_slots_.take(key, &entry)) {
        for (const uint32_t e : taken) rule_slots_.give_back(e);
        row_slots_.give_back(row_first, rows);
        index_slots_.give_back(index_first, buckets);
        return Placed::kNoRoomForRules;
      }
      const hpd_cfi_rule rule{r.cfa_offset, r.rbp_offset, r.cfa_kind, r.rbp_kind};
      std::memcpy(rules_ + size_t{entry} * kRuleStride, &rule, sizeof rule);
      taken.push_back(entry);
      entry_of.emplace(key, entry);
    }
    const hpd_cfi_row row{r.pc, entry};
    std::memcpy(rows_ + (static_cast<size_t>(row_first) + i) * kRowStride, &row, sizeof row);
  }
  for (uint32_t i = 0; i < buckets; ++i)
    std::memcpy(index_ + (static_cast<size_t>(index_first) + i) * kBucketStride, &t.index.buckets[i],
                sizeof(CfiBucket));
  module.row_first = row_first;
  module.row_count = rows;
  module.index_first = index_first;
  module.index_count = buckets;
  module.rules = std::move(taken);
  return Placed::kYes;
}

void CfiMaps::give_back_room(Module& module) {
  row_slots_.give_back(module.row_first, module.row_count);
  index_slots_.give_back(module.index_first, module.index_count);
  for (const uint32_t e : module.rules) rule_slots_.give_back(e);
  module.rules.clear();
  module.row_count = 0;
  module.index_count = 0;
}

// Takes the least recently used table that no followed process maps out of the maps; false when
// every loaded table is in use.
bool CfiMaps::evict_one() {
  // A process that exec'd has lost its old mappings here, but its entry in the kernel still names
  // their rows until it is published again: publish first, so that no new walk is sent into rows
  // about to be reused (a walk already under way may still read them: rows are bounds-checked).
  publish_dirty();
  std::set<std::string> in_use;
  for (const auto& [pid, list] : processes_) {
    for (const Mapping& m : list) in_use.insert(m.module);
  }
  // Tables loaded before they were wanted (lazy mode: found in the cache on disk, their processes
  // not sampled yet) go first, then the least recently used of modules no followed process maps.
  Module* oldest = nullptr;
  std::string oldest_key;
  auto older = [&](const Module& m) {
    if (oldest == nullptr) return true;
    if (m.wanted != oldest->wanted) return !m.wanted;
    return m.last_used < oldest->last_used;
  };
  for (auto& [key, module] : modules_) {
    if (!module.loaded || (module.wanted && in_use.count(key) != 0)) continue;
    if (older(module)) {
      oldest = &module;
      oldest_key = key;
    }
  }
  if (oldest == nullptr) return false;
  give_back_room(*oldest);
  oldest->loaded = false;
  // A table no followed process maps is let go as well: a collection of an hour on a host that starts
  // many programs would otherwise hold every table it ever compiled. Mapped again, the module asks
  // for it again (the tables hpd keeps, the cache on disk, or a compile). The vDSO's and the kernel's
  // pages are made here, not asked for: kept (a few rows).
  bool released = false;
  if (in_use.count(oldest_key) == 0 && !oldest->path.empty() && oldest->path.front() != '[') {
    oldest->table.reset();
    oldest->queued = false;
    released = true;
  }
  if (in_use.count(oldest_key) != 0) {
    // Its processes' entries name the rows about to be reused: published again first (pending).
    mark_users_dirty(oldest_key);
    publish_dirty();
  }
  std::lock_guard lock(mutex_);
  if (oldest->wanted) ++stats_.modules_evicted;
  if (released) ++stats_.tables_released;
  --stats_.modules_loaded;
  return true;
}

void CfiMaps::load(const std::string& key, Module& module, bool may_evict) {
  const CfiTable& t = *module.table;
  if (!may_evict) {
    // Not wanted yet: loaded only when it fits as things are, and nothing is said about it otherwise.
    if (t.rows.empty() || t.rows.size() > capacity_ || t.index.buckets.size() > index_capacity_ ||
        place(module) != Placed::kYes)
      return;
    count(module);
    module.loaded = true;
    module.last_used = ++tick_;
    std::lock_guard lock(mutex_);
    ++stats_.modules_loaded;
    stats_.rows = row_slots_.used();
    stats_.buckets = index_slots_.used();
    stats_.rules = rule_slots_.used();
    stats_.map_bytes = row_slots_.used() * kRowStride + rule_slots_.used() * kRuleStride +
                       index_slots_.used() * kBucketStride;
    return;
  }
  count(module);
  if (t.rows.empty()) {
    module.failed = true;
    std::lock_guard lock(mutex_);
    stats_.without_table.push_back(module.path + ": " + (t.error.empty() ? "no CFI" : t.error));
    return;
  }
  Placed placed = Placed::kNoRoomForRows;
  if (t.rows.size() <= capacity_ && t.index.buckets.size() <= index_capacity_) {
    while ((placed = place(module)) != Placed::kYes) {
      if (!evict_one()) break;
    }
  }
  if (placed != Placed::kYes) {
    if (module.refused_counted) refused_rows_ -= module.refused_rows;
    module.no_room = true;
    module.refused_rows = static_cast<uint32_t>(t.rows.size());
    module.refused_counted = true;
    refused_rows_ += module.refused_rows;
    module.refused_buckets = static_cast<uint32_t>(t.index.buckets.size());
    module.refused_at = releases_;
    if (refused_noted_.insert(key).second) {
      char text[160];
      if (placed == Placed::kNoRoomForRules) {
        // The distinct rules of every loaded table fill the rule map (HPD_CFI_RULES: a machine's
        // programs use a few thousand).
        std::snprintf(text, sizeof text,
                      ": the CFI row map is full (its rule map: %" PRIu64
                      " of %u distinct rules in use by tables of mapped modules)",
                      rule_slots_.used(), rule_capacity_);
      } else {
        std::snprintf(text, sizeof text,
                      ": the CFI row map is full (%zu rows needed, %" PRIu64
                      " of %u in use by tables of mapped "
                      "modules)",
                      t.rows.size(), row_slots_.used(), capacity_);
      }
      std::lock_guard lock(mutex_);
      ++stats_.modules_refused;
      stats_.without_table.push_back(module.path + text);
    }
    note_rows_wanted();
    // Not held for a later try: a collection of an hour with a full row map (a host that starts many
    // programs) would hold the table of every module it refused, beyond the bound of the tables hpd
    // keeps. Mapped again once room may be made (room_may_be_made), the module asks for it again: the
    // tables hpd keeps, the cache on disk, or a compile. The vDSO's and the kernel's pages are made
    // here, not asked for: kept (a few rows).
    if (!module.path.empty() && module.path.front() != '[') {
      module.table.reset();
      module.queued = false;
    }
    return;
  }
  module.loaded = true;
  module.last_used = ++tick_;
  if (module.no_room) {
    // Refused earlier: say that the refusal was for part of the recording only.
    module.no_room = false;
    if (module.refused_counted) refused_rows_ -= module.refused_rows;
    module.refused_counted = false;
    std::lock_guard lock(mutex_);
    for (std::string& line : stats_.without_table) {
      if (line.rfind(module.path + ": the CFI row map is full", 0) == 0 &&
          line.find("loaded later") == std::string::npos)
        line += "; loaded later, when room was made";
    }
  }
  note_rows_wanted();
  std::lock_guard lock(mutex_);
  ++stats_.modules_loaded;
  stats_.rows = row_slots_.used();
  stats_.buckets = index_slots_.used();
  stats_.rules = rule_slots_.used();
  stats_.map_bytes =
      row_slots_.used() * kRowStride + rule_slots_.used() * kRuleStride + index_slots_.used() * kBucketStride;
}

void CfiMaps::note_rows_wanted() {
  if (refused_rows_ == 0) return;
  std::lock_guard lock(mutex_);
  stats_.rows_wanted = std::max<uint64_t>(stats_.rows_wanted, row_slots_.used() + refused_rows_);
}

void CfiMaps::mark_users_dirty(const std::string& key) {
  for (const auto& [pid, list] : processes_) {
    for (const Mapping& m : list) {
      if (m.module == key) {
        dirty_.push_back(pid);
        break;
      }
    }
  }
}

void CfiMaps::publish(int32_t pid) {
  const auto it = processes_.find(pid);
  if (it == processes_.end()) return;
  ++tick_;
  auto& list = it->second;
  std::sort(list.begin(), list.end(), [](const Mapping& a, const Mapping& b) { return a.start < b.start; });
  auto value = std::make_unique<hpd_proc_mappings>();
  std::memset(value.get(), 0, sizeof *value);
  uint32_t n = 0;
  for (const Mapping& m : list) {
    if (n >= HPD_MAX_PROC_MAPPINGS) {
      std::lock_guard lock(mutex_);
      ++stats_.mappings_dropped;
      continue;
    }
    hpd_proc_mapping& out = value->mappings[n++];
    out.start = m.start;
    out.end = m.end;
    Module& module = modules_.at(m.module);
    module.last_used = tick_;
    uint64_t vaddr = 0;
    if (module.loaded && module.table->vaddr_of(m.file_offset, &vaddr)) {
      out.bias = m.start - vaddr;
      out.row_first = module.row_first;
      out.row_count = module.row_count;
      out.index_first = module.index_first;
      out.index_count = use_index_ ? module.index_count : 0;
      out.index_base = module.table->index.base;
      out.index_shift = module.table->index.shift;
    } else if (!module.loaded && !module.failed && !module.no_room) {
      out.flags = HPD_MAPPING_PENDING;
    }
  }
  value->count = n;
  Published& published = published_[pid];
  published.at = tick_;
  published.tables_pending = false;
  for (uint32_t i = 0; i < n; ++i)
    published.tables_pending |= (value->mappings[i].flags & HPD_MAPPING_PENDING) != 0;
  if (bpf_map_update_elem(procs_fd_, &pid, value.get(), BPF_ANY) != 0) {
    std::lock_guard lock(mutex_);
    ++stats_.publish_failures;
  }
}

void CfiMaps::poll() {
  uint64_t count = 0;
  if (::read(ready_fd_.get(), &count, sizeof count) < 0) count = 0;  // EAGAIN: nothing new
  std::vector<Done> done;
  {
    std::lock_guard lock(mutex_);
    done.swap(done_);
  }
  const bool late_now = !late_path_.empty() && std::chrono::steady_clock::now() < late_until_;
  if (!late_now) {
    std::move(late_.begin(), late_.end(), std::back_inserter(done));
    late_.clear();
  }
  for (Done& d : done) {
    Module& module = modules_[d.key];
    if (late_now && d.table && module.path.find(late_path_) != std::string::npos) {
      late_.push_back(std::move(d));
      continue;
    }
    if (!d.table) {
      // Not in the cache on disk: compiled once wanted (now, if it was wanted meanwhile).
      module.queued = false;
      if (module.wanted) enqueue(d.key, module);
      continue;
    }
    module.table = std::move(d.table);
    load(d.key, module, module.wanted);
    mark_users_dirty(d.key);
  }
  publish_dirty();
  std::lock_guard lock(mutex_);
  stats_.processes = processes_.size();
}

size_t CfiMaps::tables_held() const {
  size_t n = 0;
  for (const auto& [key, module] : modules_) n += module.table ? 1 : 0;
  return n;
}

uint64_t CfiMaps::table_bytes_held() const {
  uint64_t bytes = 0;
  for (const auto& [key, module] : modules_)
    if (module.table) bytes += CfiTableCache::kept_bytes(*module.table);
  return bytes;
}

bool CfiMaps::room_may_be_made(const Module& module) const {
  // A process gone or changed since may have left a loaded table evictable; else only free rows help.
  return releases_ != module.refused_at || (capacity_ - row_slots_.used() >= module.refused_rows &&
                                            index_capacity_ - index_slots_.used() >= module.refused_buckets);
}

void CfiMaps::publish_dirty() {
  std::sort(dirty_.begin(), dirty_.end());
  dirty_.erase(std::unique(dirty_.begin(), dirty_.end()), dirty_.end());
  for (const int32_t pid : dirty_) publish(pid);
  dirty_.clear();
}

CfiMaps::Published CfiMaps::published(int32_t pid) const {
  const auto it = published_.find(pid);
  return it == published_.end() ? Published{} : it->second;
}

void CfiMaps::wait_for_tables(int timeout_ms) {
  {
    std::unique_lock lock(mutex_);
    idle_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                   [this] { return jobs_.empty() && busy_ == 0; });
  }
  poll();
}

bool CfiMaps::wait_for_next_table(int timeout_ms) {
  {
    std::lock_guard lock(mutex_);
    if (jobs_.empty() && busy_ == 0 && done_.empty()) return false;
  }
  pollfd ready{ready_fd_.get(), POLLIN, 0};
  ::poll(&ready, 1, timeout_ms);  // EINTR or the timeout: the caller's deadline decides
  poll();
  return true;
}

void CfiMaps::wait_for_cached_tables(int timeout_ms) {
  {
    std::unique_lock lock(mutex_);
    idle_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return lookups_ == 0; });
  }
  poll();
}

CfiMapStats CfiMaps::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace hpd
