// The record pipeline hpctl and hpd share: RecordRequest to RecordOptions, the output (a capture streamed
// while recording, or a Firefox profile written at the end, into a path or a client's descriptor), the
// summary.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "hpd/base/unique_fd.h"
#include "hpd/collect/recorder.h"
#include "hpd/model/profile.h"
#include "hpd/session/perf_map.h"
#include "hpd/session/record_request.h"
#include "hpd/session/record_summary.h"

namespace hpd {
class CaptureWriter;
class OutputFile;
}  // namespace hpd

namespace hpd::session {

class MipRecording;

// session's error type for a record request refused as asked: targets that make no one recording (the
// recorder's target_problem: target_problem() says which) or options that do not go together
// (record_option_problem: option_problem()), or neither (both kNone) for the session's own refusals.
// what() is the engine's wording (record_problem_text), naming no option of hpctl's; hpctl words the
// reason with its flags (cli/record_problem_words.cpp), hpd with its request's fields (its
// `bad_request` error, hpd/service/error_reply.h). What fails later (the output's writes:
// std::runtime_error naming the path, from base's OutputFile and the capture writer) is not a refused
// request.
class RecordRequestError : public std::invalid_argument {
 public:
  explicit RecordRequestError(TargetProblem problem)
      : std::invalid_argument(record_problem_text(problem)), target_problem_(problem) {}
  explicit RecordRequestError(OptionProblem problem)
      : std::invalid_argument(record_problem_text(problem)), option_problem_(problem) {}
  explicit RecordRequestError(const std::string& what) : std::invalid_argument(what) {}
  [[nodiscard]] TargetProblem target_problem() const { return target_problem_; }
  [[nodiscard]] OptionProblem option_problem() const { return option_problem_; }

 private:
  TargetProblem target_problem_ = TargetProblem::kNone;
  OptionProblem option_problem_ = OptionProblem::kNone;
};

// The recorder's options for `request`, without stop flag or callbacks: where a record request of
// hpctl (local or before it asks hpd) and of hpd is validated. Throws RecordRequestError for
// contradictory or missing targets (target_problem) and options that do not go together
// (record_option_problem); the recorder's checks of the machine (validate_record_options: privileges,
// processes, cgroup, ranges; RecordError) come on top.
RecordOptions record_options_from_request(const RecordRequest& request);

// Refuses an output path that cannot be written, before anything is recorded (std::runtime_error): the
// checks of hpd::OutputFile (hpd/base/output_file.h: links, FIFOs and devices others could have
// planted; a missing directory; a directory where no file can be created).
void check_output_writable(const std::string& output);

// The progress line: "recording: 1.5 s of 10.0 s, 1200 samples".
std::string format_record_progress(const RecordProgress& progress, bool open_ended);

// Whether the output name asks for a capture file (.hpr) or a gzip-compressed profile (.gz).
bool is_capture_output(const std::string& name);
bool is_gzip_output(const std::string& name);

// Where the symbols of a recording come from, and the memory they may take.
struct SymbolSources {
  // Opens a file the names may come from (a module's binary or debug file, a JIT map or jitdump)
  // as open(2) would, flags included. Unset: open(2) as this process (hpctl). hpd opens the files
  // of a client's recording with the client's permissions (open_as), so that the client gets names
  // only from files it could read itself; the summary names those it could not.
  std::function<int(const std::string& path, int flags)> open_file;
  // The JIT symbols kept for the recording (JitReadOptions::max_bytes) and what the notes call
  // that bound.
  uint64_t max_jit_bytes = uint64_t{16} << 20;
  std::string jit_bound_name = "hpctl's bound of 16 MiB of JIT symbols per recording";
  // The symbolizer's cache of module tables (SymbolizerOptions::cache_bytes).
  uint64_t symbol_cache_bytes = uint64_t{512} << 20;
};

// The most a recording streamed to a capture and not symbolized at its end keeps of stacks (its released
// samples' sums are by thread only: RawProfile::ReleasedSums::kByThread) (RecordingOutput::attach). Was
// 16 MiB when the sums were by stack too (about half of it): the stacks met in a generation are as many.
inline constexpr size_t kStackMemoryBound = size_t{8} << 20;

// The output of one recording. Construct it before record(), attach() it to the options, and call
// finish() with the result.
class RecordingOutput {
 public:
  // Writes `request.output` (a path, opened at once by hpd::OutputFile's rules; the Firefox profile
  // replaces it atomically at the end). Throws std::runtime_error naming the path and why.
  explicit RecordingOutput(const RecordRequest& request);
  // Writes into `fd`, which it owns; `request.output` only names the format.
  RecordingOutput(const RecordRequest& request, int fd);
  ~RecordingOutput();
  RecordingOutput(const RecordingOutput&) = delete;
  RecordingOutput& operator=(const RecordingOutput&) = delete;

  // Chains into options.on_flush: the capture (or, for a Firefox profile, a temporary capture)
  // streamed every flush and the samples written released from memory, MIP counts read, the /tmp of
  // each process seen alive held (ProcessTmpDirs: options.target.pids' from here) for its JIT files.
  // `names_wanted`: the caller prints a report of the recording when it ends (see finish()). A capture
  // not symbolized then needs no stack in memory once it is written: the recording lets its stacks go
  // when they grow beyond kStackMemoryBound (RecordOptions::stack_memory_bound), and its memory stays
  // flat however long it records a whole machine.
  void attach(RecordOptions& options, bool names_wanted);
  // Joins the MIP snapshots into the result, completes the capture, symbolizes and (unless a capture
  // was asked for) writes the Firefox profile. Returns the symbolized profile. Throws on write errors.
  // With a capture, result.profile keeps only the sums of its samples (RawProfile::released) and the
  // profile returned their per-thread sums (Thread::sample_sums): enough for the summary and report.
  // A capture is symbolized later (hpctl report, convert), so here only when names are wanted
  // (attach()); otherwise nothing is symbolized, neither user nor kernel frames, and the result is
  // nullopt (summarize_recording counts the threads from result.profile).
  // For a Firefox profile, result.profile holds every sample again.
  std::optional<Profile> finish(RecordResult& result);
  // After a failed record(): drops a capture file begun at a path (nothing was recorded).
  void abandon();
  // Before finish(): where its symbols come from (the default: any file this process can open).
  void set_symbol_sources(SymbolSources sources) { sources_ = std::move(sources); }

  [[nodiscard]] bool is_capture() const { return capture_ != nullptr; }
  [[nodiscard]] const std::vector<std::string>& mip_notes() const;
  [[nodiscard]] size_t mip_snapshots_taken() const;
  [[nodiscard]] bool mip_enabled() const { return mip_ != nullptr; }
  // One line per process whose /tmp/perf-PID.map named JIT code (finish() reads them).
  [[nodiscard]] const std::vector<std::string>& jit_notes() const { return jit_notes_; }
  // After finish(): what the JIT symbols kept took (JitReadResult::bytes_kept), and the most the
  // symbolizer's module tables took.
  [[nodiscard]] uint64_t jit_bytes() const { return jit_bytes_; }
  [[nodiscard]] uint64_t symbol_cache_bytes() const { return symbol_cache_bytes_; }
  // After finish(): "2 modules not symbolized: you cannot read A; B", or empty.
  [[nodiscard]] const std::string& unreadable_note() const { return unreadable_note_; }

 private:
  RecordRequest request_;
  bool names_wanted_ = true;
  UniqueFd fd_;  // owned until handed to the capture writer or closed after the Firefox profile
  std::unique_ptr<OutputFile> file_;  // the output of a path
  void open_spill();
  void read_back_spill(RawProfile& raw);
  // A capture not symbolized at the end keeps its samples' sums by thread only: its stacks are in
  // the file, and the summary needs no more.
  [[nodiscard]] RawProfile::ReleasedSums released_sums() const {
    return capture_ && !names_wanted_ ? RawProfile::ReleasedSums::kByThread
                                      : RawProfile::ReleasedSums::kByStack;
  }

  std::unique_ptr<CaptureWriter> capture_;
  // A Firefox output: the samples streamed to a temporary capture while recording (see open_spill).
  std::unique_ptr<CaptureWriter> spill_;
  UniqueFd spill_read_fd_;
  std::string capture_error_;
  std::unique_ptr<MipRecording> mip_;
  std::vector<std::string> jit_notes_;
  ProcessTmpDirs tmp_dirs_;
  SymbolSources sources_;
  uint64_t jit_bytes_ = 0;
  uint64_t symbol_cache_bytes_ = 0;
  std::string unreadable_note_;
};

// `profile`: what finish() returned (nullopt: a capture, not symbolized).
RecordSummary summarize_recording(const RecordResult& result, const std::optional<Profile>& profile,
                                  const RecordingOutput& output);

// "12.3 MiB"
std::string human_bytes(uint64_t n);

}  // namespace hpd::session
