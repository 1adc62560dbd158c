// Turns decoded perf records into a RawProfile: samples with stacks and CPU deltas, threads,
// processes and their mappings. Free of system calls except through the injected lookups,
// so it can be fed synthetic records in tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "hpd/model/raw_profile.h"
#include "hpd/unwind/unwinder.h"
#include "perf/perf_records.h"
#include "proc/build_id.h"
#include "proc/proc_maps.h"

namespace hpd {

struct ProfileBuilderConfig {
  // Samples carry the per-thread counter value (PERF_SAMPLE_READ with inherit, Linux >= 6.12);
  // otherwise the CPU delta of a sample is its period.
  bool read_values = false;
  // The callchain depth limit the events were opened with (sample_max_stack).
  uint32_t max_stack = 127;
  // Samples carry user registers (this sample_regs_user mask) and a copy of the user stack top.
  // dwarf: the user stack comes from unwinding them (the callchain holds only kernel frames); otherwise
  // they serve to put back the caller of a frameless leaf into the frame-pointer chain.
  bool dwarf = false;
  uint64_t regs_mask = 0;
};

// What the unwinder did, for RecordResult.
struct UnwindCounters {
  uint64_t unwound = 0;       // dwarf: samples unwound in user space
  uint64_t leaf_callers = 0;  // fp: callers of frameless leaves inserted
  uint64_t ns = 0;            // monotonic time inside the unwinder
  uint64_t sample_bytes = 0;  // bytes of the sample records handled
};

// What the live process tells about a mapping of a file or of the vDSO (BuildIdReader::for_mapping):
// its build-id, the file held open, the vDSO's image.
using BuildIdLookup =
    std::function<MappedModule(int32_t pid, uint64_t start, uint64_t end, const std::string& path)>;

class PerfProfileBuilder {
 public:
  using BuildIdLookup = hpd::BuildIdLookup;
  // Fills a newly seen process's exe and cmdline (and anything else) from the system.
  using ProcessDescriber = std::function<void(RawProcess&)>;

  PerfProfileBuilder(RawProfile& profile, ProfileBuilderConfig config, BuildIdLookup build_ids = {},
                     ProcessDescriber describe = {});

  // Adds the executable mappings of a maps file seen at `time_ns` (0 = mapped before recording began).
  void add_maps(int32_t pid, const std::vector<MapsEntry>& maps, uint64_t time_ns);

  // A thread attached directly after its process was already attached may also have inherited
  // events from its creator; only samples from its own events (these ids) are kept.
  void set_own_event_ids(int32_t tid, std::vector<uint64_t> ids);

  // The unwinder for samples that carry registers and a stack copy (owned by the caller, which keeps it
  // alive as long as the builder). Without one, such samples keep the kernel's chain as it is.
  void set_unwinder(Unwinder* unwinder) { unwinder_ = unwinder; }

  void on_record(const PerfRecord& record);
  // on_record() plus the size of the record, for the bytes-per-sample statistics.
  void on_record(const PerfRecord& record, size_t bytes);

  [[nodiscard]] uint64_t samples() const { return samples_; }
  [[nodiscard]] uint64_t duplicate_samples() const { return duplicates_; }
  [[nodiscard]] uint64_t undecodable_records() const { return undecodable_; }
  void count_undecodable() { ++undecodable_; }
  [[nodiscard]] const UnwindCounters& unwind_counters() const { return unwind_; }

 private:
  void on_sample(const SampleRecord& s);
  void on_mmap2(const Mmap2Record& r);
  void on_comm(const CommRecord& r);
  void on_task(const TaskRecord& r);
  RawProcess& ensure_process(int32_t pid, uint64_t time_ns);
  RawThread& ensure_thread(int32_t pid, int32_t tid, uint64_t time_ns);
  uint64_t cpu_delta(const SampleRecord& s);
  // Replaces or completes split_.user from the sample's registers and stack copy; returns how the user
  // stack ended (kUnknown: not handled here, judge the kernel's chain).
  StackEnd apply_user_stack(const SampleRecord& s);
  // Ends the mappings of an exec's old image once `s` shows the new image running: taken in user
  // mode, or with its user address in a mapping made since the exec began (see on_comm).
  void end_exec_window(const SampleRecord& s);
  uint64_t last_exec_of(int32_t pid) const;  // start of the process's last exec, 0 = none seen

  RawProfile& profile_;
  ProfileBuilderConfig config_;
  BuildIdLookup build_ids_;
  ProcessDescriber describe_;
  SplitCallchain split_;
  Unwinder* unwinder_ = nullptr;
  std::vector<uint64_t> unwound_;
  UnwindCounters unwind_;
  // Last counter value per thread and CPU: each (thread, CPU) pair has its own inherited event.
  std::unordered_map<int32_t, std::vector<uint64_t>> last_value_;
  std::unordered_map<int32_t, std::unordered_set<uint64_t>> own_ids_;
  // Processes whose exec began (its COMM record's time) with the old image's mappings still open.
  std::unordered_map<int32_t, uint64_t> exec_window_;
  std::unordered_map<int32_t, uint64_t> last_exec_;  // start of each process's last exec
  uint64_t samples_ = 0;
  uint64_t duplicates_ = 0;
  uint64_t undecodable_ = 0;
};

// Marks every mapping the process had before an exec that began at `exec_ns` as ended at
// `ended_ns` (by default the exec's start).
void end_mappings_at_exec(RawProcess& process, uint64_t exec_ns, uint64_t ended_ns = 0);

// "[anon]" for anonymous executable memory ("//anon" in MMAP2 records, "" in maps files).
std::string module_path_for(const std::string& path);

// Adds `mapping` unless the process already has it: /proc/PID/maps and MMAP2 records often describe
// the same mapping. A mapping an exec ended does not count: the new image may map the same file at
// the same place again (ASLR off, or a non-PIE program executing itself). Neither does one made
// before `image_since_ns` (the start of the process's last exec), which the old image keeps until
// execve has finished.
void add_mapping_once(RawProcess& process, const RawMapping& mapping, uint64_t image_since_ns = 0);

// Adds an executable mapping of `path` (as a maps file or an MMAP2 record names it) to `process`,
// its module interned with `build_id`, or, when that is empty and the mapping is of a file, with the
// file's own from `build_ids` (when given). A new module also gets what `build_ids` found: the
// file held open, or the vDSO's image (then interned by the image's build-id).
void add_module_mapping(RawProfile& profile, RawProcess& process, RawMapping mapping, const std::string& path,
                        std::string build_id, const BuildIdLookup& build_ids, uint64_t image_since_ns = 0);

}  // namespace hpd
