// Dummy perf events that carry the kernel's mmap records (see mmap_watch.h).
#include "bpf/mmap_watch.h"

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <variant>

#include "hpd/collect/recorder.h"

namespace hpd {

bool MmapWatch::open_one(int32_t pid, int cpu, unsigned long flags, bool inherit, size_t pages, bool wake) {
  perf_event_attr a{};
  a.size = sizeof a;
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_DUMMY;
  a.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME;
  a.sample_id_all = 1;
  a.mmap = 1;  // executable mappings only (mmap_data stays 0)
  a.mmap2 = 1;
  a.comm = 1;
  a.comm_exec = 1;  // marks the COMM record of an exec: where the old image's mappings end
  a.inherit = inherit ? 1 : 0;
  a.use_clockid = 1;
  a.clockid = CLOCK_MONOTONIC;  // the clock of the eBPF records (bpf_ktime_get_ns)
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  // No attr.build_id: the kernel builds one mmap record and hands it to every event that watches the
  // task, and an event with build_id set marks it PERF_RECORD_MISC_MMAP_BUILD_ID for the events that
  // come after it too, whose records then hold the device numbers where the build-id belongs: a
  // concurrent `perf record -a -g` aborts on them. The builder reads build-ids from the files
  // (/proc/PID/map_files while the process lives, else its path) instead.
  if (wake) {
    a.watermark = 1;  // wake after every byte written: every record
    a.wakeup_watermark = 1;
  }
  UniqueFd fd(
      static_cast<int>(::syscall(SYS_perf_event_open, &a, pid, cpu, -1, flags | PERF_FLAG_FD_CLOEXEC)));
  if (!fd) {
    if (errno == ESRCH || errno == ENODEV) return false;
    throw RecordError(std::string("cannot open the event that reports new mappings: ") +
                      std::strerror(errno));
  }
  Ring ring;
  try {
    ring.buffer = PerfRingBuffer::map(fd.get(), pages);
  } catch (const std::exception& e) {
    throw RecordError(std::string("cannot map the ring of the event that reports new mappings: ") + e.what());
  }
  ring.fd = std::move(fd);
  rings_.push_back(std::move(ring));
  return true;
}

void MmapWatch::open(const Scope& scope, const std::vector<int>& cpus, size_t pages_per_ring) {
  layout_ = RecordLayout{PERF_SAMPLE_TID | PERF_SAMPLE_TIME, 0, true, 0};
  try {
    for (const int cpu : cpus) {
      if (!scope.pids.empty()) {
        for (const int32_t pid : scope.pids)
          open_one(pid, cpu, 0, scope.children, pages_per_ring, scope.wake_per_record);
      } else if (scope.cgroup_fd >= 0) {
        open_one(scope.cgroup_fd, cpu, PERF_FLAG_PID_CGROUP, false, pages_per_ring, scope.wake_per_record);
      } else {
        open_one(-1, cpu, 0, false, pages_per_ring, scope.wake_per_record);
      }
    }
  } catch (...) {
    rings_.clear();  // all or nothing: the caller goes on without the watch
    throw;
  }
  scope_ = scope;
  cpus_ = cpus;
  pages_per_ring_ = pages_per_ring;
}

void MmapWatch::add(int32_t pid) {
  if (!watches_pids()) return;
  for (const int cpu : cpus_) open_one(pid, cpu, 0, scope_.children, pages_per_ring_, scope_.wake_per_record);
}

std::vector<int> MmapWatch::fds() const {
  std::vector<int> out;
  for (const Ring& r : rings_) out.push_back(r.fd.get());
  return out;
}

void MmapWatch::drain(const std::function<void(const Mmap2Record&)>& on_mmap,
                      const std::function<void(const CommRecord&)>& on_exec) {
  for (Ring& ring : rings_) {
    drain_ring(ring.buffer.view(), scratch_, [&](std::span<const uint8_t> bytes) {
      const auto record = decode_record(bytes, layout_);
      if (!record) return;
      if (const auto* m = std::get_if<Mmap2Record>(&*record)) {
        on_mmap(*m);
      } else if (const auto* c = std::get_if<CommRecord>(&*record)) {
        if (c->exec && c->pid == c->tid) on_exec(*c);
      } else if (const auto* l = std::get_if<LostRecord>(&*record)) {
        lost_ += l->lost;
      }
    });
  }
}

}  // namespace hpd
