// Typed perf_event records decoded from raw ring-buffer bytes, and callchain splitting.
#pragma once

#include <linux/perf_event.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace hpd {

// What the events were opened with; it decides the layout of samples and of the sample_id trailer.
struct RecordLayout {
  uint64_t sample_type = 0;
  uint64_t read_format = 0;
  bool sample_id_all = false;
  uint64_t sample_regs_user = 0;  // perf_event_attr.sample_regs_user: which registers REGS_USER holds
  // The events set attr.build_id. hpd's do not (mmap_watch.cpp): then an MMAP2 record flagged
  // PERF_RECORD_MISC_MMAP_BUILD_ID still holds device and inode numbers, the flag left on the kernel's
  // shared record by another session's event that asked for build-ids.
  bool build_ids = false;
};

// The sample_id trailer of non-sample records (sample_id_all), for the fields we request.
struct SampleId {
  int32_t pid = -1;
  int32_t tid = -1;
  uint64_t time = 0;
  uint64_t id = 0;
  uint32_t cpu = 0;
  bool present = false;
};

struct SampleRecord {
  uint16_t misc = 0;
  uint64_t ip = 0;
  int32_t pid = 0;
  int32_t tid = 0;
  uint64_t time = 0;
  uint64_t id = 0;
  uint32_t cpu = 0;
  uint64_t period = 0;
  std::optional<uint64_t> read_value;  // PERF_SAMPLE_READ (non-group read_format): the counter value
  std::vector<uint64_t> callchain;     // with PERF_CONTEXT_* markers, as the kernel wrote it
  // PERF_SAMPLE_REGS_USER: the ABI (PERF_SAMPLE_REGS_ABI_NONE for a kernel thread, then no values)
  // and one value per set bit of RecordLayout::sample_regs_user, lowest bit first.
  uint64_t regs_abi = PERF_SAMPLE_REGS_ABI_NONE;
  std::vector<uint64_t> user_regs;
  // PERF_SAMPLE_STACK_USER: the size the kernel reserved (0 when it copied nothing) and the bytes it
  // copied from the user sp on, cut to dyn_size. The span points into the decoded record's bytes and is
  // only valid while they are.
  uint64_t stack_size = 0;
  std::span<const uint8_t> user_stack;
};

// PERF_RECORD_MMAP2, and PERF_RECORD_MMAP (perf.data files) with prot PROT_READ | PROT_EXEC unless
// it is flagged as a mapping of data.
struct Mmap2Record {
  int32_t pid = 0;
  int32_t tid = 0;
  uint64_t address = 0;
  uint64_t length = 0;
  uint64_t page_offset = 0;
  std::string build_id;  // lower-case hex when the record carries one (PERF_RECORD_MISC_MMAP_BUILD_ID)
  uint32_t prot = 0;
  uint32_t flags = 0;
  std::string filename;
  SampleId sample_id;
};

struct CommRecord {
  int32_t pid = 0;
  int32_t tid = 0;
  std::string comm;
  bool exec = false;  // the name changed because of an exec
  SampleId sample_id;
};

// PERF_RECORD_FORK and PERF_RECORD_EXIT share a layout.
struct TaskRecord {
  bool fork = false;
  int32_t pid = 0;
  int32_t ppid = 0;
  int32_t tid = 0;
  int32_t ptid = 0;
  uint64_t time = 0;
  SampleId sample_id;
};

// PERF_RECORD_LOST (records a full ring dropped) and PERF_RECORD_LOST_SAMPLES (id 0).
struct LostRecord {
  uint64_t id = 0;
  uint64_t lost = 0;
  SampleId sample_id;
};

struct ThrottleRecord {
  bool unthrottle = false;
  uint64_t time = 0;
  uint64_t id = 0;
  uint64_t stream_id = 0;
  SampleId sample_id;
};

// PERF_RECORD_SWITCH (attr.context_switch on a per-task event): the task of sample_id came onto a CPU
// or left it; a switch-out the kernel flags PREEMPT left the task runnable (preempted, or yielding).
struct SwitchRecord {
  bool out = false;
  bool preempt = false;
  SampleId sample_id;
};

// PERF_RECORD_READ: with attr.inherit_stat, the final count of an inherited event, written when the
// task it counted for exits (after its EXIT record). sample_id.id is the id of the event it was
// inherited from; its CPU is that event's.
struct ReadRecord {
  int32_t pid = 0;
  int32_t tid = 0;
  uint64_t value = 0;  // the inherited event's own count (non-group read_format)
  SampleId sample_id;
};

// A record type we do not use; its type number, for statistics.
struct OtherRecord {
  uint32_t type = 0;
};

using PerfRecord = std::variant<OtherRecord, SampleRecord, Mmap2Record, CommRecord, TaskRecord, LostRecord,
                                ThrottleRecord, SwitchRecord, ReadRecord>;

// Decodes one record (header included). nullopt when the bytes are shorter than the layout demands.
// A SampleRecord's user_stack refers into `bytes`.
std::optional<PerfRecord> decode_record(std::span<const uint8_t> bytes, const RecordLayout& layout);

// The timestamp of a record: a sample's, a fork's or exit's own, else its sample_id's (0 when it has
// none: the events were opened without sample_id_all, or a record type we do not use).
uint64_t record_time(const PerfRecord& record);

// A callchain split at its context markers, each part leaf first, markers dropped.
struct SplitCallchain {
  std::vector<uint64_t> kernel;
  std::vector<uint64_t> user;
  size_t address_count = 0;  // addresses the kernel stored (kernel + user + any guest/hv ones)
};

// Frames before any marker are taken as kernel frames if the first one is a kernel address,
// otherwise as user frames. Hypervisor and guest frames are counted but not kept.
void split_callchain(std::span<const uint64_t> chain, SplitCallchain& out);

}  // namespace hpd
