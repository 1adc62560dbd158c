// ContinuousProfiler: one system-wide recording per chunk, streamed into a .tmp capture, renamed when done.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "chunk_pusher.h"
#include "hpd/capture/capture.h"
#include "hpd/continuous/continuous.h"
#include "hpd/session/otlp_push.h"
#include "store_files.h"

namespace hpd::continuous {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxNotes = 32;

uint64_t mono_now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

void validate(const ContinuousOptions& o) {
  if (o.dir.empty()) throw std::invalid_argument("continuous mode: the chunk directory is empty");
  if (o.frequency_hz == 0 || o.frequency_hz > kMaxFrequencyHz)
    throw std::invalid_argument("continuous mode: the frequency must be between 1 and " +
                                std::to_string(kMaxFrequencyHz) + " Hz (got " +
                                std::to_string(o.frequency_hz) + ")");
  if (o.cfi_rows > kMaxCfiRowCapacity)
    throw std::invalid_argument("continuous mode: the CFI row map can hold at most " +
                                std::to_string(kMaxCfiRowCapacity) + " rows (got " +
                                std::to_string(o.cfi_rows) + ")");
  // A chunk costs a recording's setup (loading the eBPF programs, reading maps): not worth it below 1 s.
  if (!std::isfinite(o.chunk_seconds) || o.chunk_seconds < 1 || o.chunk_seconds > 86400)
    throw std::invalid_argument("continuous mode: a chunk must last between 1 s and 1 day");
  if (!std::isfinite(o.flush_seconds) || o.flush_seconds <= 0)
    throw std::invalid_argument("continuous mode: the flush interval must be positive");
  if (!std::isfinite(o.retry_seconds) || o.retry_seconds < 0 || o.retry_seconds > 86400)
    throw std::invalid_argument("continuous mode: the retry delay must be between 0 and 1 day");
  if (o.zstd_level < 1 || o.zstd_level > 19)
    throw std::invalid_argument("continuous mode: the zstd level must be between 1 and 19");
  if (!o.push.otlp_endpoint.empty()) {
    try {
      session::otlp_profiles_url(o.push.otlp_endpoint);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("continuous mode: the OTLP endpoint ") + e.what());
    }
  }
  if (!std::isfinite(o.push.timeout_s) || o.push.timeout_s < 1 || o.push.timeout_s > 3600)
    throw std::invalid_argument("continuous mode: the push timeout must be between 1 s and 1 hour");
  if (!std::isfinite(o.push.retry_max_s) || o.push.retry_max_s < 1 || o.push.retry_max_s > 86400)
    throw std::invalid_argument(
        "continuous mode: the longest wait between push retries must be between 1 s and 1 day");
  for (const auto& [key, value] : o.push.labels) {
    if (key.empty()) throw std::invalid_argument("continuous mode: a push label has an empty key");
  }
}

struct ContinuousProfiler::State {
  std::mutex control;  // serializes start() and stop()
  mutable std::mutex mutex;
  std::condition_variable wake;
  ContinuousOptions options;  // guarded by mutex; the thread copies it at each chunk
  Stats stats;                // guarded by mutex
  std::atomic<bool> stop_requested{false};
  std::thread thread;
  ChunkPusher pusher{stop_requested};
  std::thread push_thread;
  // Owned by the recording thread while it runs, by start()/stop() otherwise.
  std::unique_ptr<DirectoryLock> lock;
  fs::path locked_dir;
  uint64_t previous_end_mono = 0;  // end of the last chunk's recording, for the gap; 0 = none

  void note(std::string text) {
    std::lock_guard<std::mutex> guard(mutex);
    // A garbage file is seen again at every retention pass: say it once.
    if (std::find(stats.notes.begin(), stats.notes.end(), text) != stats.notes.end()) return;
    if (stats.notes.size() >= kMaxNotes) stats.notes.erase(stats.notes.begin());
    stats.notes.push_back(std::move(text));
  }

  void error(const std::string& text) {
    std::lock_guard<std::mutex> guard(mutex);
    stats.last_error = text;
    stats.last_error_unix_ns = unix_now_ns();
  }

  // Creates and locks the directory, salvages a crashed run's .tmp files, applies retention.
  void open_directory(const ContinuousOptions& o) {
    std::error_code ec;
    if (!fs::exists(o.dir, ec)) {
      fs::create_directories(o.dir, ec);
      if (ec) throw std::runtime_error("cannot create " + o.dir.string() + ": " + ec.message());
    }
    // Chunks hold every process's command line: not for everyone's eyes, also when the directory or
    // files in it were made with other modes (by an older hpd, or by hand).
    restrict_modes(o.dir);
    lock.reset();
    lock = std::make_unique<DirectoryLock>(o.dir);
    locked_dir = o.dir;
    // The push cursor first: retention must know which chunks were not sent yet.
    pusher.configure(o.dir, o.push, o.log);
    previous_end_mono = 0;
    std::vector<std::string> notes;
    const size_t salvaged = recover_temporaries(o.dir, &notes);
    {
      std::lock_guard<std::mutex> guard(mutex);
      stats.chunks_salvaged += salvaged;
    }
    for (std::string& n : notes) note(std::move(n));
    retain(o);
  }

  // The store directory 0750 and its files at most 0640, each change noted.
  void restrict_modes(const fs::path& dir) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) == 0 && (st.st_mode & 07777) != 0750) {
      if (::chmod(dir.c_str(), 0750) != 0)
        throw std::runtime_error("cannot make " + dir.string() + " mode 0750: " + std::strerror(errno));
      note("made " + dir.string() + " mode 0750 (it was " + octal(st.st_mode & 07777) + ")");
    }
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if ((st.st_mode & 07777 & ~0640u) == 0) continue;
      if (::chmod(entry.path().c_str(), st.st_mode & 0640) == 0)
        note("made " + entry.path().filename().string() + " mode " + octal(st.st_mode & 0640));
    }
  }

  static std::string octal(unsigned mode) {
    char text[8];
    std::snprintf(text, sizeof text, "%04o", mode);
    return text;
  }

  void retain(const ContinuousOptions& o) {
    std::vector<std::string> notes;
    const auto removed =
        apply_retention(o.dir, RetentionLimits{o.max_age_s, o.max_bytes}, unix_now_ns(), &notes);
    pusher.chunks_removed(removed);
    const StoreScan scan = scan_store(o.dir);
    uint64_t bytes = 0;
    for (const ChunkFile& c : scan.chunks) bytes += c.bytes;
    {
      std::lock_guard<std::mutex> guard(mutex);
      stats.chunks_removed += removed.size();
      stats.chunks_on_disk = scan.chunks.size();
      stats.bytes_on_disk = bytes;
    }
    for (std::string& n : notes) note(std::move(n));
    for (const std::string& n : scan.notes) note(n);
  }

  fs::path next_chunk_path(const fs::path& dir) const {
    uint64_t start = unix_now_ns();
    for (;;) {
      const fs::path path = dir / chunk_file_name(start);
      std::error_code ec;
      if (!fs::exists(path, ec) && !fs::exists(path.string() + kTmpSuffix, ec)) return path;
      start += 1'000'000;  // names have millisecond resolution
    }
  }

  void record_chunk(const ContinuousOptions& o) {
    const fs::path final_path = next_chunk_path(o.dir);
    const fs::path tmp_path = final_path.string() + kTmpSuffix;
    CaptureWriterOptions writer_options;
    writer_options.zstd_level = o.zstd_level;
    writer_options.writer = "hpd continuous";
    writer_options.file_mode = 0640;  // from its creation on: it is streamed into while recording
    auto writer = std::make_unique<CaptureWriter>(tmp_path.string(), writer_options);
    auto discard = [&] {
      writer.reset();
      std::error_code ec;
      fs::remove(tmp_path, ec);
    };

    RecordOptions ro;
    ro.all_processes = true;
    ro.frequency_hz = o.frequency_hz;
    ro.duration_s = o.chunk_seconds;
    ro.event = "cpu-clock";
    ro.kernel = o.kernel ? KernelFrames::kAuto : KernelFrames::kOff;
    ro.backend = o.backend;
    ro.off_cpu = o.off_cpu ? OffCpu::kOn : OffCpu::kOff;
    ro.call_graph = CallGraph::kAuto;  // cfi with the eBPF backend, fp with perf_event (system-wide)
    ro.cfi_row_capacity = o.cfi_rows;
    ro.stop = &stop_requested;
    // The recorder offers the profile every 250 ms; appending that often would make tiny, poorly
    // compressed blocks at 19 Hz, so the chunk goes to disk every flush_seconds.
    const uint64_t flush_interval_ns = static_cast<uint64_t>(o.flush_seconds * 1e9);
    uint64_t last_flush = mono_now_ns();
    std::string flush_error;
    ro.on_flush = [&](RawProfile& profile) {
      const uint64_t now = mono_now_ns();
      if (!flush_error.empty() || now - last_flush < flush_interval_ns) return;
      last_flush = now;
      try {
        writer->flush(profile);
      } catch (const std::exception& e) {
        flush_error = e.what();
        return;
      }
      profile.release_samples();  // written: a chunk's memory does not grow with its length
    };
    {
      std::lock_guard<std::mutex> guard(mutex);
      stats.current_chunk = final_path.filename().string();
    }
    RecordResult result;
    try {
      result = record(ro);
    } catch (...) {
      discard();
      std::lock_guard<std::mutex> guard(mutex);
      stats.current_chunk.clear();
      throw;
    }
    {
      std::lock_guard<std::mutex> guard(mutex);
      stats.current_chunk.clear();
    }
    const RawProfile& profile = result.profile;
    if (!flush_error.empty()) {
      discard();
      throw std::runtime_error("writing " + tmp_path.string() + " failed: " + flush_error);
    }
    if (profile.sample_count() == 0) {
      discard();  // an idle system, or stopped at once: nothing worth a file
    } else {
      writer->finish(profile);  // fsyncs
      writer.reset();
      rename_durably(tmp_path, final_path);
      pusher.chunk_finished();
    }
    std::lock_guard<std::mutex> guard(mutex);
    if (profile.sample_count() != 0) ++stats.chunks_written;
    stats.samples += profile.sample_count();
    stats.lost += profile.lost.lost_records + profile.lost.stack_failures;
    if (previous_end_mono != 0 && profile.info.start_mono_ns > previous_end_mono) {
      stats.last_gap_ns = profile.info.start_mono_ns - previous_end_mono;
      stats.max_gap_ns = std::max(stats.max_gap_ns, stats.last_gap_ns);
    }
    previous_end_mono = profile.info.end_mono_ns;
  }

  void run() {
    while (!stop_requested.load()) {
      ContinuousOptions o;
      {
        std::lock_guard<std::mutex> guard(mutex);
        o = options;
      }
      try {
        if (o.dir != locked_dir) open_directory(o);
        pusher.configure(o.dir, o.push, o.log);  // a new endpoint or labels (SIGHUP)
        record_chunk(o);
        retain(o);
      } catch (const std::exception& e) {
        error(e.what());
        previous_end_mono = 0;  // a failed chunk is not a gap between chunks
        std::unique_lock<std::mutex> guard(mutex);
        wake.wait_for(guard, std::chrono::duration<double>(o.retry_seconds),
                      [this] { return stop_requested.load(); });
      }
    }
  }
};

ContinuousProfiler::ContinuousProfiler(ContinuousOptions options) : state_(std::make_unique<State>()) {
  validate(options);
  state_->options = std::move(options);
}

ContinuousProfiler::~ContinuousProfiler() {
  stop();
}

void ContinuousProfiler::start() {
  std::lock_guard<std::mutex> control(state_->control);
  if (state_->thread.joinable()) return;
  const ContinuousOptions o = this->options();
  state_->open_directory(o);  // throws: the caller learns at once about a directory it cannot use
  state_->stop_requested = false;
  {
    std::lock_guard<std::mutex> guard(state_->mutex);
    state_->stats.running = true;
  }
  state_->thread = std::thread([state = state_.get()] { state->run(); });
  // The push has its own thread: sampling never waits for the network.
  state_->push_thread = std::thread([state = state_.get()] { state->pusher.run(); });
}

void ContinuousProfiler::stop() {
  std::lock_guard<std::mutex> control(state_->control);
  if (!state_->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> guard(state_->mutex);
    state_->stop_requested = true;
  }
  state_->wake.notify_all();
  state_->pusher.wake();
  state_->thread.join();
  state_->push_thread.join();
  state_->lock.reset();
  state_->locked_dir.clear();
  std::lock_guard<std::mutex> guard(state_->mutex);
  state_->stats.running = false;
}

void ContinuousProfiler::reconfigure(ContinuousOptions options) {
  validate(options);
  std::lock_guard<std::mutex> guard(state_->mutex);
  state_->options = std::move(options);
}

Stats ContinuousProfiler::stats() const {
  Stats stats;
  {
    std::lock_guard<std::mutex> guard(state_->mutex);
    stats = state_->stats;
  }
  stats.push = state_->pusher.stats();
  return stats;
}

ContinuousOptions ContinuousProfiler::options() const {
  std::lock_guard<std::mutex> guard(state_->mutex);
  return state_->options;
}

}  // namespace hpd::continuous
