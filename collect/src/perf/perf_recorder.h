// The perf_event recording backend behind hpd::record().
#pragma once

#include "hpd/collect/recorder.h"
#include "perf/perf_privileges.h"

namespace hpd {

// Records with per-(thread, CPU) inherited software events, one ring buffer per CPU.
// Expects options already checked by validate_record_options().
RecordResult record_with_perf(const RecordOptions& options, const PerfPrivileges& privileges);

// The perf_event_open errno turned into an actionable message.
std::string perf_open_error_message(int err, int32_t pid, int32_t tid, const PerfPrivileges& privileges);

}  // namespace hpd
