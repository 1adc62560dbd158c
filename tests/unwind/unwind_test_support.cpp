// Test helpers: perf_event sampling with its own ring reader, maps, symbolization.
#include "unwind_test_support.h"

#include <linux/perf_event.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "cpu_clock.h"
#include "hpd/symbolizer/symbolizer.h"

namespace hpd::unwind_test {

namespace {

class PerfRing {
 public:
  PerfRing(int fd, size_t data_pages) : fd_(fd) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_ = page_ * (data_pages + 1);
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  ~PerfRing() {
    if (base_ != nullptr) munmap(base_, size_);
    if (fd_ >= 0) close(fd_);
  }
  PerfRing(const PerfRing&) = delete;
  PerfRing& operator=(const PerfRing&) = delete;
  bool ok() const { return base_ != nullptr; }
  int fd() const { return fd_; }

  // Calls fn(header, bytes) for every complete record, wrap-around resolved.
  template <typename Fn>
  void drain(Fn&& fn) {
    auto* meta = reinterpret_cast<perf_event_mmap_page*>(base_);
    const uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
    uint64_t tail = meta->data_tail;
    const uint64_t data_size = size_ - page_;
    const uint8_t* data = base_ + page_;
    while (tail + sizeof(perf_event_header) <= head) {
      perf_event_header hdr;
      copy_out(data, data_size, tail, &hdr, sizeof hdr);
      if (hdr.size < sizeof hdr || tail + hdr.size > head) break;
      record_.resize(hdr.size);
      copy_out(data, data_size, tail, record_.data(), hdr.size);
      fn(hdr, record_);
      tail += hdr.size;
    }
    __atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
  }

 private:
  static void copy_out(const uint8_t* data, uint64_t data_size, uint64_t pos, void* out, size_t n) {
    const uint64_t off = pos % data_size;
    const size_t first = static_cast<size_t>(std::min<uint64_t>(n, data_size - off));
    std::memcpy(out, data + off, first);
    if (first < n) std::memcpy(static_cast<uint8_t*>(out) + first, data, n - first);
  }

  int fd_ = -1;
  size_t page_ = 4096;
  size_t size_ = 0;
  uint8_t* base_ = nullptr;
  std::vector<uint8_t> record_;
};

class Cursor {
 public:
  Cursor(const std::vector<uint8_t>& rec, size_t pos) : rec_(rec), pos_(pos) {}
  bool u64(uint64_t* v) {
    if (pos_ + 8 > rec_.size()) return false;
    std::memcpy(v, rec_.data() + pos_, 8);
    pos_ += 8;
    return true;
  }
  bool bytes(size_t n, const uint8_t** p) {
    if (n > rec_.size() || pos_ + n > rec_.size()) return false;
    *p = rec_.data() + pos_;
    pos_ += n;
    return true;
  }

 private:
  const std::vector<uint8_t>& rec_;
  size_t pos_;
};

}  // namespace

CaptureResult capture(pid_t pid, const CaptureOptions& opts) {
  CaptureResult result;
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_TASK_CLOCK;
  attr.sample_period = opts.period_ns;
  attr.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME;
  if (opts.callchain) attr.sample_type |= PERF_SAMPLE_CALLCHAIN;
  if (opts.regs_mask != 0) {
    attr.sample_type |= PERF_SAMPLE_REGS_USER;
    attr.sample_regs_user = opts.regs_mask;
  }
  if (opts.stack_bytes != 0) {
    attr.sample_type |= PERF_SAMPLE_STACK_USER;
    attr.sample_stack_user = opts.stack_bytes;
  }
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  attr.exclude_callchain_kernel = 1;
  attr.disabled = 1;
  attr.use_clockid = 1;
  attr.clockid = CLOCK_MONOTONIC;
  const int fd = static_cast<int>(syscall(SYS_perf_event_open, &attr, pid, -1, -1, PERF_FLAG_FD_CLOEXEC));
  if (fd < 0) {
    result.error = std::string("perf_event_open: ") + std::strerror(errno);
    return result;
  }
  PerfRing ring(fd, 1024);
  if (!ring.ok()) {
    result.error = std::string("mmap of the perf ring: ") + std::strerror(errno);
    return result;
  }
  const int nregs = __builtin_popcountll(opts.regs_mask);
  auto on_record = [&](const perf_event_header& hdr, const std::vector<uint8_t>& rec) {
    if (hdr.type == PERF_RECORD_LOST) {
      uint64_t id = 0;
      uint64_t lost = 0;
      Cursor c(rec, sizeof hdr);
      if (c.u64(&id) && c.u64(&lost)) result.lost += lost;
      return;
    }
    if (hdr.type != PERF_RECORD_SAMPLE) return;
    result.bytes += hdr.size;
    CapturedSample s;
    Cursor c(rec, sizeof hdr);
    uint64_t v = 0;
    if (!c.u64(&s.ip) || !c.u64(&v) || !c.u64(&s.time_ns)) return;
    s.pid = static_cast<int32_t>(v & 0xffffffff);
    s.tid = static_cast<int32_t>(v >> 32);
    if (opts.callchain) {
      uint64_t nr = 0;
      if (!c.u64(&nr) || nr > 4096) return;
      for (uint64_t i = 0; i < nr; ++i) {
        if (!c.u64(&v)) return;
        if (v < PERF_CONTEXT_MAX) s.callchain.push_back(v);
      }
    }
    if (opts.regs_mask != 0) {
      uint64_t abi = 0;
      if (!c.u64(&abi)) return;
      if (abi != PERF_SAMPLE_REGS_ABI_NONE) {
        std::vector<uint64_t> regs(nregs);
        for (auto& r : regs) {
          if (!c.u64(&r)) return;
        }
        s.regs = UserRegs::from_perf(opts.regs_mask, regs);
      }
    }
    if (opts.stack_bytes != 0) {
      uint64_t size = 0;
      const uint8_t* data = nullptr;
      if (!c.u64(&size) || !c.bytes(size, &data)) return;
      uint64_t dyn = 0;
      if (size != 0 && !c.u64(&dyn)) return;
      s.stack_requested = size;
      s.stack.assign(data, data + std::min(dyn, size));
    }
    result.samples.push_back(std::move(s));
  };
  ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
  const double cpu_at_enable = test::process_cpu_seconds(pid);
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::duration<double>(opts.cpu_seconds > 0 ? opts.cap_seconds : opts.seconds);
  while (std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ring.drain(on_record);
    if (!test::process_running(pid)) break;
    if (opts.cpu_seconds > 0 && test::process_cpu_seconds(pid) - cpu_at_enable >= opts.cpu_seconds) break;
  }
  ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
  ring.drain(on_record);
  return result;
}

RawProcess process_from_maps(pid_t pid, std::vector<RawModule>& modules) {
  RawProcess process;
  process.pid = pid;
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    uint64_t start = 0;
    uint64_t end = 0;
    uint64_t offset = 0;
    char perms[8] = {};
    int path_pos = 0;
    if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %*s %*s %n", &start, &end, perms,
                    &offset, &path_pos) < 4) {
      continue;
    }
    if (perms[2] != 'x') continue;
    std::string path =
        path_pos > 0 && static_cast<size_t>(path_pos) <= line.size() ? line.substr(path_pos) : "";
    if (path.empty()) path = "[anon]";
    uint32_t index = kNoIndex;
    for (size_t i = 0; i < modules.size(); ++i) {
      if (modules[i].path == path) index = static_cast<uint32_t>(i);
    }
    if (index == kNoIndex) {
      index = static_cast<uint32_t>(modules.size());
      modules.emplace_back().path = path;
    }
    process.mappings.push_back(RawMapping{start, end, offset, index, 0, 0});
  }
  return process;
}

struct StackSymbolizer::Impl {
  Symbolizer symbolizer;
  std::map<std::pair<std::string, uint64_t>, SymFrame> cache;
};

StackSymbolizer::StackSymbolizer() : impl_(std::make_unique<Impl>()) {}
StackSymbolizer::~StackSymbolizer() = default;

SymFrame StackSymbolizer::symbolize_one(const RawProcess& process, const std::vector<RawModule>& modules,
                                        uint64_t address, bool return_address) {
  const uint64_t lookup = return_address ? address - 1 : address;
  SymFrame f;
  const RawMapping* m = process.find_mapping(lookup, 0);
  if (m == nullptr || m->module >= modules.size()) {
    f.function = "?";
    return f;
  }
  const std::string& path = modules[m->module].path;
  f.module = path.substr(path.find_last_of('/') + 1);
  const uint64_t file_offset = lookup - m->start + m->file_offset;
  auto key = std::make_pair(path, file_offset);
  if (auto it = impl_->cache.find(key); it != impl_->cache.end()) return it->second;
  ModuleRef ref;
  ref.path = path;
  const auto locs = impl_->symbolizer.resolve(ref, std::span<const uint64_t>(&file_offset, 1));
  if (!locs.empty() && locs[0].found) {
    f.function = locs[0].symbol;
    for (auto it = locs[0].frames.rbegin(); it != locs[0].frames.rend(); ++it)
      f.inlined.push_back(it->function);
  } else {
    f.function = "?";
  }
  impl_->cache.emplace(key, f);
  return f;
}

std::vector<SymFrame> StackSymbolizer::symbolize(const RawProcess& process,
                                                 const std::vector<RawModule>& modules,
                                                 const std::vector<uint64_t>& stack) {
  std::vector<SymFrame> out;
  for (size_t i = 0; i < stack.size(); ++i) out.push_back(symbolize_one(process, modules, stack[i], i > 0));
  return out;
}

std::string describe(const std::vector<SymFrame>& frames) {
  std::string s;
  for (const auto& f : frames) {
    if (!s.empty()) s += " <- ";
    s += f.function + "@" + f.module;
  }
  return s;
}

// Made byte by byte through a volatile pointer, so that the loop stays a loop: memcpy would be ASan's
// checked interceptor.
__attribute__((noinline, no_sanitize("address"))) void copy_raw_stack(uint64_t sp, size_t n,
                                                                      std::vector<uint8_t>& out) {
  out.resize(n);
  const volatile uint8_t* from = reinterpret_cast<const uint8_t*>(sp);
  uint8_t* to = out.data();
  for (size_t i = 0; i < n; ++i) to[i] = from[i];
}

}  // namespace hpd::unwind_test
