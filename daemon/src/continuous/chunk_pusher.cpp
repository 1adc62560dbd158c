// ChunkPusher: every finished chunk, oldest first, symbolized, encoded as OTLP profiles and POSTed; a
// cursor file per endpoint, replaced atomically after each success, so that nothing is sent twice
// across restarts of hpd and nothing is skipped while the endpoint is down (retries with backoff).
#include "chunk_pusher.h"

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "hpd/base/unique_fd.h"
#include "hpd/capture/capture.h"
#include "hpd/export/otlp_profiles.h"
#include "hpd/session/capture_symbolize.h"
#include "hpd/session/otlp_push.h"
#include "store_files.h"

namespace hpd::continuous {

namespace fs = std::filesystem;

namespace {

constexpr double kFirstRetrySeconds = 1;

std::string read_cursor_file(const fs::path& path, const std::string& url, bool* found) {
  *found = false;
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return "";
    throw std::runtime_error("cannot read the push cursor " + path.string() + ": " + std::strerror(errno));
  }
  std::string written_url, name;
  std::getline(in, written_url);
  std::getline(in, name);
  // Another URL with the same file name (characters folded to '_'): not this endpoint's cursor.
  if (written_url != url) return "";
  if (!name.empty() && !parse_chunk_file_name(name)) {
    throw std::runtime_error("the push cursor " + path.string() + " names '" + name +
                             "', not a chunk file; remove it to push from the newest chunk on");
  }
  *found = true;
  return name;
}

// Replaces the cursor file: a temporary written and fsynced, renamed over it, the directory fsynced.
void write_cursor_file(const fs::path& path, const std::string& url, const std::string& name) {
  const fs::path tmp = path.string() + kTmpSuffix;
  const std::string text = url + "\n" + name + "\n";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640));
  if (!fd) throw std::runtime_error("cannot write " + tmp.string() + ": " + std::strerror(errno));
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
      ::fsync(fd.get()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot write " + tmp.string() + ": " + why);
  }
  fd.reset();
  rename_durably(tmp, path);
}

std::string newest_chunk(const fs::path& dir) {
  const StoreScan scan = scan_store(dir);
  return scan.chunks.empty() ? "" : scan.chunks.back().path.filename().string();
}

}  // namespace

fs::path push_cursor_path(const fs::path& dir, const std::string& url) {
  std::string name;
  for (char c : url.substr(0, 120)) name += std::isalnum(static_cast<unsigned char>(c)) || c == '.' ? c : '_';
  // Folded characters can make two URLs one name: a hash of the whole URL tells them apart.
  uint64_t hash = 1469598103934665603ull;
  for (char c : url) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  char suffix[24];
  std::snprintf(suffix, sizeof suffix, "-%016llx", static_cast<unsigned long long>(hash));
  return dir / (std::string(kPushCursorPrefix) + name + suffix + ".cursor");
}

void ChunkPusher::log(LogSeverity severity, const std::string& text) const {
  std::function<void(LogSeverity, const std::string&)> sink;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    sink = log_;
  }
  if (sink) sink(severity, text);
}

void ChunkPusher::configure(const fs::path& dir, const PushSettings& settings,
                            const std::function<void(LogSeverity, const std::string&)>& log) {
  const std::string url =
      settings.otlp_endpoint.empty() ? "" : session::otlp_profiles_url(settings.otlp_endpoint);
  std::unique_lock<std::mutex> guard(mutex_);
  log_ = log;
  const bool same_target = dir == dir_ && url == url_;
  const bool same_settings = settings == settings_;
  if (same_target && same_settings) return;
  settings_ = settings;
  ++config_generation_;
  ++events_;
  if (!same_target) {
    dir_ = dir;
    url_ = url;
    cursor_.clear();
    in_flight_.clear();
    stats_ = PushStats{};
    stats_.endpoint = url;
    if (!url.empty()) {
      const fs::path path = push_cursor_path(dir, url);
      bool found = false;
      cursor_ = read_cursor_file(path, url, &found);
      if (!found) {
        // The first push to this endpoint starts after the chunks already on disk.
        cursor_ = newest_chunk(dir);
        write_cursor_file(path, url, cursor_);
      }
      stats_.last_sent = cursor_;
    }
  }
  guard.unlock();
  wake_.notify_all();
}

void ChunkPusher::chunk_finished() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    ++events_;
  }
  wake_.notify_all();
}

void ChunkPusher::wake() {
  chunk_finished();
}

void ChunkPusher::stop() {
  stop_ = true;
  wake();
}

void ChunkPusher::cancel() {
  cancel_ = true;
  wake();
}

void ChunkPusher::chunks_removed(const std::vector<fs::path>& removed) {
  std::vector<std::string> dropped;
  std::string url;
  uint64_t total = 0;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (url_.empty()) return;
    for (const fs::path& path : removed) {
      const std::string name = path.filename().string();
      if (path.parent_path() != dir_ || name <= cursor_ || name == in_flight_) continue;
      dropped.push_back(name);
      ++stats_.chunks_dropped;
    }
    url = url_;
    total = stats_.chunks_dropped;
  }
  for (const std::string& name : dropped) {
    log(LogSeverity::kWarning, "chunk " + name + " was removed by retention before it was sent to " + url +
                                   " (" + std::to_string(total) +
                                   " chunks dropped unsent since start; raise continuous_max_bytes or "
                                   "continuous_max_age, or fix the endpoint)");
  }
}

std::vector<PushStats> ChunkPusher::stats() const {
  PushStats stats;
  fs::path dir;
  std::string cursor;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (url_.empty()) return {};
    stats = stats_;
    dir = dir_;
    cursor = cursor_;
  }
  // The queue from the store itself: also right while the thread waits to retry.
  try {
    uint64_t chunks = 0, bytes = 0, oldest = 0;
    for (const ChunkFile& c : scan_store(dir).chunks) {
      if (c.path.filename().string() <= cursor) continue;
      if (chunks++ == 0) oldest = c.start_unix_ns;
      bytes += c.bytes;
    }
    stats.chunks_queued = chunks;
    stats.bytes_queued = bytes;
    stats.oldest_queued_start_unix_ns = oldest;
  } catch (const std::exception&) {
    // The directory cannot be read: the run loop says so in last_error; the last counts stay.
  }
  return {stats};
}

std::string ChunkPusher::url() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return url_;
}

// Waits until something happened since `seen` (a chunk, a new configuration, stop), or `seconds`.
// True when it was an event, false on the timeout.
bool ChunkPusher::wait_for_change(uint64_t seen, double seconds) {
  std::unique_lock<std::mutex> guard(mutex_);
  const auto woken = [&] { return stop_.load() || events_ != seen; };
  if (seconds < 0) {
    wake_.wait(guard, woken);
    return true;
  }
  return wake_.wait_for(guard, std::chrono::duration<double>(seconds), woken);
}

// The chunk `name` is done with (sent, or lost): the cursor moves past it, on disk first.
void ChunkPusher::advance(const std::string& name, const fs::path& dir, const std::string& url,
                          uint64_t generation) {
  write_cursor_file(push_cursor_path(dir, url), url, name);
  std::lock_guard<std::mutex> guard(mutex_);
  if (generation != config_generation_ && (dir != dir_ || url != url_)) return;
  cursor_ = name;
  stats_.last_sent = name;
  in_flight_.clear();
}

void ChunkPusher::run() {
  std::string body;  // the encoded request of body_for, kept across retries
  std::string body_for;
  uint64_t body_generation = 0;
  double retry_s = kFirstRetrySeconds;
  std::string failing;  // the error said last, "" when the last attempt succeeded
  while (!stop_.load()) {
    // Woken by a finished chunk, a retry, a new configuration: the memory the last export (a chunk
    // symbolized system-wide: tens of MB) freed goes back to the system. glibc keeps freed memory in
    // each thread's arena otherwise, and hpd's resident memory would stay at the high-water mark of
    // every thread (docs/performance.md "Continuous push"). Here, not on the recording thread:
    // sampling does not wait for it. The profiler's trimming thread does it after each chunk too
    // (also when push is off).
    ::malloc_trim(0);
    fs::path dir;
    std::string url, cursor;
    PushSettings settings;
    uint64_t generation = 0, seen = 0;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      dir = dir_;
      url = url_;
      cursor = cursor_;
      settings = settings_;
      generation = config_generation_;
      seen = events_;
    }
    if (url.empty()) {
      wait_for_change(seen, -1);
      continue;
    }
    std::vector<ChunkFile> pending;
    try {
      for (ChunkFile& c : scan_store(dir).chunks) {
        if (c.path.filename().string() > cursor) pending.push_back(std::move(c));
      }
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> guard(mutex_);
        stats_.last_error = e.what();
        stats_.last_error_unix_ns = unix_now_ns();
      }
      wait_for_change(seen, settings.retry_max_s);
      continue;
    }
    // A chunk read and encoded before, whose send is being retried, goes first even when retention
    // removed its file since (retention does not count the chunk in flight): its bytes are here.
    const bool retrying = !body_for.empty() && body_generation == generation && body_for > cursor;
    if (retrying && (pending.empty() || pending.front().path.filename().string() != body_for)) {
      ChunkFile removed;
      removed.path = dir / body_for;
      pending.insert(pending.begin(), std::move(removed));
    }
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (generation != config_generation_) continue;
      stats_.chunks_queued = pending.size();
      if (!pending.empty()) in_flight_ = pending.front().path.filename().string();
    }
    if (pending.empty()) {
      wait_for_change(seen, -1);
      continue;
    }
    const ChunkFile& next = pending.front();
    const std::string name = next.path.filename().string();
    if (body_for != name || body_generation != generation) {
      body.clear();
      body_for.clear();
      try {
        session::ModuleSearch search;
        search.debuginfod = false;  // hpd does not download on its own
        session::SymbolizedCapture symbolized =
            session::symbolize_capture(read_capture_file(next.path.string()), search);
        OtlpProfilesOptions options;
        options.scope_version = settings.scope_version;
        options.resource_labels = settings.labels;
        body = encode_otlp_profiles(symbolized.profile, options);
        body_for = name;
        body_generation = generation;
      } catch (const std::exception& e) {
        // Removed since the scan (retention did not count the chunk in flight), or unreadable: it
        // cannot be sent, ever. Said and counted, and the queue moves on.
        std::error_code ec;
        const bool gone = !fs::exists(next.path, ec);
        uint64_t dropped = 0;
        {
          std::lock_guard<std::mutex> guard(mutex_);
          dropped = ++stats_.chunks_dropped;
        }
        log(LogSeverity::kWarning, "chunk " + name +
                                       (gone ? " was removed by retention before it was sent to " + url
                                             : " cannot be sent to " + url + ": " + e.what()) +
                                       " (" + std::to_string(dropped) +
                                       " chunks dropped unsent since start)");
        try {
          advance(name, dir, url, generation);
        } catch (const std::exception& write_error) {
          log(LogSeverity::kError, write_error.what());
          wait_for_change(seen, settings.retry_max_s);
        }
        continue;
      }
    }
    session::PushedBytes pushed;
    try {
      session::PushOptions push;
      push.compression = settings.compression;
      push.timeout_s = settings.timeout_s;
      push.user_agent = settings.user_agent;
      push.cancel = &cancel_;
      push.ca_file = settings.ca_file;
      push.client_cert = settings.client_cert;
      push.client_key = settings.client_key;
      push.headers = settings.headers;
      pushed = session::post_otlp_profiles(url, body, push);
    } catch (const std::exception& e) {
      if (stop_.load()) break;
      const std::string error = e.what();
      uint64_t queued = 0;
      {
        std::lock_guard<std::mutex> guard(mutex_);
        stats_.last_error = error;
        stats_.last_error_unix_ns = unix_now_ns();
        queued = stats_.chunks_queued;
      }
      // Said once when it starts failing and when the reason changes, not at every retry.
      if (error != failing) {
        log(LogSeverity::kWarning, "pushing chunk " + name + " failed: " + error + "; " +
                                       std::to_string(queued) +
                                       " chunks queued, retrying with backoff (up to " +
                                       std::to_string(static_cast<long>(settings.retry_max_s)) + " s)");
      }
      failing = error;
      // Only a new configuration or stop ends the wait early: new chunks do not hurry a retry.
      {
        std::unique_lock<std::mutex> guard(mutex_);
        wake_.wait_for(guard, std::chrono::duration<double>(retry_s),
                       [&] { return stop_.load() || config_generation_ != generation; });
      }
      retry_s = std::min(retry_s * 2, std::max(settings.retry_max_s, kFirstRetrySeconds));
      continue;
    }
    try {
      advance(name, dir, url, generation);
    } catch (const std::exception& e) {
      // Sent, but the cursor could not be kept: said; it would be sent again after a restart.
      log(LogSeverity::kError, std::string(e.what()) + " (chunk " + name + " was sent to " + url +
                                   " but may be sent again after a restart)");
      std::lock_guard<std::mutex> guard(mutex_);
      cursor_ = name;
      in_flight_.clear();
    }
    {
      std::lock_guard<std::mutex> guard(mutex_);
      ++stats_.chunks_sent;
      stats_.bytes_sent += pushed.body;
      stats_.bytes_uncompressed += pushed.uncompressed;
      stats_.last_success_unix_ns = unix_now_ns();
      if (stats_.chunks_queued > 0) --stats_.chunks_queued;
    }
    if (!failing.empty())
      log(LogSeverity::kInfo, "pushing to " + url + " works again (chunk " + name + " sent)");
    failing.clear();
    retry_s = kFirstRetrySeconds;
    body.clear();
    body_for.clear();
  }
}

}  // namespace hpd::continuous
