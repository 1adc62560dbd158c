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
#include "bpf/bpf_reuse.h"
#include "bpf/cfi_maps.h"

namespace hpd::bpf_recording {

// hpd's programs loaded ahead (RecordOptions::load_next_ahead, prepare_recording): one worker thread
// keeps skeletons loaded for the LoadConfigs wanted, and a recording with one of those LoadConfigs
// takes it instead of loading its own, then only fills its maps and attaches. Two kinds at most: the
// one loaded at hpd's start (load_now: the likeliest request's, kept wanted from then on, so that a
// recording of another kind does not make the next of this kind load cold), and the last other kind
// asked for (want), which replaces the one before it. The skeleton taken is the session's; at its end
// the session gives it back (give_back), and the worker puts every map of it back as loaded
// (reset_for_reuse) for the next recording of its kind, instead of loading another: loading costs
// ~95 ms of CPU, the reset a few. A skeleton whose reset failed is destroyed, and a fresh one loaded.
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

  // The ready skeleton whose LoadConfig is `c` (one being loaded or reset for `c` is waited for);
  // nothing otherwise. The next like it is loaded when want() is called again, or is this one given
  // back. cfi mode: `arrays` gets its row and index maps, mapped into this process ahead too (empty
  // when that failed: the session maps them). `globals`: its .data and .bss as they were loaded.
  Skeleton take(const LoadConfig& c, CfiMaps::MappedArrays* arrays, GlobalsAtLoad* globals);

  // A session of kind `c` will give its skeleton back: `c` is kept wanted (as by want()), but nothing
  // is loaded for it meanwhile.
  void expect_back(const LoadConfig& c);

  // The skeleton of a session of kind `c` that ended (its programs detached), to be reset and kept
  // ready for the next recording of its kind, if that kind is still wanted and has none ready; else it
  // is destroyed. When the reset fails it is destroyed and the next of its kind loaded afresh.
  void give_back(const LoadConfig& c, Skeleton skel, CfiMaps::MappedArrays arrays, GlobalsAtLoad globals);

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
    GlobalsAtLoad globals;         // skel's .data and .bss right after its load
  };

  // The wanted kind with no ready skeleton, not paused and not failed: the next to load.
  [[nodiscard]] const Wanted* next_load() const;
  [[nodiscard]] bool is_wanted(const LoadConfig& c) const;
  [[nodiscard]] bool has_ready(const LoadConfig& c) const;
  // A skeleton for `c` is being loaded or reset, or waits for its reset.
  [[nodiscard]] bool busy_with(const LoadConfig& c) const;
  // Moves the ready skeletons of kinds no longer wanted to `out` (destroyed by the caller, unlocked).
  void drop_unwanted(std::vector<Ready>& out);
  // Resets the first skeleton given back (the lock held on entry and exit, not during the reset).
  void reset_returned(std::unique_lock<std::mutex>& lock);
  void run();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<Wanted> start_;  // the kind loaded at hpd's start (load_now)
  std::optional<Wanted> other_;  // the last other kind asked for
  std::vector<Ready> ready_;
  std::vector<Ready> returned_;  // given back, waiting for their reset
  bool loading_ = false;
  LoadConfig loading_config_;
  bool resetting_ = false;
  LoadConfig resetting_config_;
  std::vector<LoadConfig> failed_;  // not tried again: the session's own load reports the error
  std::string error_;
  uint64_t loads_ = 0;
  uint64_t taken_ = 0;
  uint64_t reuses_ = 0;          // skeletons given back, reset and kept ready again
  uint64_t reset_failures_ = 0;  // skeletons given back whose reset failed (destroyed)
  std::string reset_error_;      // why the last reset failed
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace hpd::bpf_recording
