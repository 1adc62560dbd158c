// ContinuousProfiler: one long-lived system-wide recording, cut into chunk files (each a complete capture,
// streamed into NAME.tmp and renamed when done) without a pause in sampling.
#include <malloc.h>
#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_set>
#include <utility>

#include "chunk_cut.h"
#include "chunk_pusher.h"
#include "hpd/base/open_as.h"
#include "hpd/capture/capture.h"
#include "hpd/continuous/continuous.h"
#include "hpd/session/otlp_push.h"
#include "hpd/session/perf_map.h"
#include "hpd/symbolizer/symbolizer.h"
#include "store_files.h"

namespace hpd::continuous {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxNotes = 32;
// Bounds of a collection (see collection_too_large): its profile about 100 MB at most, an hour long.
constexpr size_t kMaxCollectionProcesses = 100'000;
constexpr size_t kMaxCollectionThreads = 400'000;
constexpr size_t kMaxCollectionStacks = 1'000'000;
constexpr uint64_t kMaxCollectionNs = 3600'000'000'000ULL;
// How long after its exit a process stays in the collection, at least (State::collect).
constexpr uint64_t kForgetExitedAfterNs = 10'000'000'000ULL;

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
  // Each chunk file holds its processes' maps and build-ids again: not worth it below 1 s.
  if (!std::isfinite(o.chunk_seconds) || o.chunk_seconds < 1 || o.chunk_seconds > 86400)
    throw std::invalid_argument("continuous mode: a chunk must last between 1 s and 1 day");
  if (!std::isfinite(o.flush_seconds) || o.flush_seconds <= 0)
    throw std::invalid_argument("continuous mode: the flush interval must be positive");
  if (!std::isfinite(o.retry_seconds) || o.retry_seconds < 0 || o.retry_seconds > 86400)
    throw std::invalid_argument("continuous mode: the retry delay must be between 0 and 1 day");
  if (o.zstd_level < 1 || o.zstd_level > 19)
    throw std::invalid_argument("continuous mode: the zstd level must be between 1 and 19");
  std::vector<const PushSettings*> all{&o.push};
  for (const PushSettings& p : o.more_push) all.push_back(&p);
  std::set<std::string> urls;
  for (const PushSettings* p : all) {
    if (!p->otlp_endpoint.empty()) {
      std::string url;
      try {
        url = session::otlp_profiles_url(p->otlp_endpoint);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string("continuous mode: the OTLP endpoint ") + e.what());
      }
      if (!urls.insert(url).second)
        throw std::invalid_argument("continuous mode: the OTLP endpoint " + url +
                                    " is given twice (each endpoint is pushed to once)");
    }
    if (!std::isfinite(p->timeout_s) || p->timeout_s < 1 || p->timeout_s > 3600)
      throw std::invalid_argument("continuous mode: the push timeout must be between 1 s and 1 hour");
    if (!std::isfinite(p->retry_max_s) || p->retry_max_s < 1 || p->retry_max_s > 86400)
      throw std::invalid_argument(
          "continuous mode: the longest wait between push retries must be between 1 s and 1 day");
    for (const auto& [key, value] : p->labels) {
      if (key.empty()) throw std::invalid_argument("continuous mode: a push label has an empty key");
    }
  }
  if (urls.size() > kMaxPushEndpoints)
    throw std::invalid_argument("continuous mode: at most " + std::to_string(kMaxPushEndpoints) +
                                " OTLP endpoints are pushed to");
}

namespace {

constexpr double kPushStopGraceSeconds = 5;

// A pusher and its thread (named hpd-push); `done` once its run() returned.
struct PushWorker {
  std::shared_ptr<ChunkPusher> pusher;
  std::thread thread;
  std::shared_ptr<std::atomic<bool>> done;
};

PushWorker start_push_worker(std::shared_ptr<ChunkPusher> pusher) {
  PushWorker w;
  w.pusher = std::move(pusher);
  w.done = std::make_shared<std::atomic<bool>>(false);
  w.thread = std::thread([p = w.pusher, done = w.done] {
    ::pthread_setname_np(::pthread_self(), "hpd-push");
    p->run();
    *done = true;
  });
  return w;
}

// Gives the memory hpd's threads freed back to the system (malloc_trim) after each finished chunk, on
// a thread of its own (named hpd-trim), also when push is off: glibc keeps what a thread freed in its
// arena otherwise (the collection's transients; docs/performance.md "Continuous push"). Not on the
// recording thread: sampling does not wait for it.
class MemoryTrimmer {
 public:
  void start() {
    std::lock_guard<std::mutex> guard(mutex_);
    stop_ = false;
    thread_ = std::thread([this] { run(); });
  }
  void stop() {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void chunk_finished() {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      ++events_;
    }
    wake_.notify_all();
  }

 private:
  void run() {
    ::pthread_setname_np(::pthread_self(), "hpd-trim");
    std::unique_lock<std::mutex> guard(mutex_);
    uint64_t seen = events_;
    while (!stop_) {
      wake_.wait(guard, [&] { return stop_ || events_ != seen; });
      if (stop_) break;
      seen = events_;
      guard.unlock();
      ::malloc_trim(0);
      guard.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  uint64_t events_ = 0;
  std::thread thread_;
};

}  // namespace

struct ContinuousProfiler::State {
  std::mutex control;  // serializes start() and stop()
  mutable std::mutex mutex;
  std::condition_variable wake;
  ContinuousOptions options;  // guarded by mutex; the thread copies it at each chunk
  Stats stats;                // guarded by mutex
  std::atomic<bool> stop_requested{false};
  std::thread thread;
  MemoryTrimmer trimmer;
  // One pusher and thread per endpoint configured, none when push is off (the push has its own
  // threads: sampling never waits for the network), each with its cursor on disk, so that an endpoint
  // that is down holds back none of the others. Changed by the thread that configures them (the
  // recording thread, or start() and stop() while it does not run), under pushers_mutex: stats() reads
  // them from other threads.
  mutable std::mutex pushers_mutex;
  std::vector<PushWorker> pushers;
  // The pushers of endpoints a reload removed, stopped: the request each had in flight ends (its
  // cursor is written), then the thread returns; joined at the next configure_pushers() or at stop().
  std::vector<PushWorker> retiring;

  // Each endpoint to the pusher that pushes to its URL already (its cursor, counters and retries go
  // on, whichever key names it now), the others to new pushers with threads of their own; the
  // pushers of endpoints no longer configured are stopped.
  void configure_pushers(const ContinuousOptions& o) {
    for (auto it = retiring.begin(); it != retiring.end();) {
      if (!it->done->load()) {
        ++it;
        continue;
      }
      it->thread.join();
      it = retiring.erase(it);
    }
    std::vector<const PushSettings*> wanted;
    if (!o.push.otlp_endpoint.empty()) wanted.push_back(&o.push);
    for (const PushSettings& p : o.more_push) {
      if (!p.otlp_endpoint.empty()) wanted.push_back(&p);
    }
    // Configured first (reading or creating their cursors may throw): nothing has moved yet then.
    std::vector<size_t> kept(wanted.size(), SIZE_MAX);
    std::vector<std::shared_ptr<ChunkPusher>> fresh(wanted.size());
    for (size_t w = 0; w < wanted.size(); ++w) {
      const std::string url = session::otlp_profiles_url(wanted[w]->otlp_endpoint);
      for (size_t p = 0; p < pushers.size() && kept[w] == SIZE_MAX; ++p) {
        if (pushers[p].pusher->url() == url) kept[w] = p;
      }
      if (kept[w] != SIZE_MAX) {
        pushers[kept[w]].pusher->configure(o.dir, *wanted[w], o.log);
        continue;
      }
      // Removed by a reload and added back while its last request is still in flight: its new pusher
      // starts at a later boundary, once that request ended and wrote the cursor it will read.
      if (std::any_of(retiring.begin(), retiring.end(),
                      [&](const PushWorker& r) { return r.pusher->url() == url; }))
        continue;
      fresh[w] = std::make_shared<ChunkPusher>();
      fresh[w]->configure(o.dir, *wanted[w], o.log);
    }
    std::lock_guard<std::mutex> guard(pushers_mutex);
    std::vector<PushWorker> next;
    std::vector<bool> taken(pushers.size(), false);
    for (size_t w = 0; w < wanted.size(); ++w) {
      if (kept[w] != SIZE_MAX) {
        taken[kept[w]] = true;
        next.push_back(std::move(pushers[kept[w]]));
      } else if (fresh[w]) {
        next.push_back(start_push_worker(std::move(fresh[w])));
      }
    }
    for (size_t p = 0; p < pushers.size(); ++p) {
      if (taken[p]) continue;
      pushers[p].pusher->stop();
      retiring.push_back(std::move(pushers[p]));
    }
    pushers = std::move(next);
  }

  // Stops every pusher: a request in flight gets a moment to end (one the endpoint accepted then has
  // its cursor written, and is not sent again after a restart); past the grace it is abandoned (a
  // hung endpoint).
  void stop_pushers() {
    std::vector<PushWorker> all;
    {
      std::lock_guard<std::mutex> guard(pushers_mutex);
      all = std::move(pushers);
      pushers.clear();
    }
    for (PushWorker& w : retiring) all.push_back(std::move(w));
    retiring.clear();
    for (PushWorker& w : all) w.pusher->stop();
    const auto grace =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(kPushStopGraceSeconds);
    const auto running = [&] {
      return std::any_of(all.begin(), all.end(), [](const PushWorker& w) { return !w.done->load(); });
    };
    while (running() && std::chrono::steady_clock::now() < grace)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (PushWorker& w : all) w.pusher->cancel();
    for (PushWorker& w : all) w.thread.join();
  }

  std::vector<std::shared_ptr<ChunkPusher>> current_pushers() const {
    std::vector<std::shared_ptr<ChunkPusher>> out;
    std::lock_guard<std::mutex> guard(pushers_mutex);
    for (const PushWorker& w : pushers) out.push_back(w.pusher);
    return out;
  }
  // Owned by the recording thread while it runs, by start()/stop() otherwise.
  std::unique_ptr<DirectoryLock> lock;
  fs::path locked_dir;
  uint64_t previous_end_mono = 0;  // end of the last chunk's recording, for the gap; 0 = none
  // /proc/kallsyms as the chunks' kernel names are taken from (keep_kernel_names); owned by the
  // recording thread.
  std::shared_ptr<const KernelSymbols> kernel_symbols;
  std::unordered_set<uint64_t> kernel_unknown;  // addresses the last read of kallsyms did not hold

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
    configure_pushers(o);
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
    for (PushWorker& w : pushers) w.pusher->chunks_removed(removed);
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

  fs::path next_chunk_path(const fs::path& dir, uint64_t start_unix_ns) const {
    uint64_t start = start_unix_ns;
    for (;;) {
      const fs::path path = dir / chunk_file_name(start);
      std::error_code ec;
      if (!fs::exists(path, ec) && !fs::exists(path.string() + kTmpSuffix, ec)) return path;
      start += 1'000'000;  // names have millisecond resolution
    }
  }

  // The chunk in progress: its samples cut from the collection, streamed into NAME.tmp.
  struct Chunk {
    ChunkCut cut;
    fs::path final_path;
    fs::path tmp_path;
    std::unique_ptr<CaptureWriter> writer;
    uint64_t end_mono = 0;  // where the collection rotates to the next chunk
    uint64_t last_flush_mono = 0;
    // The owner of each process of its samples, read when its first sample came (it is then most
    // likely still running): its JIT files are opened as that owner at the chunk's end, when the
    // process may be gone (keep_jit_names). nullopt: gone already.
    std::unordered_map<int32_t, std::optional<FsCredentials>> owners;

    Chunk(const RawProfile& live, uint64_t start_mono) : cut(live, start_mono) {}

    void add(const RawSample& s, const RawProfile& live) {
      cut.add(s, live);
      if (auto [it, added] = owners.try_emplace(s.pid); added) it->second = process_fs_credentials(s.pid);
    }
  };

  std::unique_ptr<Chunk> begin_chunk(const ContinuousOptions& o, const RawProfile& live,
                                     uint64_t start_mono) {
    auto chunk = std::make_unique<Chunk>(live, start_mono);
    chunk->final_path = next_chunk_path(o.dir, chunk->cut.profile().info.start_unix_ns);
    chunk->tmp_path = chunk->final_path.string() + kTmpSuffix;
    CaptureWriterOptions writer_options;
    writer_options.zstd_level = o.zstd_level;
    writer_options.writer = "hpd continuous";
    writer_options.file_mode = 0640;  // from its creation on: it is streamed into while recording
    chunk->writer = std::make_unique<CaptureWriter>(chunk->tmp_path.string(), writer_options);
    chunk->end_mono = start_mono + static_cast<uint64_t>(o.chunk_seconds * 1e9);
    chunk->last_flush_mono = start_mono;
    std::lock_guard<std::mutex> guard(mutex);
    stats.current_chunk = chunk->final_path.filename().string();
    return chunk;
  }

  static void discard_chunk(std::unique_ptr<Chunk>& chunk) {
    if (!chunk) return;
    chunk->writer.reset();
    std::error_code ec;
    fs::remove(chunk->tmp_path, ec);
    chunk.reset();
  }

  // Appends what the chunk gathered since the last flush to its .tmp file; its samples then leave
  // memory, so a chunk holds at most flush_seconds of samples.
  static void flush_chunk(Chunk& chunk, const RawProfile& live) {
    chunk.cut.refresh(live);
    chunk.writer->flush(chunk.cut.profile());
    chunk.cut.profile().release_samples();
  }

  // The kallsyms lines that name the chunk's kernel addresses (RawProfile::kernel_symbols), so that
  // the chunk names them alone: later, in another boot, after hpd's own BPF programs and the modules
  // its samples hit were unloaded. The table is the one hpd keeps for its recordings (one copy of
  // kallsyms in the process: a second one was 3-4 MiB, docs/performance.md "Memory of the push"),
  // else the one this collection read; /proc/kallsyms is read again only when a chunk holds an
  // address that no read held (a module or program loaded since; the collection's own programs at
  // the first chunk, when the table was read before they were loaded): not once a chunk for
  // addresses kallsyms never lists.
  void keep_kernel_names(RawProfile& profile) {
    if (!profile.info.kernel_frames) return;
    const KernelSymbolsStatus kept = kernel_symbols_status();
    if (!kernel_symbols || (kept.kept && kept.symbols != 0)) kernel_symbols = kept_kernel_symbols(false);
    std::vector<uint64_t> unknown;
    std::string lines = kernel_symbol_lines(profile, *kernel_symbols, &unknown);
    if (std::any_of(unknown.begin(), unknown.end(),
                    [&](uint64_t a) { return !kernel_unknown.contains(a); })) {
      kernel_symbols = kept_kernel_symbols(true);
      kernel_unknown.clear();
      lines = kernel_symbol_lines(profile, *kernel_symbols, &unknown);
    }
    kernel_unknown.insert(unknown.begin(), unknown.end());
    profile.kernel_symbols = std::move(lines);
  }

  // The names JIT runtimes gave the generated code the chunk sampled (/tmp/perf-PID.map, the
  // jit-PID.dump a process mapped; RawProfile::jit_symbols), read as a recording's end reads them, so
  // that the chunk names that code alone, in an export or a push, after the process is gone. Without
  // them a node service's JavaScript was [anon]+0xOFFSET in every chunk. Each process's files are
  // opened as its owner (its file-system uid and gid, its groups: open_as; Chunk::owners), never as
  // root: a process whose /tmp is a mount of its own could otherwise have hpd read, and keep in a chunk
  // its group reads, lines of a file only root may read. A process whose owner was never read (gone
  // before its first sample reached the chunk) is skipped.
  static void keep_jit_names(Chunk& chunk) {
    session::JitReadOptions jit;
    jit.bound_name = "hpd's bound of 16 MiB of JIT symbols per chunk";
    jit.open_file = [&owners = chunk.owners](int32_t pid, const std::string& path, int flags) {
      auto [it, added] = owners.try_emplace(pid);
      if (added) it->second = process_fs_credentials(pid);
      if (!it->second) {
        errno = ESRCH;
        return -1;
      }
      return open_as(*it->second, path.c_str(), flags);
    };
    session::read_jit_symbols(chunk.cut.profile(), jit);
  }

  // The end block, the rename, the figures; an empty chunk (an idle system) leaves no file.
  void finish_chunk(std::unique_ptr<Chunk> chunk, const RawProfile& live, uint64_t end_mono,
                    uint64_t requested_mono) {
    chunk->cut.refresh(live);
    chunk->cut.end(end_mono, requested_mono);
    RawProfile& profile = chunk->cut.profile();
    const uint64_t samples = profile.sample_count();
    {
      // The gap before this chunk goes into the figures before its file appears: whoever sees the file
      // sees the gap in the status too.
      std::lock_guard<std::mutex> guard(mutex);
      if (previous_end_mono != 0) {
        const uint64_t start = profile.info.start_mono_ns;
        stats.last_gap_ns = start > previous_end_mono ? start - previous_end_mono : 0;
        stats.max_gap_ns = std::max(stats.max_gap_ns, stats.last_gap_ns);
      }
      previous_end_mono = end_mono;
    }
    if (samples == 0) {
      discard_chunk(chunk);
    } else {
      keep_kernel_names(profile);
      keep_jit_names(*chunk);
      chunk->writer->finish(profile);  // fsyncs
      chunk->writer.reset();
      rename_durably(chunk->tmp_path, chunk->final_path);
      for (PushWorker& w : pushers) w.pusher->chunk_finished();
      trimmer.chunk_finished();
    }
    std::lock_guard<std::mutex> guard(mutex);
    stats.current_chunk.clear();
    if (samples != 0) ++stats.chunks_written;
    stats.samples += samples;
    stats.lost += profile.lost.lost_records + profile.lost.stack_failures;
  }

  // Whether options the collection was started with differ from `now` in what the recording uses:
  // then the collection ends at the next chunk boundary and a new one starts (one gap).
  static bool recording_changed(const ContinuousOptions& was, const ContinuousOptions& now) {
    return was.dir != now.dir || was.frequency_hz != now.frequency_hz || was.cfi_rows != now.cfi_rows ||
           was.kernel != now.kernel || was.backend != now.backend || was.off_cpu != now.off_cpu;
  }

  // The collection's profile keeps every process, thread and distinct stack it met, which a
  // system-wide recording of days would let grow without end: past these, the collection is
  // started again at a chunk boundary (one gap).
  // The recorder also holds open every module file it met (to symbolize exited processes), which
  // keeps the disk space of deleted programs: a collection lasts an hour at most.
  static bool collection_too_large(const RawProfile& live, uint64_t now_mono) {
    return live.processes.size() > kMaxCollectionProcesses || live.threads.size() > kMaxCollectionThreads ||
           live.stacks.size() > kMaxCollectionStacks ||
           now_mono - live.info.start_mono_ns >= kMaxCollectionNs;
  }

  // One long-lived system-wide recording, its samples cut into chunk files at each chunk boundary
  // without a pause in sampling. Returns when stop() is asked for, when a reload changed what the
  // recording uses, when the collection grew too large; throws when it fails (the chunk in progress
  // then is discarded).
  void collect(const ContinuousOptions& started_with) {
    std::atomic<bool> end_collection{false};
    std::unique_ptr<Chunk> chunk;
    std::string failure;
    bool collection_over = false;  // its last chunk ended at a boundary
    uint64_t requested_mono = 0;   // for the first chunk: how long sampling took to begin

    RecordOptions ro;
    ro.target.all_processes = true;
    ro.frequency_hz = started_with.frequency_hz;
    ro.duration_s = 0;  // until end_collection
    ro.event = SamplingEvent::kCpuClock;
    ro.kernel = started_with.kernel ? Switch::kAuto : Switch::kOff;
    ro.backend = started_with.backend;
    ro.off_cpu = started_with.off_cpu ? Switch::kOn : Switch::kOff;
    ro.call_graph = CallGraph::kAuto;  // cfi with the eBPF backend, fp with perf_event (system-wide)
    ro.cfi_row_capacity = started_with.cfi_rows;
    ro.stop = &end_collection;
    uint64_t forget_before = 0;  // set at a chunk boundary; taken by the recorder after on_flush
    ro.forget_before = [&forget_before] { return std::exchange(forget_before, 0); };
    // Called every 250 ms on the recording's thread with the collection's profile.
    ro.on_flush = [&](RawProfile& live) {
      if (!failure.empty()) return;
      try {
        const uint64_t now = mono_now_ns();
        ContinuousOptions o;
        {
          std::lock_guard<std::mutex> guard(mutex);
          o = options;
        }
        const bool changed = recording_changed(started_with, o);
        o.dir = started_with.dir;  // the directory locked; another one is the next collection's
        if (collection_over) return;
        if (!chunk) chunk = begin_chunk(o, live, live.info.start_mono_ns);
        bool ending = stop_requested.load();
        // Each boundary passed (one, unless this thread was held up): the samples before it close the
        // chunk in progress, the rest go on to the next one.
        std::vector<RawSample> pending(live.samples.begin(), live.samples.end());
        while (chunk && now >= chunk->end_mono) {
          const uint64_t boundary = chunk->end_mono;
          const uint64_t chunk_start_mono = chunk->cut.start_mono_ns();
          auto later = std::stable_partition(pending.begin(), pending.end(),
                                             [&](const RawSample& s) { return s.time_ns < boundary; });
          for (auto it = pending.begin(); it != later; ++it) chunk->add(*it, live);
          pending.erase(pending.begin(), later);
          finish_chunk(std::move(chunk), live, boundary, requested_mono);
          requested_mono = 0;
          // The processes and threads that exited a while ago leave the collection, and so do the
          // stacks no chunk still to be cut names (right after this call: forget_before): it holds
          // what runs and the stacks of one chunk, not everything the system ran since it began
          // (a shell loop or a build starts processes many times a second, each with stacks of
          // its own). A while: a chunk, 10 s at least, so that no record of theirs is still on its
          // way (held for an unwind table, out of order). Every chunk holds its processes, threads
          // and stacks itself.
          const uint64_t keep_ns = std::max<uint64_t>(boundary - chunk_start_mono, kForgetExitedAfterNs);
          forget_before = boundary > keep_ns ? boundary - keep_ns : 1;
          retain(o);
          if (changed || collection_too_large(live, now)) {
            // The samples after the boundary end with this collection (counted in the gap before the
            // next one's first chunk); the next one starts at once.
            collection_over = true;
            ending = true;
          } else {
            configure_pushers(o);  // new endpoints or labels (SIGHUP)
            chunk = begin_chunk(o, live, boundary);
          }
        }
        if (chunk) {
          for (const RawSample& s : pending) chunk->add(s, live);
        }
        // Copied into the chunk: the collection keeps no sample (nor a sum of them, which would grow
        // with every thread and stack of the system).
        live.sample_offset += live.samples.size();
        live.samples.clear();
        if (chunk && now - chunk->last_flush_mono >= static_cast<uint64_t>(o.flush_seconds * 1e9)) {
          chunk->last_flush_mono = now;
          flush_chunk(*chunk, live);
        }
        if (ending) end_collection = true;
      } catch (const std::exception& e) {
        failure = e.what();
        end_collection = true;
      }
    };
    requested_mono = mono_now_ns();
    RecordResult result;
    try {
      result = record(ro);
    } catch (...) {
      discard_chunk(chunk);
      std::lock_guard<std::mutex> guard(mutex);
      stats.current_chunk.clear();
      throw;
    }
    if (!failure.empty()) {
      discard_chunk(chunk);
      {
        std::lock_guard<std::mutex> guard(mutex);
        stats.current_chunk.clear();
      }
      throw std::runtime_error(failure);
    }
    // The last samples, exits and lost counts came after the last on_flush.
    RawProfile& live = result.profile;
    ContinuousOptions o;
    {
      std::lock_guard<std::mutex> guard(mutex);
      o = options;
    }
    o.dir = started_with.dir;
    if (!chunk && !collection_over && !live.samples.empty())
      chunk = begin_chunk(started_with, live, live.info.start_mono_ns);
    if (chunk) {
      for (const RawSample& s : live.samples) chunk->add(s, live);
      const uint64_t end = std::max(live.info.end_mono_ns, chunk->cut.start_mono_ns());
      finish_chunk(std::move(chunk), live, end, requested_mono);
    }
    retain(o);
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
        configure_pushers(o);  // new endpoints or labels (SIGHUP)
        {
          std::lock_guard<std::mutex> guard(mutex);
          ++stats.collections;
        }
        collect(o);
      } catch (const std::exception& e) {
        error(e.what());
        previous_end_mono = 0;  // a failed collection is not a gap between chunks
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
  try {
    state_->open_directory(o);  // throws: the caller learns at once about a directory it cannot use
  } catch (...) {
    state_->stop_pushers();  // those it started before it failed
    state_->lock.reset();
    state_->locked_dir.clear();
    throw;
  }
  state_->stop_requested = false;
  {
    std::lock_guard<std::mutex> guard(state_->mutex);
    state_->stats.running = true;
  }
  state_->trimmer.start();
  state_->thread = std::thread([state = state_.get()] { state->run(); });
}

void ContinuousProfiler::stop() {
  std::lock_guard<std::mutex> control(state_->control);
  if (!state_->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> guard(state_->mutex);
    state_->stop_requested = true;
  }
  state_->wake.notify_all();
  state_->thread.join();
  state_->stop_pushers();
  state_->trimmer.stop();
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
  for (const auto& pusher : state_->current_pushers()) {
    for (PushStats& p : pusher->stats()) stats.push.push_back(std::move(p));
  }
  return stats;
}

ContinuousOptions ContinuousProfiler::options() const {
  std::lock_guard<std::mutex> guard(state_->mutex);
  return state_->options;
}

}  // namespace hpd::continuous
