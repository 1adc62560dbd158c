// The sessions hpd records: one Session per recording, and the registry that counts and limits them.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hpd::service {

// One recording in progress; shared by its connection, its recording thread and the registry.
struct Session {
  uint64_t id = 0;
  uid_t uid = 0;
  pid_t client_pid = 0;
  std::string target;
  std::string output;
  uint64_t started_unix_ns = 0;
  uint64_t started_mono_ns = 0;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> samples{0};
  std::atomic<uint64_t> lost{0};
  // The profile's estimate while recording (estimate_profile_bytes); from the end of the
  // recording on, plus what its JIT symbols and symbol tables may take.
  std::atomic<uint64_t> memory_bytes{0};
};

// Every session running, with the totals of those finished; add() applies the session limits.
class SessionRegistry {
 public:
  // "" when added; otherwise which limit refused it: `max` sessions in all, or `max_per_user` of the
  // session's uid (root has no per-user limit).
  std::string add(const std::shared_ptr<Session>& session, uint32_t max, uint32_t max_per_user);
  // Counts the session as finished, once: a recording removes its session before it tells the
  // client it is done, and the connection removes it again when it ends.
  void remove(const Session& session);
  std::shared_ptr<Session> find(uint64_t id);
  std::vector<std::shared_ptr<Session>> list();
  void stop_all();
  struct Totals {
    size_t active = 0;
    uint64_t finished = 0;
    uint64_t samples = 0;
    uint64_t lost = 0;
  };
  Totals totals();
  // The memory the running sessions of `uid` hold (Session::memory_bytes, summed).
  uint64_t user_memory(uid_t uid);
  // The memory every running session holds, in all and per user.
  struct Memory {
    uint64_t bytes = 0;
    std::map<uid_t, uint64_t> by_user;
  };
  Memory memory();

 private:
  std::mutex mutex_;
  std::map<uint64_t, std::shared_ptr<Session>> sessions_;
  uint64_t next_id_ = 1;
  uint64_t finished_ = 0;
  uint64_t finished_samples_ = 0;
  uint64_t finished_lost_ = 0;
};

}  // namespace hpd::service
