// CfiMaps: the cfi walk's row and per-process mapping maps, fed from compiled module tables.
#include "bpf/cfi_maps.h"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <set>

#include "hpd/base/elf.h"
#include "hpd/collect/recorder.h"
#include "profile_event.h"

namespace hpd {

namespace {

// A BPF array stores each value at an 8-byte-aligned stride; its shared mapping has the same layout.
constexpr size_t kRowStride = (sizeof(hpd_cfi_row) + 7) / 8 * 8;
static_assert(sizeof(hpd_cfi_row) == sizeof(CfiRow));
static_assert(offsetof(hpd_cfi_row, cfa_kind) == offsetof(CfiRow, cfa_kind));
static_assert(offsetof(hpd_cfi_row, rbp_offset) == offsetof(CfiRow, rbp_offset));
static_assert(HPD_CFA_PLT == static_cast<int>(CfaKind::kPlt) &&
              HPD_CFA_SIGNAL == static_cast<int>(CfaKind::kSignal) &&
              HPD_CFA_OUTERMOST == static_cast<int>(CfaKind::kOutermost) &&
              HPD_CFA_UNSUPPORTED == static_cast<int>(CfaKind::kUnsupported));
static_assert(HPD_RBP_AT_CFA == static_cast<int>(RbpKind::kAtCfa) &&
              HPD_RBP_UNDEFINED == static_cast<int>(RbpKind::kUndefined));
static_assert(HPD_SIGFRAME_RIP == kSigframeRip && HPD_SIGFRAME_RSP == kSigframeRsp &&
              HPD_SIGFRAME_RBP == kSigframeRbp);

bool is_file_path(const std::string& path) {
  return !path.empty() && path.front() == '/';
}

}  // namespace

CfiTableCache& shared_cfi_tables() {
  static CfiTableCache cache;
  return cache;
}

CfiMaps::CfiMaps(int rows_fd, uint32_t capacity, int procs_fd, bool lazy)
    : lazy_(lazy), rows_fd_(rows_fd), procs_fd_(procs_fd), capacity_(capacity) {
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  rows_bytes_ = (static_cast<size_t>(capacity) * kRowStride + page - 1) / page * page;
  void* p = ::mmap(nullptr, rows_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, rows_fd_, 0);
  if (p == MAP_FAILED)
    throw RecordError(std::string("cannot map the eBPF CFI row table: ") + std::strerror(errno));
  rows_ = static_cast<uint8_t*>(p);
  ready_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (ready_fd_ < 0) {
    ::munmap(rows_, rows_bytes_);
    throw RecordError(std::string("cannot create an eventfd: ") + std::strerror(errno));
  }
  stats_.row_capacity = capacity;
  worker_ = std::thread([this] { worker_loop(); });
}

CfiMaps::~CfiMaps() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    jobs_.clear();
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
  if (rows_ != nullptr) ::munmap(rows_, rows_bytes_);
  if (ready_fd_ >= 0) ::close(ready_fd_);
}

void CfiMaps::worker_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    ++busy_;
    lock.unlock();
    const auto begin = std::chrono::steady_clock::now();
    auto table = shared_cfi_tables().get(job.path, job.build_id, job.candidates);
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - begin);
    lock.lock();
    stats_.compile_ns += static_cast<uint64_t>(ns.count());
    done_.emplace_back(job.key, std::move(table));
    --busy_;
    const uint64_t one = 1;
    if (::write(ready_fd_, &one, sizeof one) < 0) {
      // The counter is full (never in practice): the recorder's poll timeout still comes.
    }
    if (jobs_.empty() && busy_ == 0) idle_.notify_all();
  }
}

std::string CfiMaps::module_for(int32_t pid, uint64_t start, uint64_t end, const std::string& path,
                                const std::string& build_id) {
  const std::string id = !build_id.empty()
                             ? build_id
                             : build_ids_.for_mapping(pid > 0 ? pid : ::getpid(), start, end, path).build_id;
  std::string key = id.empty() ? "path:" + path : id;
  auto [it, inserted] = modules_.try_emplace(key);
  if (!inserted) return key;
  Module& module = it->second;
  module.path = path;
  module.build_id = id;
  if (pid > 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, start, end);
    module.candidates.emplace_back(buf);
    module.candidates.push_back("/proc/" + std::to_string(pid) + "/root" + path);
  }
  module.candidates.push_back(path);
  if (!lazy_ || pid <= 0 || sampled_.count(pid) != 0) enqueue(key, module);
  return key;
}

void CfiMaps::enqueue(const std::string& key, Module& module) {
  if (module.queued) return;
  module.queued = true;
  {
    std::lock_guard lock(mutex_);
    ++stats_.modules;
    jobs_.push_back(Job{key, module.path, module.build_id, module.candidates});
  }
  wake_.notify_one();
}

void CfiMaps::sampled(int32_t pid) {
  if (!lazy_ || !sampled_.emplace(pid, true).second) return;
  const auto it = processes_.find(pid);
  if (it == processes_.end()) return;
  for (const Mapping& m : it->second) enqueue(m.module, modules_.at(m.module));
}

void CfiMaps::insert_mapping(int32_t pid, Mapping m) {
  auto& list = processes_[pid];
  // A new mapping replaces whatever it overlaps (mmap over an old range).
  std::erase_if(list, [&](const Mapping& old) { return old.start < m.end && m.start < old.end; });
  list.push_back(std::move(m));
  dirty_.push_back(pid);
}

void CfiMaps::add_process_maps(int32_t pid, const std::vector<MapsEntry>& maps) {
  for (const MapsEntry& e : maps) {
    if (!e.executable || !is_file_path(e.path) || e.end <= e.start) continue;
    insert_mapping(pid, Mapping{e.start, e.end, e.offset, module_for(pid, e.start, e.end, e.path, "")});
  }
  dirty_.push_back(pid);
}

void CfiMaps::add_mapping(int32_t pid, uint64_t start, uint64_t length, uint64_t file_offset,
                          const std::string& path, const std::string& build_id, uint64_t time_ns) {
  if (!is_file_path(path) || length == 0) return;
  if (const auto e = exec_ns_.find(pid); e != exec_ns_.end() && time_ns != 0 && time_ns < e->second)
    return;  // the old image's, read after the exec's record
  insert_mapping(pid, Mapping{start, start + length, file_offset,
                              module_for(pid, start, start + length, path, build_id), time_ns});
}

void CfiMaps::prewarm(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (is_file_path(path)) module_for(0, 0, 0, path, "");
  }
}

void CfiMaps::fork(int32_t parent, int32_t child) {
  const auto it = processes_.find(parent);
  if (it == processes_.end() || parent == child) return;
  // The mmap records are drained before the programs' records: an exec's may be in already.
  if (processes_.count(child) != 0) return;
  std::vector<Mapping> copy = it->second;
  for (Mapping& m : copy) m.time_ns = 0;
  processes_[child] = std::move(copy);
  dirty_.push_back(child);
}

void CfiMaps::exec(int32_t pid, uint64_t time_ns) {
  exec_ns_[pid] = time_ns;
  std::erase_if(processes_[pid], [&](const Mapping& m) { return m.time_ns < time_ns || time_ns == 0; });
  dirty_.push_back(pid);
}

void CfiMaps::exit(int32_t pid) {
  processes_.erase(pid);
  sampled_.erase(pid);
  exec_ns_.erase(pid);
  bpf_map_delete_elem(procs_fd_, &pid);
}

void CfiMaps::load(Module& module) {
  const CfiTable& t = *module.table;
  if (t.rows.empty()) {
    module.failed = true;
    std::lock_guard lock(mutex_);
    stats_.without_table.push_back(module.path + ": " + (t.error.empty() ? "no CFI" : t.error));
    return;
  }
  if (t.rows.size() > capacity_ - next_row_) {
    module.failed = true;
    std::lock_guard lock(mutex_);
    stats_.without_table.push_back(module.path + ": the CFI row map is full (" + std::to_string(capacity_) +
                                   " rows)");
    return;
  }
  for (size_t i = 0; i < t.rows.size(); ++i)
    std::memcpy(rows_ + (static_cast<size_t>(next_row_) + i) * kRowStride, &t.rows[i], sizeof(CfiRow));
  module.row_first = next_row_;
  module.row_count = static_cast<uint32_t>(t.rows.size());
  next_row_ += module.row_count;
  module.loaded = true;
  std::lock_guard lock(mutex_);
  ++stats_.modules_loaded;
  stats_.rows = next_row_;
  stats_.map_bytes = static_cast<uint64_t>(next_row_) * kRowStride;
}

void CfiMaps::publish(int32_t pid) {
  const auto it = processes_.find(pid);
  if (it == processes_.end()) return;
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
    const Module& module = modules_.at(m.module);
    uint64_t vaddr = 0;
    if (module.loaded && module.table->vaddr_of(m.file_offset, &vaddr)) {
      out.bias = m.start - vaddr;
      out.row_first = module.row_first;
      out.row_count = module.row_count;
    } else if (!module.loaded && !module.failed) {
      out.flags = HPD_MAPPING_PENDING;
    }
  }
  value->count = n;
  if (bpf_map_update_elem(procs_fd_, &pid, value.get(), BPF_ANY) != 0) {
    std::lock_guard lock(mutex_);
    ++stats_.publish_failures;
  }
}

void CfiMaps::poll() {
  uint64_t count = 0;
  if (::read(ready_fd_, &count, sizeof count) < 0) count = 0;  // EAGAIN: nothing new
  std::vector<std::pair<std::string, std::shared_ptr<const CfiTable>>> done;
  {
    std::lock_guard lock(mutex_);
    done.swap(done_);
  }
  for (auto& [key, table] : done) {
    Module& module = modules_[key];
    module.table = std::move(table);
    load(module);
    for (const auto& [pid, list] : processes_) {
      for (const Mapping& m : list) {
        if (m.module == key) {
          dirty_.push_back(pid);
          break;
        }
      }
    }
  }
  std::sort(dirty_.begin(), dirty_.end());
  dirty_.erase(std::unique(dirty_.begin(), dirty_.end()), dirty_.end());
  for (const int32_t pid : dirty_) publish(pid);
  dirty_.clear();
  std::lock_guard lock(mutex_);
  stats_.processes = processes_.size();
}

void CfiMaps::wait_for_tables(int timeout_ms) {
  {
    std::unique_lock lock(mutex_);
    idle_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                   [this] { return jobs_.empty() && busy_ == 0; });
  }
  poll();
}

CfiMapStats CfiMaps::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

namespace {

// DT_NEEDED, DT_RUNPATH/DT_RPATH and PT_INTERP of an ELF file.
struct DynamicInfo {
  std::vector<std::string> needed;
  std::vector<std::string> search;
  std::string interpreter;
};

DynamicInfo read_dynamic(const std::string& path) {
  DynamicInfo info;
  const OpenedElf file = OpenedElf::open(path, ELF_C_READ_MMAP);
  if (Elf* elf = file.get(); elf != nullptr) {
    size_t phnum = 0;
    if (elf_getphdrnum(elf, &phnum) == 0) {
      for (size_t i = 0; i < phnum; ++i) {
        GElf_Phdr ph;
        if (gelf_getphdr(elf, static_cast<int>(i), &ph) == nullptr || ph.p_type != PT_INTERP) continue;
        size_t size = 0;
        const char* raw = elf_rawfile(elf, &size);
        if (raw != nullptr && ph.p_offset < size && ph.p_filesz > 1 && ph.p_filesz <= size - ph.p_offset)
          info.interpreter.assign(raw + ph.p_offset, strnlen(raw + ph.p_offset, ph.p_filesz));
      }
    }
    for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
      GElf_Shdr shdr;
      if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != SHT_DYNAMIC) continue;
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (data == nullptr || shdr.sh_entsize == 0) continue;
      for (size_t i = 0; i < shdr.sh_size / shdr.sh_entsize; ++i) {
        GElf_Dyn dyn;
        if (gelf_getdyn(data, static_cast<int>(i), &dyn) == nullptr) break;
        const char* text = nullptr;
        if (dyn.d_tag == DT_NEEDED || dyn.d_tag == DT_RUNPATH || dyn.d_tag == DT_RPATH)
          text = elf_strptr(elf, shdr.sh_link, dyn.d_un.d_val);
        if (text == nullptr) continue;
        if (dyn.d_tag == DT_NEEDED) {
          info.needed.emplace_back(text);
        } else {
          std::string list = text;
          const std::string origin = path.substr(0, path.rfind('/'));
          for (size_t at = list.find("$ORIGIN"); at != std::string::npos; at = list.find("$ORIGIN"))
            list.replace(at, 7, origin);
          for (size_t begin = 0; begin <= list.size();) {
            const size_t end = std::min(list.find(':', begin), list.size());
            if (end > begin) info.search.push_back(list.substr(begin, end - begin));
            begin = end + 1;
          }
        }
      }
    }
  }
  return info;
}

}  // namespace

std::vector<std::string> likely_modules(const std::string& executable) {
  static const char* const kDefaultDirs[] = {
      "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib",
      "/usr/local/lib"};
  std::vector<std::string> out;
  std::vector<std::string> queue = {executable};
  std::set<std::string> seen_names;
  while (!queue.empty() && out.size() < 128) {
    const std::string path = queue.back();
    queue.pop_back();
    if (std::find(out.begin(), out.end(), path) != out.end()) continue;
    out.push_back(path);
    const DynamicInfo info = read_dynamic(path);
    if (!info.interpreter.empty()) queue.push_back(info.interpreter);
    for (const std::string& name : info.needed) {
      if (!seen_names.insert(name).second) continue;
      std::vector<std::string> dirs = info.search;
      dirs.insert(dirs.end(), std::begin(kDefaultDirs), std::end(kDefaultDirs));
      for (const std::string& dir : dirs) {
        const std::string candidate = name.find('/') != std::string::npos ? name : dir + "/" + name;
        if (::access(candidate.c_str(), R_OK) == 0) {
          queue.push_back(candidate);
          break;
        }
      }
    }
  }
  return out;
}

}  // namespace hpd
