// hpd's programs loaded ahead (bpf_preloader.h).
#include "bpf/bpf_preloader.h"

#include <bpf/libbpf.h>

#include <algorithm>
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
  if (start_ && start_->config == c)
    start_->paused = false;
  else
    other_ = Wanted{c, false};
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  changed_.notify_all();
}

bool Preloader::load_now(const LoadConfig& c) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return false;
    start_ = Wanted{c, false};
    if (other_ && other_->config == c) other_.reset();
  }
  want(c);
  std::unique_lock lock(mutex_);
  const auto found = [&] {
    return std::any_of(ready_.begin(), ready_.end(), [&](const Ready& r) { return r.config == c; });
  };
  changed_.wait(lock, [&] {
    if (stopping_) return true;
    if (loading_) return false;
    const bool failed = std::find(failed_.begin(), failed_.end(), c) != failed_.end();
    return found() || failed || !is_wanted(c);
  });
  return found();
}

Skeleton Preloader::take(const LoadConfig& c, CfiMaps::MappedArrays* arrays, GlobalsAtLoad* globals) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return stopping_ || !busy_with(c); });
  const auto it = std::find_if(ready_.begin(), ready_.end(), [&](const Ready& r) { return r.config == c; });
  if (it == ready_.end()) return {};
  if (start_ && start_->config == c) start_->paused = true;
  if (other_ && other_->config == c) other_->paused = true;
  ++taken_;
  *arrays = std::move(it->arrays);
  *globals = std::move(it->globals);
  Skeleton skel = std::move(it->skel);
  ready_.erase(it);
  return skel;
}

void Preloader::expect_back(const LoadConfig& c) {
  std::lock_guard lock(mutex_);
  if (stopping_) return;
  if (!is_wanted(c)) other_ = Wanted{c, true};
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
}

void Preloader::give_back(const LoadConfig& c, Skeleton skel, CfiMaps::MappedArrays arrays,
                          GlobalsAtLoad globals) {
  Ready back{c, std::move(skel), std::move(arrays), std::move(globals)};
  std::lock_guard lock(mutex_);
  if (stopping_ || !thread_.joinable()) return;  // `back` destroyed
  returned_.push_back(std::move(back));
  changed_.notify_all();
}

void Preloader::stop() {
  std::thread worker;
  std::vector<Ready> dropped;
  std::vector<Ready> returned;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    start_.reset();
    other_.reset();
    dropped = std::move(ready_);
    ready_.clear();
    returned = std::move(returned_);
    returned_.clear();
    worker = std::move(thread_);
    changed_.notify_all();
  }
  if (worker.joinable()) worker.join();
}

PreparedRecordingStatus Preloader::status() {
  std::lock_guard lock(mutex_);
  PreparedRecordingStatus s;
  s.ready = !ready_.empty();
  s.ready_sets = ready_.size();
  s.loading = loading_;
  s.loads = loads_;
  s.taken = taken_;
  s.reuses = reuses_;
  s.reset_failures = reset_failures_;
  s.error = error_;
  s.reset_error = reset_error_;
  return s;
}

bool Preloader::is_wanted(const LoadConfig& c) const {
  return (start_ && start_->config == c) || (other_ && other_->config == c);
}

bool Preloader::has_ready(const LoadConfig& c) const {
  return std::any_of(ready_.begin(), ready_.end(), [&](const Ready& r) { return r.config == c; });
}

bool Preloader::busy_with(const LoadConfig& c) const {
  return (loading_ && loading_config_ == c) || (resetting_ && resetting_config_ == c) ||
         std::any_of(returned_.begin(), returned_.end(), [&](const Ready& r) { return r.config == c; });
}

void Preloader::drop_unwanted(std::vector<Ready>& out) {
  for (auto it = ready_.begin(); it != ready_.end();) {
    if (is_wanted(it->config)) {
      ++it;
    } else {
      out.push_back(std::move(*it));
      it = ready_.erase(it);
    }
  }
}

void Preloader::reset_returned(std::unique_lock<std::mutex>& lock) {
  Ready r = std::move(returned_.front());
  returned_.erase(returned_.begin());
  resetting_ = true;
  resetting_config_ = r.config;
  std::vector<Ready> old;
  drop_unwanted(old);
  lock.unlock();
  old.clear();
  const std::string why = reset_for_reuse(r.skel.get(), r.config, r.globals, r.arrays);
  lock.lock();
  resetting_ = false;
  if (!why.empty()) {
    // Never used half reset: destroyed, and the next of its kind loaded afresh.
    ++reset_failures_;
    reset_error_ = why;
    for (std::optional<Wanted>* w : {&start_, &other_})
      if (*w && (*w)->config == r.config) (*w)->paused = false;
  } else if (is_wanted(r.config) && !has_ready(r.config)) {
    ++reuses_;
    ready_.push_back(std::move(r));
  }
  changed_.notify_all();
  lock.unlock();
  r = Ready{};  // a skeleton not kept is destroyed unlocked
  lock.lock();
}

const Preloader::Wanted* Preloader::next_load() const {
  for (const std::optional<Wanted>* w : {&start_, &other_}) {
    if (!*w || (*w)->paused) continue;
    const LoadConfig& c = (*w)->config;
    if (std::any_of(ready_.begin(), ready_.end(), [&](const Ready& r) { return r.config == c; })) continue;
    if (std::find(failed_.begin(), failed_.end(), c) != failed_.end()) continue;
    return &**w;
  }
  return nullptr;
}

void Preloader::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !returned_.empty() || next_load() != nullptr; });
    if (stopping_) return;
    if (!returned_.empty()) {
      reset_returned(lock);
      continue;
    }
    const LoadConfig c = next_load()->config;
    // Those of a kind no longer wanted (the other kind asked for before) are dropped first.
    std::vector<Ready> old;
    drop_unwanted(old);
    loading_ = true;
    loading_config_ = c;
    lock.unlock();
    old.clear();
    Skeleton skel;
    CfiMaps::MappedArrays arrays;
    GlobalsAtLoad globals;
    std::string error;
    try {
      LibbpfLogCapture log;
      skel = load_skeleton_for(c, log);
      globals = globals_at_load(skel.get());
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (skel && c.cfi) {
      try {
        arrays = CfiMaps::map_arrays(cfi_map_fds(skel.get(), c));
      } catch (const RecordError&) {
        // The session maps them itself, and says why if it cannot.
      }
    }
    lock.lock();
    loading_ = false;
    if (skel) {
      ++loads_;
      if (is_wanted(c)) ready_.push_back(Ready{c, std::move(skel), std::move(arrays), std::move(globals)});
      error_.clear();
    } else {
      failed_.push_back(c);
      error_ = error;
    }
    changed_.notify_all();
  }
}

}  // namespace hpd::bpf_recording
