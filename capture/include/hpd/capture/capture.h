// The native capture file (.hpr): a RawProfile written while recording and read back later.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "hpd/model/raw_profile.h"

namespace hpd {

// The format version this build writes, and the newest one it reads (docs/capture-format.md).
inline constexpr uint32_t kCaptureFormatVersion = 1;
inline constexpr uint32_t kCaptureMaxReadVersion = 1;

// Unreadable input: not a capture file, a newer format, a corrupt block. what() names the file.
class CaptureError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CaptureWriterOptions {
  int zstd_level = 3;
  // Written into the recording-info block: who wrote the file ("hpd 0.1.0").
  std::string writer = "hpd";
  // The mode (before the umask) of a file the writer creates: set at creation, never loosened later.
  unsigned file_mode = 0644;
};

// Streams a RawProfile that is still growing into a capture file. Each flush() appends blocks with
// what is new or changed since the previous flush (new modules, stacks and samples; processes,
// threads and lost counts whose fields changed), so a crash loses at most what came after the
// last flush. Every block is handed to the kernel with one write() as soon as it is encoded.
// Samples are written by their number in the recording, so that the profile may release those
// written (RawProfile::release_samples) between flushes; releasing one not yet written is an error.
// Not thread-safe; call it from the thread that mutates the RawProfile.
class CaptureWriter {
 public:
  // Creates (truncates) `path` and writes the file header. Throws CaptureError.
  explicit CaptureWriter(const std::string& path, CaptureWriterOptions options = {});
  // Writes into `fd`, which it takes ownership of and closes (e.g. a file a client opened and passed
  // to hpd); `name` is used in messages. Throws CaptureError.
  CaptureWriter(int fd, const std::string& name, CaptureWriterOptions options = {});
  ~CaptureWriter();
  CaptureWriter(const CaptureWriter&) = delete;
  CaptureWriter& operator=(const CaptureWriter&) = delete;

  // Appends what changed since the previous call. Throws CaptureError on a write failure.
  void flush(const RawProfile& profile);
  // flush(), then the end block; fsyncs and closes the file. Nothing may be written afterwards.
  void finish(const RawProfile& profile);

  uint64_t bytes_written() const;
  uint64_t blocks_written() const;
  const std::string& path() const;

 private:
  void start();  // the file header

  struct State;
  std::unique_ptr<State> state_;
};

// Writes `profile` as a complete capture file in one go.
void write_capture_file(const RawProfile& profile, const std::string& path,
                        CaptureWriterOptions options = {});

struct CaptureFileInfo {
  uint32_t version = 0;
  bool complete = false;        // the end block was present: the recording finished
  uint64_t blocks = 0;          // blocks read
  uint64_t skipped_blocks = 0;  // blocks of unknown optional types (written by a newer hpd)
  // How many times the recorder let go of its stacks and numbered them anew (stack-generation blocks:
  // RawProfile::forget_released_stacks); the profile read holds each stack once all the same.
  uint32_t stack_generations = 0;
  std::string writer;   // e.g. "hpd 0.1.0"
  std::string boot_id;  // /proc/sys/kernel/random/boot_id of the recording machine; "" = unknown
  // Things the user should know: an interrupted recording, skipped blocks, trailing data.
  std::vector<std::string> notes;
};

struct CaptureContents {
  RawProfile profile;
  CaptureFileInfo info;
};

// Whether `bytes` starts with the capture file magic.
bool has_capture_magic(std::span<const uint8_t> bytes);
// Whether the file at `path` starts with the capture file magic (false when unreadable).
bool is_capture_file(const std::string& path);

// Parses a capture file held in memory; `source` names it in messages. A file that ends early (no
// end block, or inside a block) is not an error: everything up to the last complete block is
// returned, info.complete is false and a note says what happened. Throws CaptureError for a
// missing magic, a newer format version, a checksum mismatch, or a malformed block.
CaptureContents read_capture(std::span<const uint8_t> bytes, const std::string& source = "<memory>");
CaptureContents read_capture_file(const std::string& path);

}  // namespace hpd
