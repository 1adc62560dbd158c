// The eBPF recording backend behind hpd::record().
#pragma once

#include <string>

#include "hpd/collect/recorder.h"
#include "perf/perf_privileges.h"

namespace hpd {

// The eBPF backend cannot run here (not built in, no kernel BTF, no privileges, programs refused).
// Thrown only before anything was started, so the caller may fall back to perf_event.
class BpfUnavailable : public RecordError {
 public:
  using RecordError::RecordError;
};

// The checks that need no loading: built in, kernel BTF, capabilities. "" when they pass.
std::string bpf_unavailable_reason(const PerfPrivileges& privileges);

// Opens and loads the programs (with the off-CPU one) and releases them again; "" when that works.
std::string bpf_load_check();

// Records with perf events driving a BPF program (inherited per-thread task-clock events for pid and
// command targets, per-CPU cpu-clock events for --all and --cgroup), and scheduler tracepoints.
// Expects options already checked by validate_record_options().
RecordResult record_with_bpf(const RecordOptions& options, const PerfPrivileges& privileges);

// Keeps the programs and maps of a recording like `options` (call graph resolved) loaded ahead, in a
// thread of hpd's own; a recording loaded alike takes them (prepare_recording in recorder.h).
void bpf_prepare(const RecordOptions& options, const PerfPrivileges& privileges);
// As bpf_prepare, but waits for the load: true when the set is loaded and waits for its recording.
bool bpf_prepare_now(const RecordOptions& options, const PerfPrivileges& privileges);
PreparedRecordingStatus bpf_prepared_status();
void bpf_release_prepared();

// Whether the options ask for something only the eBPF backend does.
bool needs_bpf(const RecordOptions& options);

// Whether off-CPU samples are taken for these options (with the eBPF backend).
bool off_cpu_enabled(const RecordOptions& options);

}  // namespace hpd
