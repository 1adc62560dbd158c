// The allocation log of hpd's runtime: made before the command starts, read when the recording ends.
#include "hpd/calls/alloc_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

namespace {

hpd_alloc_header new_log_header(uint64_t mean_bytes) {
  hpd_alloc_header h{};
  h.version = HPD_ALLOC_VERSION;
  h.header_size = sizeof h;
  h.file_size = HPD_ALLOC_FILE_SIZE;
  h.mean_bytes = mean_bytes;
  h.magic = HPD_ALLOC_MAGIC;
  return h;
}

}  // namespace

AllocLog::AllocLog(uint64_t mean_bytes)
    : mean_bytes_(mean_bytes == 0 ? HPD_ALLOC_DEFAULT_MEAN : mean_bytes),
      file_("hpd-alloc", HPD_ALLOC_FILE_SIZE, new_log_header(mean_bytes_)) {}

AllocLog::AllocLog(UniqueFd handed_over)
    : mean_bytes_(0), file_(std::move(handed_over), "the allocation log", HPD_ALLOC_FILE_SIZE) {
  hpd_alloc_header h{};
  if (::pread(file_.fd(), &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h) || h.magic != HPD_ALLOC_MAGIC ||
      h.version != HPD_ALLOC_VERSION || h.header_size != sizeof h || h.file_size != HPD_ALLOC_FILE_SIZE)
    throw CallCountError(
        "the allocation log handed over does not hold this hpd's layout (another hpd version?)");
  if (h.mean_bytes < kMinMean || h.mean_bytes > kMaxMean)
    throw CallCountError("the allocation log handed over asks for a sampling mean of " +
                         std::to_string(h.mean_bytes) + " bytes");
  mean_bytes_ = h.mean_bytes;
}

AllocLog::~AllocLog() = default;

std::vector<std::string> AllocLog::environment(const std::string& runtime) const {
  return file_.environment(runtime, HPD_ALLOC_ENV_LOG);
}

std::vector<std::string> AllocLog::read(RawProfile& profile, const std::set<int32_t>* allowed_pids,
                                        const AllocLogLimits& limits) const {
  std::vector<std::string> messages;
  RawAllocStats& stats = profile.alloc;
  stats.mean_bytes = mean_bytes_;
  hpd_alloc_header h{};
  if (::pread(file_.fd(), &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h) || h.magic != HPD_ALLOC_MAGIC ||
      h.version != HPD_ALLOC_VERSION || h.mean_bytes != mean_bytes_) {
    messages.push_back("allocations: the runtime's log was overwritten; nothing was read");
    return messages;
  }
  // Counters the runtime adds to; anything above what a log can hold was written by something else.
  constexpr uint64_t kMaxCounter = HPD_ALLOC_FILE_SIZE;
  stats.processes = std::min(h.processes, kMaxCounter);
  stats.dropped = std::min(h.dropped, kMaxCounter);
  stats.untracked = std::min(h.untracked, kMaxCounter);
  const uint64_t used = std::min<uint64_t>(h.cursor, HPD_ALLOC_FILE_SIZE - sizeof h);
  // The records, a chunk at a time: a record starts in the chunk and is read whole (it is at most
  // hpd_alloc_record_size(HPD_ALLOC_MAX_FRAMES) bytes long), or the chunk is refilled from its start.
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<uint8_t> chunk(kChunk);
  uint64_t chunk_at = 0;  // offset (after the header) of chunk[0]
  size_t chunk_len = 0;
  bool short_read = false;
  const auto fill = [&](uint64_t at) {
    chunk_at = at;
    chunk_len = 0;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, used - at));
    while (chunk_len < want) {
      const ssize_t n = ::pread(file_.fd(), chunk.data() + chunk_len, want - chunk_len,
                                static_cast<off_t>(sizeof h + at + chunk_len));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        short_read = true;
        break;
      }
      chunk_len += static_cast<size_t>(n);
    }
  };
  std::unordered_map<PidAddress, size_t, PidAddressHash> live;
  bool unfinished = false;
  uint64_t foreign = 0, over_limit = 0;
  uint64_t at = 0;
  std::vector<uint64_t> user;
  while (at + sizeof(hpd_alloc_record) <= used) {
    if (at < chunk_at || at + sizeof(hpd_alloc_record) > chunk_at + chunk_len) fill(at);
    if (at + sizeof(hpd_alloc_record) > chunk_at + chunk_len) break;  // truncated meanwhile
    hpd_alloc_record r{};
    std::memcpy(&r, chunk.data() + (at - chunk_at), sizeof r);
    if (r.kind == 0) {
      // Reserved, never written (a process still running, or killed in between): its length is unknown.
      unfinished = true;
      break;
    }
    const uint32_t frames = r.kind == HPD_ALLOC_RECORD_FREE ? 0 : r.frames;
    if (frames > HPD_ALLOC_MAX_FRAMES || at + hpd_alloc_record_size(frames) > used ||
        (r.kind != HPD_ALLOC_RECORD_ALLOC && r.kind != HPD_ALLOC_RECORD_FREE &&
         r.kind != HPD_ALLOC_RECORD_ALLOC_UNTRACKED)) {
      messages.push_back("allocations: the runtime's log is damaged at byte " +
                         std::to_string(sizeof h + at) + "; what follows was not read");
      break;
    }
    // The whole record in the chunk (a chunk holds the longest record).
    if (at + hpd_alloc_record_size(frames) > chunk_at + chunk_len) fill(at);
    if (at + hpd_alloc_record_size(frames) > chunk_at + chunk_len) break;  // truncated meanwhile
    const uint8_t* bytes = chunk.data() + (at - chunk_at);
    at += hpd_alloc_record_size(frames);
    if (allowed_pids != nullptr && allowed_pids->count(r.pid) == 0) {
      ++foreign;
      continue;
    }
    const PidAddress key{r.pid, r.address};
    if (r.kind == HPD_ALLOC_RECORD_FREE) {
      auto it = live.find(key);
      if (it == live.end()) {
        ++stats.frees_unmatched;
      } else {
        RawAllocation& a = profile.allocations[it->second];
        a.freed = true;
        a.free_time_ns = r.time_ns;
        a.free_tid = r.tid;
        live.erase(it);
      }
      continue;
    }
    if (profile.allocations.size() >= limits.allocations) {
      ++over_limit;
      continue;
    }
    user.resize(frames);
    std::memcpy(user.data(), bytes + sizeof r, 8ull * frames);
    RawAllocation a;
    a.pid = r.pid;
    a.tid = r.tid;
    a.address = r.address;
    a.size = r.size;
    a.time_ns = r.time_ns;
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
  stats.dropped += over_limit;
  if (stats.processes == 0)
    messages.push_back(
        "allocations: hpd's runtime never started in the command (it cleared LD_PRELOAD, or it is "
        "statically linked); nothing was sampled");
  if (stats.dropped != 0)
    messages.push_back("allocations: the log was full; " + std::to_string(stats.dropped) +
                       " samples and frees were dropped (a larger allocation mean samples less)");
  if (over_limit != 0)
    messages.push_back("allocations: hpd keeps at most " + std::to_string(limits.allocations) +
                       " sampled allocations of a log a client hands over; " + std::to_string(over_limit) +
                       " more were dropped (a larger allocation mean samples less)");
  if (foreign != 0)
    messages.push_back("allocations: " + std::to_string(foreign) +
                       " record(s) of the runtime's log name processes this recording does not follow; "
                       "they were ignored");
  if (short_read)
    messages.push_back(
        "allocations: the runtime's log was truncated while recording; what was cut was not read");
  if (stats.untracked != 0)
    messages.push_back("allocations: " + std::to_string(stats.untracked) +
                       " sampled allocations could not be watched until their free (too many live "
                       "samples); they count as allocated, not as live");
  if (unfinished)
    messages.push_back(
        "allocations: a process was still writing the log when the recording ended; its last samples "
        "were not read");
  return messages;
}

}  // namespace hpd::calls
