// The record pipeline hpctl and hpd share: options from a RecordRequest, output to a path or a descriptor.
#include "hpd/session/record_pipeline.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "hpd/base/output_file.h"
#include "hpd/capture/capture.h"
#include "hpd/export/firefox.h"
#include "hpd/session/perf_map.h"
#include "hpd/symbolizer/convert.h"
#include "hpd/symbolizer/symbolizer.h"
#include "mip_recording.h"

namespace hpd::session {
namespace {

bool ends_with(const std::string& s, const char* suffix) {
  const std::string tail(suffix);
  return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

CaptureWriterOptions capture_options() {
  CaptureWriterOptions options;
  // Written while the recording runs, on the recorder's CPU: zstd's level 1 took a tenth less of hpd's
  // CPU than level 3 in a warm `--all` recording at 4999 Hz, for a file 2.5% larger
  // (docs/performance.md).
  options.zstd_level = 1;
#ifdef HPD_VERSION
  options.writer = std::string("hpd ") + HPD_VERSION;
#endif
  return options;
}

// --cgroup as /proc/PID/cgroup prints it ("0::/system.slice/app.service") or as that path alone: both
// name a directory under the cgroup v2 mount, which the recorder adds to a relative path. A path that
// exists as it is (/sys/fs/cgroup/...) stays absolute.
std::string cgroup_option(std::string cgroup) {
  if (cgroup.rfind("0::", 0) == 0) cgroup.erase(0, 3);
  // The root cgroup: the mount itself, not the file system's root. (Compared by size and character:
  // gcc 12 took `cgroup == "/"` on this moved-from-and-edited string for a read of uninitialized bytes.)
  if (cgroup.size() == 1 && cgroup[0] == '/') return ".";
  if (cgroup.size() > 1 && cgroup.front() == '/') {
    std::error_code ec;
    if (!std::filesystem::is_directory(cgroup, ec)) cgroup.erase(0, cgroup.find_first_not_of('/'));
  }
  return cgroup;
}

}  // namespace

RecordOptions record_options_from_request(const RecordRequest& request) {
  RecordOptions options;
  options.target = request.target;
  options.target.cgroup = cgroup_option(std::move(options.target.cgroup));
  options.duration_s = request.duration_s;
  options.frequency_hz = request.frequency_hz;
  options.event = request.event;
  options.kernel = request.kernel;
  options.backend = request.backend;
  options.off_cpu = request.off_cpu;
  options.off_cpu_min_us = request.off_cpu_min_us;
  options.follow_children = request.follow_children;
  options.call_graph = request.call_graph;
  options.stack_copy_bytes = request.stack_size;
  options.cfi_row_capacity = request.cfi_rows;
  options.count_calls = request.calls;
  options.call_counter = request.calls_counter;
  options.time_calls = request.call_latency;
  options.sample_allocations = request.alloc;
  options.alloc_mean_bytes = request.alloc_mean;
  // The targets and the options' combinations, checked as the recorder checks them; the reason is
  // worded by hpctl (with its flags) or hpd (with its request's fields).
  if (const TargetProblem problem = target_problem(options.target); problem != TargetProblem::kNone)
    throw RecordRequestError(problem);
  if (const OptionProblem problem = record_option_problem(options); problem != OptionProblem::kNone)
    throw RecordRequestError(problem);
  return options;
}

// The checks of the output's opening (hpd/base/output_file.h), made before anything is recorded.
void check_output_writable(const std::string& output) {
  check_output_path(output, is_capture_output(output) ? OutputWrite::kInPlace : OutputWrite::kReplace);
}

std::string format_record_progress(const RecordProgress& p, bool open_ended) {
  char line[200];
  int n;
  if (!open_ended && p.duration_s > 0) {
    n = std::snprintf(line, sizeof line, "recording: %.1f s of %.1f s, %llu samples", p.elapsed_s,
                      p.duration_s, static_cast<unsigned long long>(p.samples));
  } else {
    n = std::snprintf(line, sizeof line, "recording: %.1f s, %llu samples", p.elapsed_s,
                      static_cast<unsigned long long>(p.samples));
  }
  std::string text(line, n > 0 ? static_cast<size_t>(std::min(n, static_cast<int>(sizeof line) - 1)) : 0);
  if (p.lost != 0) text += ", " + std::to_string(p.lost) + " lost";
  if (open_ended || p.duration_s <= 0) text += " (Ctrl-C to stop)";
  return text;
}

bool is_capture_output(const std::string& name) {
  return ends_with(name, ".hpr");
}

bool is_gzip_output(const std::string& name) {
  return ends_with(name, ".gz");
}

namespace {

// An unnamed file in the temporary directory ($TMPDIR, else /tmp), gone when closed; -1 when none can be
// made (errno set).
int open_temporary_file() {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
  if (ec) dir = "/tmp";
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  // A file system without O_TMPFILE: a named file, unlinked at once.
  std::string name = (dir / "hpd-samples-XXXXXX").string();
  fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd >= 0) ::unlink(name.c_str());
  return fd;
}

// The whole content of the file open at `fd`, from its start.
std::vector<uint8_t> read_whole_file(int fd, const std::string& name) {
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  for (off_t offset = 0;;) {
    const ssize_t n = ::pread(fd, buffer, sizeof buffer, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error("cannot read back " + name + ": " + std::strerror(errno));
    if (n == 0) break;
    bytes.insert(bytes.end(), buffer, buffer + n);
    offset += n;
  }
  return bytes;
}

}  // namespace

namespace {

// The modules whose names were left out because open_file refused their files.
std::string describe_unreadable(const std::vector<ModuleInfo>& modules) {
  size_t count = 0;
  std::vector<std::string> files;
  for (const ModuleInfo& info : modules) {
    if (info.denied.empty()) continue;
    ++count;
    for (const std::string& file : info.denied)
      if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
  }
  if (count == 0) return "";
  constexpr size_t kShown = 5;
  std::string text =
      std::to_string(count) + (count == 1 ? " module" : " modules") + " not symbolized: you cannot read ";
  for (size_t i = 0; i < files.size() && i < kShown; ++i) text += (i == 0 ? "" : ", ") + files[i];
  if (files.size() > kShown) text += " and " + std::to_string(files.size() - kShown) + " more files";
  return text + " (hpd reads only the files you could read yourself)";
}

}  // namespace

RecordingOutput::RecordingOutput(const RecordRequest& request) : request_(request) {
  // Opened now, before anything is recorded, so that an output that cannot be written loses nothing.
  // A capture file (.hpr) is streamed while recording: a crash loses at most the last quarter second.
  // A Firefox profile goes to a temporary file beside the output, renamed over it when complete.
  if (is_capture_output(request.output)) {
    const CaptureWriterOptions options = capture_options();
    file_ = std::make_unique<OutputFile>(request.output, OutputWrite::kInPlace, options.file_mode);
    capture_ = std::make_unique<CaptureWriter>(file_->release_fd(), request.output, options);
  } else {
    file_ = std::make_unique<OutputFile>(request.output, OutputWrite::kReplace);
    open_spill();
  }
}

RecordingOutput::RecordingOutput(const RecordRequest& request, int fd) : request_(request), fd_(fd) {
  if (is_capture_output(request.output)) {
    capture_ = std::make_unique<CaptureWriter>(fd_.release(), request.output, capture_options());
  } else {
    open_spill();
  }
}

RecordingOutput::~RecordingOutput() {
  // A capture begun stays, also incomplete (its readers say so); abandon() removes it.
  if (file_ && capture_) file_->keep();
}

// A Firefox profile needs every sample at the end: they go to a temporary capture while recording
// and are read back then, so that the recording's memory does not grow with its length. Without a
// temporary file the samples simply stay in memory.
void RecordingOutput::open_spill() {
  const int fd = open_temporary_file();
  if (fd < 0) return;
  spill_read_fd_.reset(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!spill_read_fd_) {
    UniqueFd(fd).reset();
    return;
  }
  const CaptureWriterOptions options = capture_options();  // read back once, by this process
  try {
    spill_ = std::make_unique<CaptureWriter>(fd, "the temporary capture of the samples", options);
  } catch (const std::exception&) {
    spill_read_fd_.reset();
  }
}

void RecordingOutput::attach(RecordOptions& options, bool names_wanted) {
  names_wanted_ = names_wanted;
  if (capture_ && !names_wanted) options.stack_memory_bound = kStackMemoryBound;
  // The JIT files of a process are read at the end, in its /tmp: held while it lives (hpd's own /tmp
  // may not be the process's). The targets given now; the others as they are seen.
  for (const int32_t pid : options.target.pids) tmp_dirs_.add(pid);
  options.on_flush = [previous = std::move(options.on_flush), this](RawProfile& raw) {
    for (const RawProcess& process : raw.processes)
      if (process.end_ns == 0) tmp_dirs_.add(process.pid);
    if (previous) previous(raw);
  };
  // Each flush streams what is new to the capture (or the temporary one), then lets go of the samples
  // written. After a failed write they stay in memory.
  if (capture_ || spill_) {
    options.on_flush = [previous = std::move(options.on_flush), this](RawProfile& raw) {
      if (previous) previous(raw);
      if (!capture_error_.empty()) return;
      try {
        (capture_ ? *capture_ : *spill_).flush(raw);
      } catch (const std::exception& e) {
        capture_error_ = e.what();  // reported after the recording (.hpr), or the samples kept (spill)
        return;
      }
      raw.release_samples(released_sums());
    };
  }
  // MIP counts: by default of targets that carry a MIP section; with --all or --cgroup only when asked.
  if (request_.mip == Switch::kOn || (request_.mip == Switch::kAuto && !request_.target.is_system_wide())) {
    mip_ = std::make_unique<MipRecording>(request_.mip == Switch::kOn);
    options.on_flush = [previous = std::move(options.on_flush), this](RawProfile& raw) {
      if (previous) previous(raw);
      mip_->on_flush(raw);
    };
  }
}

// Puts the samples released into the temporary capture back in front of those still held.
void RecordingOutput::read_back_spill(RawProfile& raw) {
  if (raw.sample_offset == 0) return;
  const std::string name = "the temporary capture of the samples";
  CaptureContents spilled = read_capture(read_whole_file(spill_read_fd_.get(), name), name);
  // Written up to the last complete block (no end block: it was never finished).
  if (spilled.profile.samples.size() < raw.sample_offset) {
    throw std::runtime_error(name + " holds " + std::to_string(spilled.profile.samples.size()) +
                             " samples, " + std::to_string(raw.sample_offset) + " were written to it");
  }
  spilled.profile.samples.resize(raw.sample_offset);
  raw.restore_samples(std::move(spilled.profile.samples));
}

std::optional<Profile> RecordingOutput::finish(RecordResult& result) {
  if (mip_) mip_->finish(result.profile);
  if (capture_ && !capture_error_.empty()) throw std::runtime_error(capture_error_);
  if (!capture_ && spill_) {
    read_back_spill(result.profile);
    spill_.reset();
    spill_read_fd_.reset();
  }
  // JIT runtimes name their generated code in /tmp/perf-PID.map or jit-PID.dump; read now, while the
  // processes (and their /tmp through /proc/PID/root) may still be there, and before a capture is
  // finished: it keeps them (before, a capture said "JIT symbols of pid N: 1 of 1" and held none). A
  // recording that let go of its samples' stacks (a capture not symbolized at the end sums its samples
  // by thread only) no longer knows which addresses were sampled: it keeps every symbol of the files,
  // within the same bound, for whoever symbolizes the capture later.
  JitReadOptions jit;
  if (sources_.open_file) {
    jit.open_file = [open = sources_.open_file](int32_t, const std::string& path, int flags) {
      return open(path, flags);
    };
  }
  jit.max_bytes = sources_.max_jit_bytes;
  jit.bound_name = sources_.jit_bound_name;
  jit.tmp_dirs = &tmp_dirs_;
  jit.every_symbol = result.profile.released_stacks_forgotten;
  JitReadResult jit_read = read_jit_symbols(result.profile, jit);
  jit_notes_ = std::move(jit_read.notes);
  jit_bytes_ = jit_read.bytes_kept;
  if (capture_) {
    // Finished before symbolizing, so the capture is complete even if symbolization fails.
    capture_->finish(result.profile);
    // Every sample is in the file now: the summary and the report need only their sums.
    result.profile.release_samples(released_sums());
  }
  // A capture whose recording let go of its stacks is not symbolized here (attach): the file holds
  // its samples' stacks, memory no longer does.
  if (result.profile.released_stacks_forgotten) return std::nullopt;
  SymbolizerOptions symbolizer_options;
  symbolizer_options.cache_bytes = sources_.symbol_cache_bytes;
  symbolizer_options.open_file = sources_.open_file;
  // A capture is symbolized when it is read (hpctl report, convert): here only for a report printed now.
  if (capture_ && !names_wanted_) return std::nullopt;
  Symbolizer symbolizer(symbolizer_options);
  ConvertOptions convert_options;
  convert_options.kernel_frames = result.profile.info.kernel_frames;
  convert_options.kernel_symbols = result.kernel_symbols;  // kallsyms, when the recording read it
  Profile profile = symbolize_profile(result.profile, symbolizer, convert_options);
  symbol_cache_bytes_ = symbolizer.cache_bytes_used();
  unreadable_note_ = describe_unreadable(symbolizer.module_infos());
  if (!capture_) {
    if (fd_) {
      write_firefox_fd(profile, fd_.get(), is_gzip_output(request_.output));
      // A failed close may be the write-back's error (NFS, a full disk): the profile is not written.
      if (const int error = fd_.close(); error != 0)
        throw std::runtime_error("closing '" + request_.output + "' failed: " + std::strerror(error));
    } else {
      write_firefox_fd(profile, file_->fd(), is_gzip_output(request_.output));
      file_->commit();
    }
  }
  return profile;
}

void RecordingOutput::abandon() {
  capture_.reset();
  // A path: the capture begun, or the temporary file, is removed (if the path still names it). A
  // client's descriptor: the client removes its own file.
  file_.reset();
}

const std::vector<std::string>& RecordingOutput::mip_notes() const {
  static const std::vector<std::string> kNone;
  return mip_ ? mip_->notes() : kNone;
}

size_t RecordingOutput::mip_snapshots_taken() const {
  return mip_ ? mip_->snapshots_taken() : 0;
}

namespace {

// "stacks: ..." for the summary: the share of complete stacks among those whose end is known, on-CPU by
// samples, off-CPU by samples and by the time they stand for (one blocked interval may last seconds,
// another microseconds), as the report and the Firefox export state it. Empty without such stacks.
std::string stack_completeness_note(const RawProfile& p) {
  struct Ends {
    uint64_t known = 0, complete = 0, known_ns = 0, complete_ns = 0;
  } ends[2];
  const auto add = [&](SampleKind kind, StackEnd end, uint64_t samples, uint64_t off_cpu_ns) {
    if (end != StackEnd::kComplete && end != StackEnd::kTruncated && end != StackEnd::kFailed) return;
    Ends& e = ends[is_off_cpu_interval(kind) ? 1 : 0];
    e.known += samples;
    e.known_ns += off_cpu_ns;
    if (end == StackEnd::kComplete) {
      e.complete += samples;
      e.complete_ns += off_cpu_ns;
    }
  };
  for (const RawSampleSum& sum : p.released) add(sum.kind, sum.stack_end, sum.samples, sum.off_cpu_ns);
  for (const RawSample& sample : p.samples)
    add(sample.kind, sample.stack_end, 1, is_off_cpu_interval(sample.kind) ? sample.off_cpu_ns : 0);
  std::string note;
  char part[160];
  if (ends[0].known != 0) {
    std::snprintf(part, sizeof part, "on-CPU %.1f%% of %llu samples",
                  100.0 * double(ends[0].complete) / double(ends[0].known),
                  static_cast<unsigned long long>(ends[0].known));
    note += part;
  }
  if (ends[1].known != 0) {
    std::snprintf(part, sizeof part, "%soff-CPU %.1f%% of %llu samples", note.empty() ? "" : "; ",
                  100.0 * double(ends[1].complete) / double(ends[1].known),
                  static_cast<unsigned long long>(ends[1].known));
    note += part;
    if (ends[1].known_ns != 0) {
      std::snprintf(part, sizeof part, ", %.1f%% of their %.2f s",
                    100.0 * double(ends[1].complete_ns) / double(ends[1].known_ns),
                    double(ends[1].known_ns) / 1e9);
      note += part;
    }
  }
  return note.empty() ? note : "complete stacks: " + note;
}

}  // namespace

RecordSummary summarize_recording(const RecordResult& result, const std::optional<Profile>& profile,
                                  const RecordingOutput& output) {
  RecordSummary s;
  const auto& info = result.profile.info;
  s.samples = result.profile.sample_count();
  s.threads = profile ? profile->threads.size() : profile_thread_count(result.profile);
  // Durations count from the first sample; what came before it, from the request on, is said apart.
  const uint64_t from = info.first_sample_mono_ns != 0 && info.first_sample_mono_ns <= info.end_mono_ns
                            ? info.first_sample_mono_ns
                            : info.start_mono_ns;
  s.seconds = (info.end_mono_ns - from) / 1e9;
  if (info.requested_mono_ns != 0 && info.first_sample_mono_ns >= info.requested_mono_ns)
    s.unsampled_start_s = (info.first_sample_mono_ns - info.requested_mono_ns) / 1e9;
  if (info.host_steal_known) s.host_steal_s = info.host_steal_ns / 1e9;
  s.backend = info.backend;
  s.lost_records = result.profile.lost.lost_records;
  s.throttle_events = result.profile.lost.throttle_events;
  s.call_graph = to_string(result.call_graph);
  s.stack_copy_bytes = result.stack_copy_bytes;
  s.call_graph_reason = result.call_graph_reason;
  s.backend_fallback_reason = result.backend_fallback_reason;
  s.capture = output.is_capture();
  s.mip_enabled = output.mip_enabled();
  s.mip_snapshots_kept = result.profile.mip_snapshots.size();
  s.mip_snapshots_taken = output.mip_snapshots_taken();
  s.command_exit_status = result.command_exit_status < 0 ? 0 : result.command_exit_status;
  s.notes = output.mip_notes();
  if (std::string note = stack_completeness_note(result.profile); !note.empty())
    s.notes.push_back(std::move(note));
  if (std::string note = host_steal_note(info); !note.empty()) s.notes.push_back("note: " + note);
  if (std::string note = samples_not_taken_note(result.profile); !note.empty())
    s.notes.push_back("note: " + note);
  for (const std::string& note : output.jit_notes()) s.notes.push_back("note: " + note);
  if (!output.unreadable_note().empty()) s.notes.push_back("note: " + output.unreadable_note());
  if (!result.mmap_watch_fallback_reason.empty()) {
    s.notes.push_back("note: new mappings were read from /proc, not from the kernel's mmap records (" +
                      result.mmap_watch_fallback_reason +
                      "); frames of processes that lived only milliseconds may have no module");
  }
  if (result.blocked_without_wakeup != 0) {
    s.notes.push_back("note: " + std::to_string(result.blocked_without_wakeup) +
                      " blocked intervals ended with no wakeup seen (woken before the wakeup hook was "
                      "attached): any wait for a CPU after their wakeup is counted as blocked");
  }
  if (result.off_cpu_without_stack_copy != 0) {
    s.notes.push_back("dwarf: " + std::to_string(result.off_cpu_without_stack_copy) + " of " +
                      std::to_string(result.off_cpu_without_stack_copy + result.off_cpu_with_stack_copy) +
                      " off-CPU records had no copy of their stack (the ring was half full when the thread "
                      "was switched out, or the thread was off the CPU before the recording began): "
                      "walked by frame pointer");
  }
  if (result.off_cpu_intervals_lost != 0) {
    s.notes.push_back("note: " + std::to_string(result.off_cpu_intervals_lost) +
                      " off-CPU intervals were not recorded: the map of blocked threads was full");
  }
  if (result.cpu_tails_missing != 0) {
    s.notes.push_back("note: " + std::to_string(result.cpu_tails_missing) +
                      " threads exited without their CPU time after their last sample reaching hpd before "
                      "the recording ended: that time is not counted");
  }
  if (result.cpu_tails_unknown != 0) {
    s.notes.push_back("note: " + std::to_string(result.cpu_tails_unknown) +
                      " threads' CPU time after their last sample on each CPU is not known (threads created "
                      "during the recording and still running at its end, and those that created them; or "
                      "every thread, when records were lost): up to a sampling interval per CPU each (more "
                      "in the kernel when only user mode was sampled) is not counted");
  }
  if (result.cpu_excess_ns != 0) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.1f", static_cast<double>(result.cpu_excess_ns) / 1e6);
    std::string note =
        "note: " + std::to_string(result.threads_with_cpu_excess) +
        " exited threads' last samples were given " + ms +
        " ms of CPU time beyond the threads' final CPU time (time that was not theirs, such as "
        "hypervisor steal hpd could not read); ";
    if (result.cpu_excess_taken_back_ns == result.cpu_excess_ns) {
      note += "it was taken back from those samples";
    } else {
      std::snprintf(ms, sizeof ms, "%.1f", static_cast<double>(result.cpu_excess_taken_back_ns) / 1e6);
      note += std::string(ms) + " ms of it was taken back from those samples, the rest had left the profile";
    }
    s.notes.push_back(note);
  }
  if (result.off_cpu_switch_ins_inferred != 0) {
    s.notes.push_back(
        "note: " + std::to_string(result.off_cpu_switch_ins_inferred) +
        " off-CPU intervals ended with a switch-in the kernel's sched_switch tracepoint did not "
        "report: their end was taken from the thread's CPU time since it switched out");
  }
  if (result.stack_copies_skipped_ring_full != 0) {
    s.notes.push_back("note: " + std::to_string(result.stack_copies_skipped_ring_full) +
                      " stack copies were not taken because the ring buffer was half full (hpd's reader fell "
                      "behind; samples come first): those samples keep the frame-pointer walk taken with "
                      "them, which may end early in code without frame pointers");
  }
  if (result.off_cpu_at_attach != 0) {
    const bool one = result.off_cpu_at_attach == 1;
    s.notes.push_back("note: " + std::to_string(result.off_cpu_at_attach) +
                      (one ? " thread was" : " threads were") +
                      " already off the CPU when the recording began: " +
                      (one ? "its wait is counted from the recording's start, in the function it waits in"
                           : "their waits are counted from the recording's start, in the functions they "
                             "wait in"));
  }
  if (result.children_not_attached != 0) {
    s.notes.push_back(
        "note: " + std::to_string(result.children_not_attached) +
        " or more child processes the targets had when the recording began were not recorded (" +
        result.children_attach_error + ")");
  }
  if (result.perf_ring_kib_asked != 0) {
    s.notes.push_back("note: perf ring buffers of " + std::to_string(result.perf_ring_kib) +
                      " KiB per CPU, not the " + std::to_string(result.perf_ring_kib_asked) +
                      " KiB asked: the locked-memory limit refused more (this user's perf_event_mlock_kb "
                      "allowance is shared by all of its processes; raise RLIMIT_MEMLOCK, or give "
                      "CAP_IPC_LOCK); records lost for it are counted as lost");
  }
  if (!result.attach_state_error.empty()) {
    s.notes.push_back("note: threads blocked before the recording began are not seen until they run (" +
                      result.attach_state_error + ")");
  }
  if (result.call_graph == CallGraph::kCfi) {
    const auto& c = result.cfi;
    char line[320];
    std::snprintf(line, sizeof line,
                  "cfi: tables of %llu of %llu modules in the eBPF maps (%llu of %llu rows, %s; %.0f ms "
                  "compiling)",
                  static_cast<unsigned long long>(c.modules_loaded),
                  static_cast<unsigned long long>(c.modules), static_cast<unsigned long long>(c.rows),
                  static_cast<unsigned long long>(c.row_capacity), human_bytes(c.map_bytes).c_str(),
                  c.compile_ns / 1e6);
    s.notes.emplace_back(line);
    if (!c.disk_cache.empty()) {
      std::snprintf(line, sizeof line,
                    "cfi: %llu tables loaded from the unwind-table cache (%.0f ms), %llu compiled, %llu "
                    "stored in it (%s)",
                    static_cast<unsigned long long>(c.tables_from_disk), c.disk_load_ns / 1e6,
                    static_cast<unsigned long long>(c.tables_compiled),
                    static_cast<unsigned long long>(c.tables_stored), c.disk_cache.c_str());
      s.notes.emplace_back(line);
    }
    if (c.tables_kept != 0) {
      std::snprintf(line, sizeof line,
                    "cfi: %llu tables kept by hpd from earlier recordings, %llu compiled, %llu loaded from "
                    "the unwind-table cache",
                    static_cast<unsigned long long>(c.tables_kept),
                    static_cast<unsigned long long>(c.tables_compiled),
                    static_cast<unsigned long long>(c.tables_from_disk));
      s.notes.emplace_back(line);
    }
    if (c.disk_refused != 0)
      s.notes.push_back("cfi: " + std::to_string(c.disk_refused) +
                        " cached tables were not trusted and compiled again (first: " + c.disk_refusal + ")");
    if (c.modules_evicted != 0 || c.modules_refused != 0) {
      std::snprintf(line, sizeof line,
                    "cfi: the row map was full: %llu tables of unmapped modules evicted, %llu modules "
                    "refused (walked by frame pointer)",
                    static_cast<unsigned long long>(c.modules_evicted),
                    static_cast<unsigned long long>(c.modules_refused));
      s.notes.emplace_back(line);
    }
    // Modules refused for lack of room first: the other reasons (no CFI) are the modules' own.
    std::vector<std::string> without = c.without_table;
    std::stable_partition(without.begin(), without.end(), [](const std::string& m) {
      return m.find("the CFI row map is full") != std::string::npos;
    });
    constexpr size_t kShown = 5;
    for (size_t i = 0; i < without.size() && i < kShown; ++i)
      s.notes.push_back("cfi: frame pointers for " + without[i]);
    if (without.size() > kShown)
      s.notes.push_back("cfi: and " + std::to_string(without.size() - kShown) +
                        " more modules without a table (frame pointers)");
    // After them, a map large enough for what this recording needed at once, with a tenth more, in
    // steps of 256 Ki rows (2 MiB): the option that gives the refused modules their tables next time.
    if (c.modules_refused != 0 && c.rows_wanted > c.row_capacity) {
      constexpr uint64_t kStep = 256 * 1024;
      const uint64_t rows = std::min<uint64_t>(
          (c.rows_wanted + c.rows_wanted / 10 + kStep - 1) / kStep * kStep, kMaxCfiRowCapacity);
      std::snprintf(
          line, sizeof line,
          "cfi: --cfi-rows %llu (%llu MiB of kernel memory for its rows) would have held the tables "
          "refused beside those loaded: %llu rows at most at once, in a map of %llu",
          static_cast<unsigned long long>(rows), static_cast<unsigned long long>(rows * kCfiRowBytes >> 20),
          static_cast<unsigned long long>(c.rows_wanted), static_cast<unsigned long long>(c.row_capacity));
      s.notes.emplace_back(line);
    }
    // Tables loaded from the cache on disk were not compiled: what such samples lacked is a table in
    // the eBPF maps when they were taken (a process's first milliseconds, a library just loaded).
    if (c.samples_tables_pending != 0 && s.samples != 0) {
      std::snprintf(line, sizeof line,
                    "cfi: %llu samples (%.1f%%) were walked by frame pointer: a table they needed was not "
                    "in the eBPF maps yet (its module just mapped, the table being read from the disk "
                    "cache or compiled)",
                    static_cast<unsigned long long>(c.samples_tables_pending),
                    100.0 * double(c.samples_tables_pending) / double(s.samples));
      s.notes.emplace_back(line);
    }
    if (c.on_cpu_rewalked + c.off_cpu_rewalked != 0) {
      std::snprintf(line, sizeof line,
                    "cfi: %llu samples taken before the tables they needed were in the eBPF maps were "
                    "walked again with the tables (%llu on-CPU, from a copy of their stack; %llu off-CPU: "
                    "%llu read before their thread ran again, %llu from a copy of their stack taken as "
                    "it blocked)",
                    static_cast<unsigned long long>(c.on_cpu_rewalked + c.off_cpu_rewalked),
                    static_cast<unsigned long long>(c.on_cpu_rewalked),
                    static_cast<unsigned long long>(c.off_cpu_rewalked),
                    static_cast<unsigned long long>(c.off_cpu_rewalked - c.off_cpu_rewalked_from_copy),
                    static_cast<unsigned long long>(c.off_cpu_rewalked_from_copy));
      s.notes.emplace_back(line);
    }
    if (c.mappings_dropped != 0)
      s.notes.push_back("cfi: " + std::to_string(c.mappings_dropped) +
                        " executable mappings beyond 256 per process were walked by frame pointer");
  }
  if (result.samples_given_exit_user_stack != 0)
    s.notes.push_back("note: " + std::to_string(result.samples_given_exit_user_stack) +
                      " samples taken in a thread's exit, once its memory was being released, have the user "
                      "stack of its exit system call (where it stays)");
  for (std::string& line : describe_call_counts(result.calls)) s.notes.push_back(std::move(line));
  if (result.profile.alloc.mean_bytes != 0) {
    const RawAllocStats& a = result.profile.alloc;
    uint64_t freed = 0;
    for (const RawAllocation& x : result.profile.allocations) freed += x.freed ? 1 : 0;
    const bool runtime = result.alloc_source.empty();
    s.notes.push_back("allocations (" +
                      (runtime ? std::string("hpd's runtime, in-process") : result.alloc_source) +
                      "): " + std::to_string(result.profile.allocations.size()) + " sampled (one per " +
                      human_bytes(a.mean_bytes) + " allocated on average), " + std::to_string(freed) +
                      " of them freed while recording" +
                      (runtime ? "; " + std::to_string(a.processes) + " process start(s)" : std::string()));
  }
  for (const std::string& line : result.alloc_messages) s.notes.push_back(line);
  return s;
}

std::string human_bytes(uint64_t n) {
  char buf[32];
  if (n >= (1u << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", n / 1048576.0);
  } else if (n >= 1024) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", n / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  }
  return buf;
}

}  // namespace hpd::session
