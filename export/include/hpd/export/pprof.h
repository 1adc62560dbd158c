// Writes a Profile as a pprof profile (profile.proto, gzip-compressed): go tool pprof, Pyroscope, Parca.
#pragma once

#include <string>

#include "hpd/export/error.h"
#include "hpd/model/profile.h"
#include "hpd/model/validate.h"

namespace hpd {

struct PprofOptions {
  // Label each sample with its thread ("thread" name, "thread_id" and "pid" numbers); samples of
  // the same stack in different threads then stay apart.
  bool thread_labels = true;
};

// The serialized perftools.profiles.Profile message, uncompressed.
//  - sample_type: samples/count (on-CPU samples), cpu/nanoseconds (their CPU deltas), then
//    wall/nanoseconds (on-CPU samples x interval + off-CPU time) when off-CPU samples exist, and
//    calls/count when the profile has call edges; default_sample_type is cpu.
//  - Identical (stack, thread) samples are merged into one Sample with summed values.
//  - One Location per native address, with one Line per inline level, innermost first.
//  - One Mapping per library: filename, build_id, and a range of its own (the Profile keeps no runtime
//    ranges: the libraries are laid end to end from 4 MiB, the main executable's first, as pprof
//    expects its program to be), so a location's address minus its mapping's memory_start is the
//    library-relative address; has_functions tells pprof not to resymbolize.
//  - A call edge becomes a sample [callee, caller] carrying only the calls value.
// Throws InvalidProfileError when the profile's indices are inconsistent.
std::string encode_pprof(const Profile& profile, const PprofOptions& options = {});

// Writes encode_pprof() gzip-compressed (as pprof expects on disk) to `path`, atomically.
void write_pprof_file(const Profile& profile, const std::string& path, const PprofOptions& options = {});

}  // namespace hpd
