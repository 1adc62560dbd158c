// JIT symbols from /tmp/perf-PID.map and jit-PID.dump, read for every recorded process when a
// recording ends.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hpd/base/unique_fd.h"
#include "hpd/model/raw_profile.h"

namespace hpd::session {

// Parses perf-map text ("START SIZE NAME" per line, hex without 0x, as perf reads it) into symbols of
// `pid`, in file order. Lines that do not parse are skipped; their number goes to *bad_lines.
std::vector<RawJitSymbol> parse_perf_map(const std::string& text, int32_t pid, size_t* bad_lines = nullptr);

// Parses a jitdump file (perf's binary format: a header, then records; JIT_CODE_LOAD names a code
// blob, JIT_CODE_MOVE moves one) into symbols of `pid`, in file order. Returns false when the header
// is not a jitdump's of this byte order; a truncated last record ends the list.
bool parse_jitdump(const std::string& bytes, int32_t pid, std::vector<RawJitSymbol>& out);

// The /tmp directories of recorded processes, held open while they live, so that their perf maps
// are found after they exit: hpd reads the JIT files when a recording ends, when a launched command
// is gone, and its own /tmp is not the processes' (hpd.service has PrivateTmp=yes; a process in a
// container has its own). One directory per mount namespace (most processes share one), at most
// kMaxDirs; opened by this process through /proc/PID/root/tmp (it records the processes, so it may
// reach them); the files in them are opened with JitReadOptions::open_file, so with the client's
// permissions in hpd.
class ProcessTmpDirs {
 public:
  static constexpr size_t kMaxDirs = 64;
  static constexpr size_t kMaxProcesses = size_t{1} << 16;

  // Holds `pid`'s /tmp unless one of its mount namespace is held already. Quiet when the process is
  // gone or out of reach: its files are then looked for as before (/tmp).
  void add(int32_t pid);
  // The path of `name` in the /tmp held for `pid` ("/proc/self/fd/N/NAME": open(2) follows it into
  // that directory, also from another thread of this process), or "" when none is held.
  [[nodiscard]] std::string path_in_tmp(int32_t pid, const std::string& name) const;
  [[nodiscard]] size_t dirs() const { return dirs_.size(); }

 private:
  struct Dir {
    uint64_t namespace_dev = 0, namespace_ino = 0;  // of /proc/PID/ns/mnt
    UniqueFd fd;                                    // O_PATH
  };
  std::vector<Dir> dirs_;
  std::unordered_map<int32_t, size_t> dir_of_pid_;  // pid -> index in dirs_
};

// How the JIT files of a recording are read. Both readers stream their files (a 64 KiB buffer),
// and keep only symbols that cover an address the profile may name by them: one of that process's
// samples, sampled allocations or call edges, not inside a file it mapped and did not unmap (the
// symbolizer names those by the file). A runtime's map may name millions of blobs, of which a
// profile needs the few it sampled; with --all, the other processes' code at the same addresses
// keeps no more of them. Besides the symbols kept, reading holds one process's addresses of that
// kind at a time. Of the symbols that cover one, one per start address is kept (the last: the
// runtime wrote over the blob there), up to `max_bytes` for the whole recording; the rest are
// dropped and counted in the notes.
struct JitReadOptions {
  // Opens a file of process `pid` (its map, its jitdump) as open(2) would (flags included); unset:
  // open(2) as this process. hpd opens a client's files with the client's permissions (open_as), and
  // continuous mode, which has no client, each process's files as the process's owner, so that root
  // reads no file that owner could not.
  std::function<int(int32_t pid, const std::string& path, int flags)> open_file;
  // The memory the symbols kept may take, counted as sizeof(RawJitSymbol), the name and an index
  // entry each.
  uint64_t max_bytes = uint64_t{16} << 20;
  // Names that bound in the notes ("max_jit_symbols_mb in hpd.conf").
  std::string bound_name = "hpctl's bound of 16 MiB of JIT symbols per recording";
  // The /tmp of processes held while they lived: where the files of a process that has exited are
  // looked for before this process's /tmp.
  const ProcessTmpDirs* tmp_dirs = nullptr;
  // Every symbol of the files, not only those covering a sampled address: for a recording that let go
  // of its samples' stacks (RawProfile::released_stacks_forgotten; its capture holds them), where which
  // addresses were sampled is no longer known.
  bool every_symbol = false;
};

// What reading the JIT files of a recording kept and left out.
struct JitReadResult {
  std::vector<std::string> notes;  // one per file read, and what was left out
  uint64_t symbols_read = 0;       // well-formed symbols in the files
  uint64_t symbols_kept = 0;       // added to RawProfile::jit_symbols
  uint64_t symbols_unsampled = 0;  // covering no sampled address
  uint64_t symbols_shadowed = 0;   // covering some, each named by a symbol starting closer to it
  uint64_t symbols_dropped = 0;    // covering one, but beyond max_bytes
  uint64_t bytes_kept = 0;         // as counted against max_bytes
};

// Appends the perf-map and jitdump symbols of every process of `profile` to profile.jit_symbols.
// The perf map is looked for through /proc/PID/root/tmp while the process lives (its own /tmp, also
// when hpd runs with PrivateTmp or the process in a container), then in the /tmp held for it
// (options.tmp_dirs) after it exited, then at /tmp; the jitdump is the jit-PID.dump the process mapped
// (through its root while it lives, through its /tmp held when it was under /tmp) (runtimes map it executable
// so that profilers find it: node
// --perf-prof), else one in its current directory while it lives. Only regular files are read (no
// symlinks, no FIFOs), a perf map of at most 256 MiB, a jitdump of at most 1 GiB.
JitReadResult read_jit_symbols(RawProfile& profile, const JitReadOptions& options = {});

}  // namespace hpd::session
