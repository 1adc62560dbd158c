// The push of finished chunks to an OTLP endpoint, on a thread of its own, with the chunk store as the
// queue and a cursor file per endpoint saying which chunk was sent last.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "hpd/continuous/continuous.h"

namespace hpd::continuous {

// One endpoint's push: hpd runs one per endpoint configured, each on its own thread (run()).
class ChunkPusher {
 public:
  ChunkPusher() = default;
  ChunkPusher(const ChunkPusher&) = delete;
  ChunkPusher& operator=(const ChunkPusher&) = delete;

  // The store and the endpoint to push to (from the recording thread, before each chunk and before
  // the first retention pass). When they change, the endpoint's cursor is read from `dir`, or, the
  // first time this endpoint is pushed to, created naming the newest finished chunk: chunks recorded
  // before push was turned on are not sent. Throws std::runtime_error when the cursor cannot be read
  // or written.
  void configure(const std::filesystem::path& dir, const PushSettings& settings,
                 const std::function<void(LogSeverity, const std::string&)>& log);
  // A chunk was finished: the thread looks for work.
  void chunk_finished();
  // Retention removed these chunks: those not sent yet are counted and said as dropped.
  void chunks_removed(const std::vector<std::filesystem::path>& removed);
  // The thread's body; returns after stop().
  void run();
  void wake();
  // No new request is started and run() returns once the request in flight ended.
  void stop();
  // The request in flight is abandoned (after stop() and a grace, so that a request the endpoint is
  // answering ends with its cursor written: not sent twice).
  void cancel();
  // None when push is off; the queue as the store holds it now.
  std::vector<PushStats> stats() const;
  // The URL posted to ("" = off).
  std::string url() const;

 private:
  struct Snapshot;
  void log(LogSeverity severity, const std::string& text) const;
  bool wait_for_change(uint64_t seen, double seconds);
  void advance(const std::string& name, const std::filesystem::path& dir, const std::string& url,
               uint64_t generation);

  std::atomic<bool> stop_{false};
  std::atomic<bool> cancel_{false};
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  // Guarded by mutex_.
  std::filesystem::path dir_;
  std::string url_;  // "" = push off
  PushSettings settings_;
  std::function<void(LogSeverity, const std::string&)> log_;
  std::string cursor_;              // the last chunk sent
  std::string in_flight_;           // the chunk being read or sent now: retention does not count it
  uint64_t config_generation_ = 0;  // changes with dir, endpoint or settings
  uint64_t events_ = 0;             // changes at every chunk_finished(), configure change, wake()
  PushStats stats_;
};

// The cursor file of `url` in `dir` ("DIR/.hpd-push-<url with other characters as _>.cursor").
std::filesystem::path push_cursor_path(const std::filesystem::path& dir, const std::string& url);

}  // namespace hpd::continuous
