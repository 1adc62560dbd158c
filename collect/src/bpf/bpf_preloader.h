// hpd's programs loaded ahead (RecordOptions::load_next_ahead, prepare_recording). Internal to the eBPF
// backend.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bpf/bpf_load.h"
#include "bpf/cfi_maps.h"

namespace hpd::bpf_recording {

// hpd's programs loaded ahead (RecordOptions::load_next_ahead, prepare_recording): one worker thread
// keeps skeletons loaded for the LoadConfigs wanted, and a recording with one of those LoadConfigs
// takes it instead of loading its own, then only fills its maps and attaches. Two kinds at most: the
// one loaded at hpd's start (load_now: the likeliest request's, kept wanted from then on, so that a
// recording of another kind does not make the next of this kind load cold), and the last other kind
// asked for (want), which replaces the one before it. The skeleton taken is the session's, destroyed
// with it as a cold one is; the next of its kind is loaded once want() is called again, which a
// session does once it has attached, so that the load does not compete with the attach for the CPU.
class Preloader {
 public:
  static Preloader& instance();
  ~Preloader();

  // Keeps a skeleton like `c` loaded from now on (a ready one of the other kind asked for before is
  // dropped, not the one of hpd's start).
  void want(const LoadConfig& c);

  // want(c), then waits until that set is loaded (true) or its load failed or another set was asked
  // for meanwhile (false): hpd's start, which reports ready with the first recording's set loaded. `c`
  // stays wanted whatever is asked for later.
  bool load_now(const LoadConfig& c);

  // The ready skeleton whose LoadConfig is `c` (one being loaded for `c` is waited for); nothing
  // otherwise. The next like it is loaded when want() is called again. cfi mode: `arrays` gets its row
  // and index maps, mapped into this process ahead too (empty when that failed: the session maps them).
  Skeleton take(const LoadConfig& c, CfiMaps::MappedArrays* arrays);

  // Drops the ready skeletons and ends the worker (hpd's stop); want() does nothing afterwards.
  void stop();

  PreparedRecordingStatus status();

 private:
  Preloader() = default;

  struct Wanted {
    LoadConfig config;
    bool paused = false;  // taken: loaded again only when asked again (want)
  };
  struct Ready {
    LoadConfig config;
    Skeleton skel;
    CfiMaps::MappedArrays arrays;  // cfi mode: skel's row and index maps, mapped here
  };

  // The wanted kind with no ready skeleton, not paused and not failed: the next to load.
  [[nodiscard]] const Wanted* next_load() const;
  [[nodiscard]] bool is_wanted(const LoadConfig& c) const;
  void run();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<Wanted> start_;  // the kind loaded at hpd's start (load_now)
  std::optional<Wanted> other_;  // the last other kind asked for
  std::vector<Ready> ready_;
  bool loading_ = false;
  LoadConfig loading_config_;
  std::vector<LoadConfig> failed_;  // not tried again: the session's own load reports the error
  std::string error_;
  uint64_t loads_ = 0;
  uint64_t taken_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace hpd::bpf_recording
