// hpd's programs loaded ahead (bpf_preloader.h).
#include "bpf/bpf_preloader.h"

#include <bpf/libbpf.h>

#include <exception>

namespace hpd::bpf_recording {

Preloader& Preloader::instance() {
  static Preloader preloader;
  return preloader;
}

Preloader::~Preloader() {
  stop();
}

void Preloader::want(const LoadConfig& c) {
  std::lock_guard lock(mutex_);
  if (stopping_) return;
  wanted_ = c;
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  changed_.notify_all();
}

bool Preloader::load_now(const LoadConfig& c) {
  want(c);
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] {
    if (stopping_) return true;
    if (loading_) return false;
    const bool loaded = ready_ && ready_config_ == c;
    const bool failed = failed_config_ && *failed_config_ == c;
    return loaded || failed || !(wanted_ && *wanted_ == c);
  });
  return ready_ && ready_config_ == c;
}

Skeleton Preloader::take(const LoadConfig& c, CfiMaps::MappedArrays* arrays) {
  std::unique_lock lock(mutex_);
  if (loading_ && loading_config_ == c) changed_.wait(lock, [&] { return !loading_; });
  if (!ready_ || !(ready_config_ == c)) return {};
  wanted_.reset();
  ++taken_;
  *arrays = std::move(ready_arrays_);
  return std::move(ready_);
}

void Preloader::stop() {
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

PreparedRecordingStatus Preloader::status() {
  std::lock_guard lock(mutex_);
  PreparedRecordingStatus s;
  s.ready = ready_ != nullptr;
  s.loading = loading_;
  s.loads = loads_;
  s.taken = taken_;
  s.error = error_;
  return s;
}

bool Preloader::needs_load() const {
  if (!wanted_) return false;
  if (ready_ && ready_config_ == *wanted_) return false;
  return !(failed_config_ && *failed_config_ == *wanted_);
}

void Preloader::run() {
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

}  // namespace hpd::bpf_recording
