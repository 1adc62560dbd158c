// hpd's programs loaded ahead (RecordOptions::load_next_ahead, prepare_recording). Internal to the eBPF
// backend.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "bpf/bpf_load.h"
#include "bpf/cfi_maps.h"

namespace hpd::bpf_recording {

// hpd's programs loaded ahead (RecordOptions::load_next_ahead, prepare_recording): one worker thread
// keeps one skeleton loaded for the LoadConfig wanted, and a recording with that LoadConfig takes it
// instead of loading its own, then only fills its maps and attaches. The skeleton taken is the
// session's, destroyed with it as a cold one is; the next is loaded once the session has attached,
// so that the load does not compete with the attach for the CPU.
class Preloader {
 public:
  static Preloader& instance();
  ~Preloader();

  // Keeps a skeleton like `c` loaded from now on (a ready one of another LoadConfig is dropped).
  void want(const LoadConfig& c);

  // want(c), then waits until that set is loaded (true) or its load failed or another set was asked
  // for meanwhile (false): hpd's start, which reports ready with the first recording's set loaded.
  bool load_now(const LoadConfig& c);

  // The ready skeleton when its LoadConfig is `c` (one being loaded for `c` is waited for); nothing
  // otherwise. The next is loaded when want() is called again. cfi mode: `arrays` gets its row and
  // index maps, mapped into this process ahead too (empty when that failed: the session maps them).
  Skeleton take(const LoadConfig& c, CfiMaps::MappedArrays* arrays);

  // Drops the ready skeleton and ends the worker (hpd's stop); want() does nothing afterwards.
  void stop();

  PreparedRecordingStatus status();

 private:
  Preloader() = default;

  bool needs_load() const;
  void run();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<LoadConfig> wanted_;
  Skeleton ready_;
  CfiMaps::MappedArrays ready_arrays_;  // cfi mode: ready_'s row and index maps, mapped here
  LoadConfig ready_config_;
  bool loading_ = false;
  LoadConfig loading_config_;
  std::optional<LoadConfig> failed_config_;
  std::string error_;
  uint64_t loads_ = 0;
  uint64_t taken_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace hpd::bpf_recording
