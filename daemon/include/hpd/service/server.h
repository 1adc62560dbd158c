// The hpd service: the socket server, its recording sessions, configuration reloads, systemd.
#pragma once

#include <cstdint>
#include <string>

#include "hpd/model/raw_profile.h"

namespace hpd::service {

struct DaemonOptions {
  std::string config_path;       // read at start and on SIGHUP
  bool config_required = false;  // given with --config: a missing file is an error, not the defaults
  std::string socket_path;       // --socket: overrides the configuration's
};

// Runs hpd in the foreground until SIGTERM or SIGINT: every session is ended and its client gets its
// profile first. Returns the process exit code (0 after a clean stop, 1 when it cannot start).
int run_daemon(const DaemonOptions& options);

// An estimate of the heap memory a RawProfile holds (samples, stacks, processes, mappings, threads),
// for max_session_memory_mb. `released_come_back`: the samples released so far (RawProfile::
// sample_offset) are read back at the end (a Firefox output spills them to a temporary capture), so
// they count as held; a capture's released samples are only in the file.
uint64_t estimate_profile_bytes(const RawProfile& profile, bool released_come_back);

}  // namespace hpd::service
