// The allocation log of hpd's runtime: made before the command starts, read when the recording ends.
#include "hpd/calls/alloc_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "hpd/calls/alloc_abi.h"
#include "hpd/calls/call_counter.h"

namespace hpd::calls {

namespace {

struct PidAddress {
  int32_t pid;
  uint64_t address;
  bool operator==(const PidAddress& o) const { return pid == o.pid && address == o.address; }
};

struct PidAddressHash {
  size_t operator()(const PidAddress& k) const {
    return std::hash<uint64_t>()(k.address * 0x9e3779b97f4a7c15ull ^ static_cast<uint32_t>(k.pid));
  }
};

}  // namespace

AllocLog::AllocLog(uint64_t mean_bytes) : mean_bytes_(mean_bytes == 0 ? HPD_ALLOC_DEFAULT_MEAN : mean_bytes) {
  static std::atomic<unsigned> serial{0};
  path_ = "/dev/shm/hpd-alloc-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
  fd_.reset(::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd_) throw CallCountError("cannot create " + path_ + ": " + std::strerror(errno));
  hpd_alloc_header h{};
  h.version = HPD_ALLOC_VERSION;
  h.header_size = sizeof h;
  h.file_size = HPD_ALLOC_FILE_SIZE;
  h.mean_bytes = mean_bytes_;
  h.magic = HPD_ALLOC_MAGIC;
  if (::ftruncate(fd_.get(), static_cast<off_t>(HPD_ALLOC_FILE_SIZE)) != 0 ||
      ::pwrite(fd_.get(), &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) {
    const int err = errno;
    ::unlink(path_.c_str());
    throw CallCountError("cannot write " + path_ + ": " + std::strerror(err));
  }
}

AllocLog::~AllocLog() {
  ::unlink(path_.c_str());
}

std::vector<std::string> AllocLog::environment(const std::string& runtime) const {
  std::string preload = runtime;
  if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && old[0] != '\0')
    preload += ":" + std::string(old);
  return {"LD_PRELOAD=" + preload, std::string(HPD_ALLOC_ENV_LOG) + "=" + path_};
}

std::vector<std::string> AllocLog::read(RawProfile& profile) const {
  std::vector<std::string> messages;
  RawAllocStats& stats = profile.alloc;
  stats.mean_bytes = mean_bytes_;
  hpd_alloc_header h{};
  if (::pread(fd_.get(), &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h) || h.magic != HPD_ALLOC_MAGIC ||
      h.version != HPD_ALLOC_VERSION) {
    messages.push_back("allocations: the runtime's log " + path_ + " was overwritten; nothing was read");
    return messages;
  }
  stats.processes = h.processes;
  stats.dropped = h.dropped;
  stats.untracked = h.untracked;
  const uint64_t limit = HPD_ALLOC_FILE_SIZE - sizeof h;
  const uint64_t used = std::min(h.cursor, limit);
  // Read in chunks; a record never spans more than one chunk boundary's worth of bytes.
  std::vector<uint8_t> bytes(used);
  size_t got = 0;
  while (got < used) {
    const ssize_t n = ::pread(fd_.get(), bytes.data() + got, used - got, static_cast<off_t>(sizeof h + got));
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  std::unordered_map<PidAddress, size_t, PidAddressHash> live;
  uint64_t unfinished = 0;
  size_t at = 0;
  while (at + sizeof(hpd_alloc_record) <= bytes.size()) {
    hpd_alloc_record r{};
    std::memcpy(&r, bytes.data() + at, sizeof r);
    if (r.kind == 0) {
      // Reserved, never written (a process still running, or killed in between): its length is unknown.
      unfinished = 1;
      break;
    }
    const uint32_t frames = r.kind == HPD_ALLOC_RECORD_FREE ? 0 : r.frames;
    if (frames > HPD_ALLOC_MAX_FRAMES || at + hpd_alloc_record_size(frames) > bytes.size() ||
        (r.kind != HPD_ALLOC_RECORD_ALLOC && r.kind != HPD_ALLOC_RECORD_FREE &&
         r.kind != HPD_ALLOC_RECORD_ALLOC_UNTRACKED)) {
      messages.push_back("allocations: the runtime's log is damaged at byte " +
                         std::to_string(sizeof h + at) + "; what follows was not read");
      break;
    }
    const PidAddress key{r.pid, r.address};
    if (r.kind == HPD_ALLOC_RECORD_FREE) {
      auto it = live.find(key);
      if (it == live.end()) {
        ++stats.frees_unmatched;
      } else {
        profile.allocations[it->second].freed = true;
        live.erase(it);
      }
    } else {
      std::vector<uint64_t> user(frames);
      std::memcpy(user.data(), bytes.data() + at + sizeof r, 8ull * frames);
      RawAllocation a;
      a.pid = r.pid;
      a.tid = r.tid;
      a.address = r.address;
      a.size = r.size;
      a.stack = frames == 0 ? kNoIndex : profile.stacks.intern({}, user, UserLeaf::kAfterSyscall);
      a.tracked = r.kind == HPD_ALLOC_RECORD_ALLOC;
      if (a.tracked) {
        // An address sampled again while still live was freed where the runtime could not see it.
        auto [it, inserted] = live.try_emplace(key, profile.allocations.size());
        if (!inserted) {
          profile.allocations[it->second].freed = true;
          it->second = profile.allocations.size();
        }
      }
      profile.allocations.push_back(a);
    }
    at += hpd_alloc_record_size(frames);
  }
  if (stats.processes == 0)
    messages.push_back(
        "allocations: hpd's runtime never started in the command (it cleared LD_PRELOAD, or it is "
        "statically linked); nothing was sampled");
  if (stats.dropped != 0)
    messages.push_back("allocations: the log was full; " + std::to_string(stats.dropped) +
                       " samples and frees were dropped (a larger --alloc-mean samples less)");
  if (stats.untracked != 0)
    messages.push_back("allocations: " + std::to_string(stats.untracked) +
                       " sampled allocations could not be watched until their free (too many live "
                       "samples); they count as allocated, not as live");
  if (unfinished != 0)
    messages.push_back(
        "allocations: a process was still writing the log when the recording ended; its last samples "
        "were not read");
  return messages;
}

}  // namespace hpd::calls
