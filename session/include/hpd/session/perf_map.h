// JIT symbols from /tmp/perf-PID.map and jit-PID.dump, read for every recorded process when a
// recording ends.
#pragma once

#include <string>
#include <vector>

#include "hpd/model/raw_profile.h"

namespace hpd::session {

// Parses perf-map text ("START SIZE NAME" per line, hex without 0x, as perf reads it) into symbols of
// `pid`, in file order. Lines that do not parse are skipped; their number goes to *bad_lines.
std::vector<RawJitSymbol> parse_perf_map(const std::string& text, int32_t pid, size_t* bad_lines = nullptr);

// Appends the perf-map symbols of every process of `profile` to profile.jit_symbols. The file is
// looked for through /proc/PID/root/tmp while the process lives (its own /tmp, also when hpd runs
// with PrivateTmp or the process in a container), then at /tmp. Only regular files are read (no
// symlinks), at most 256 MiB each. Returns one note per process whose map was read.
std::vector<std::string> read_perf_maps(RawProfile& profile);

// Parses a jitdump file (perf's binary format: a header, then records; JIT_CODE_LOAD names a code
// blob, JIT_CODE_MOVE moves one) into symbols of `pid`, in file order. Returns false when the header
// is not a jitdump's of this byte order; a truncated last record ends the list.
bool parse_jitdump(const std::string& bytes, int32_t pid, std::vector<RawJitSymbol>& out);

// Appends the jitdump symbols of every process of `profile`: the jit-PID.dump the process mapped
// (runtimes map it executable so that profilers find it: node --perf-prof), else one in its current
// directory while it lives. Returns one note per process whose dump was read.
std::vector<std::string> read_jitdumps(RawProfile& profile);

}  // namespace hpd::session
