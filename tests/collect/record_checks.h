// Assertions and helpers shared by the recordings of the spinner fixture through either backend.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hpd/collect/recorder.h"
#include "subprocess.h"

namespace hpd {

// The spinner fixture (tests/collect/spinner.c) as built.
const std::string& spinner_path();

// Open file descriptors of this process.
int count_open_fds();
// Descriptors a recording's result holds on purpose: one per module file held open (RawModule::file)
// so that it is symbolized from the file the process mapped. They close with the result.
int held_module_files(const RawProfile& profile);

// User + system time of a rusage, in ns.
uint64_t cpu_ns(const rusage& r);

// The file-offset range of a function, from the ELF symbol table and the PT_LOAD that holds it.
struct FileRange {
  uint64_t begin = 0;
  uint64_t end = 0;
};
std::optional<FileRange> function_file_range(const std::string& path, const std::string& name);

// What the recording's metadata must say.
struct SpinnerExpectations {
  std::string backend = "perf";
  std::string event = "task-clock";
  CpuTimeSource cpu_time_source = CpuTimeSource::kThreadCounter;
};

// The spinner's recording: sample count and CPU deltas against the real CPU time, the late thread,
// its mappings and build-id, samples in spin_work, and the recording info. `stolen_ns`: the
// hypervisor's steal over the recording (test::host_steal_ns), which the sampling timer's counter
// counts as the running thread's and its CPU clock does not: the deltas may be ahead by that much.
void expect_spinner_profile(const RecordResult& result, int32_t pid, uint64_t real_cpu_ns,
                            const SpinnerExpectations& expected = {}, double stolen_ns = 0);

// Starts the spinner with its stdin a pipe (send("g") is the go of --wait-stdin), so that all of its
// work can happen while it is recorded.
test::Background spawn_held_spinner(const std::vector<std::string>& args);

}  // namespace hpd
