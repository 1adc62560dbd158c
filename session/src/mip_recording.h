// MIP snapshots taken while recording: one LiveReader per target process, read at every flush.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hpd/model/raw_profile.h"

namespace hpd::mip {
class LiveReader;
}

namespace hpd::session {

class MipRecording {
 public:
  // every_process: read every recorded process (--mip); else only those mapping a module with a
  // __llvm_mipraw section (the default).
  explicit MipRecording(bool every_process);
  ~MipRecording();
  MipRecording(const MipRecording&) = delete;
  MipRecording& operator=(const MipRecording&) = delete;

  // From RecordOptions::on_flush: new processes are checked, every MIP process is read.
  void on_flush(const RawProfile& raw);
  // After record(): one last read of processes still alive, then the first and the last snapshot
  // per (pid, module) go into `raw` (modules interned by path and build-id).
  void finish(RawProfile& raw);
  // Problems worth a line on stderr (permission refused, undecodable sections), each once.
  [[nodiscard]] const std::vector<std::string>& notes() const { return notes_; }
  [[nodiscard]] size_t snapshots_taken() const { return taken_; }

 private:
  struct Kept {
    std::string path;
    std::string build_id;
    RawMipSnapshot snapshot;  // module left kNoIndex until finish()
  };
  struct Target {
    std::unique_ptr<mip::LiveReader> reader;
    size_t mappings_seen = SIZE_MAX;  // re-checked when the process maps more
    bool gone = false;
  };
  void read(int32_t pid, Target& target);
  void note(const std::string& text);

  bool every_process_;
  std::map<int32_t, Target> targets_;
  std::map<std::pair<int32_t, std::string>, std::pair<Kept, Kept>> kept_;  // first, last
  std::vector<std::string> notes_;
  size_t taken_ = 0;
};

}  // namespace hpd::session
