// Writes a Profile as an OTLP profiles export request: the OpenTelemetry profiles signal, its
// development version (opentelemetry.proto.collector.profiles.v1development), as the OpenTelemetry
// Collector's OTLP receiver takes it over HTTP (POST /v1development/profiles) or gRPC.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hpd/model/profile.h"
#include "hpd/model/validate.h"

namespace hpd {

struct OtlpProfilesOptions {
  // The instrumentation scope's name and version on every profile.
  std::string scope_name = "hpd";
  std::string scope_version;
  // Extra resource attributes (key, value) on every process, after hpd's own (say, a fleet's labels).
  std::vector<std::pair<std::string, std::string>> resource_labels;
};

// The serialized ExportProfilesServiceRequest of the profiles/v1development protocol the
// OpenTelemetry Collector v0.161 (pdata v1.67) reads:
//  - one ResourceProfiles per process, its Resource's attributes: host.name (the recording's host),
//    process.pid, process.executable.name, process.executable.path when known, from the process's
//    cgroup (Thread::process_cgroup) process.linux.cgroup, systemd.unit and container.id when it
//    names them (cgroup_owner, hpd/base/proc_files.h), then options.resource_labels; one ScopeProfiles
//    (options.scope_name and version);
//  - in it one Profile per sample type, as the protocol has one sample type per profile:
//    samples/count and cpu/nanoseconds for the samples taken on the CPU, and, when the recording has
//    them, off_cpu_blocked/nanoseconds (blocked) and off_cpu_waiting/nanoseconds (runnable, waiting
//    for a CPU) for the intervals off the CPU; each with the recording's start, duration and period
//    (period_type cpu/nanoseconds, the sampling interval), and a random profile id;
//  - one Sample per (stack, thread) and sample type, its one value the sum, with the attributes
//    thread.id and thread.name;
//  - the shared ProfilesDictionary: index 0 of every table is the empty entry the protocol asks
//    for; one Stack per distinct stack, leaf first; one Location per native address, with one Line
//    per inline level, innermost first (function, line, column); Functions with their names and
//    source files; one Mapping per library with its file name and, when known, its GNU build-id as
//    the attribute process.executable.build_id.gnu. A Location's address is the library-relative
//    address the Profile keeps (ELF vaddr minus the image base), its Mapping spanning [0, extent).
// Call edges, call latencies and MIP counts are not sampled data and are not exported here.
// Throws InvalidProfileError when the profile's indices are inconsistent.
std::string encode_otlp_profiles(const Profile& profile, const OtlpProfilesOptions& options = {});

}  // namespace hpd
