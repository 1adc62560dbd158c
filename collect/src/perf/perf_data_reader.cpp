// perf.data files (hpd/collect/perf_data.h): the header, the event attributes, the feature sections
// hpd uses (BUILD_ID, HOSTNAME, OSRELEASE, VERSION, NRCPUS, CMDLINE, EVENT_DESC) and the data
// section's records. The kernel's records are decoded by decode_record (perf_records.cpp) and turned
// into events by the perf backend's PerfEventDecoder, for the one RawProfileBuilder: a perf.data file
// is read as a ring that was written to disk. The layout is perf's
// (tools/perf/Documentation/perf.data-file-format.txt); every read is bounds-checked.
#include "hpd/collect/perf_data.h"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include "bpf/sched_frames.h"
#include "hpd/base/hex.h"
#include "hpd/base/unique_fd.h"
#include "hpd/symbolizer/symbolizer.h"
#include "hpd/unwind/unwinder.h"
#include "perf/perf_event_decoder.h"
#include "perf/perf_records.h"
#include "proc/build_id.h"
#include "raw_profile_builder.h"

namespace hpd {

namespace {

constexpr uint64_t kMagic = 0x32454c4946524550ULL;         // "PERFILE2" as a little-endian u64
constexpr uint64_t kMagicSwapped = 0x50455246494c4532ULL;  // written on a big-endian machine
constexpr uint64_t kFileHeaderSize = 104;                  // perf_file_header
constexpr uint64_t kPipeHeaderSize = 16;                   // perf_pipe_file_header
constexpr size_t kFeatureBits = 256;

// Feature sections (perf's HEADER_* numbers).
enum Feature : uint32_t {
  kFeatBuildId = 2,
  kFeatHostname = 3,
  kFeatOsRelease = 4,
  kFeatVersion = 5,
  kFeatNrCpus = 7,
  kFeatCmdline = 11,
  kFeatEventDesc = 12,
  kFeatCompressed = 27,
};

// Records perf itself writes (numbers from 64 on; PERF_RECORD_USER_TYPE_START).
enum UserRecord : uint32_t {
  kHeaderAttr = 64,
  kHeaderEventType = 65,
  kHeaderTracingData = 66,
  kHeaderBuildId = 67,
  kFinishedRound = 68,
  kAuxtrace = 71,
  kHeaderFeature = 80,
  kCompressed = 81,
};

constexpr uint16_t kBuildIdSizeValid = 1u << 15;  // PERF_RECORD_MISC_BUILD_ID_SIZE

template <typename T>
bool read_at(std::span<const uint8_t> bytes, uint64_t offset, T& out) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) return false;
  std::memcpy(&out, bytes.data() + offset, sizeof(T));
  return true;
}

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

// A NUL-terminated string within [offset, offset + room).
std::string string_at(std::span<const uint8_t> bytes, uint64_t offset, uint64_t room) {
  if (offset >= bytes.size()) return {};
  room = std::min<uint64_t>(room, bytes.size() - offset);
  const auto* begin = reinterpret_cast<const char*>(bytes.data() + offset);
  const auto* nul = static_cast<const char*>(std::memchr(begin, '\0', room));
  return std::string(begin, nul != nullptr ? static_cast<size_t>(nul - begin) : room);
}

struct Attr {
  perf_event_attr attr{};
  RecordLayout layout;
  std::vector<uint64_t> ids;
  std::string name;  // from EVENT_DESC, else made from type and config
  uint64_t samples = 0;
};

std::string software_name(uint64_t config) {
  switch (config) {
    case PERF_COUNT_SW_CPU_CLOCK: return "cpu-clock";
    case PERF_COUNT_SW_TASK_CLOCK: return "task-clock";
    case PERF_COUNT_SW_PAGE_FAULTS: return "page-faults";
    case PERF_COUNT_SW_CONTEXT_SWITCHES: return "context-switches";
    case PERF_COUNT_SW_CPU_MIGRATIONS: return "cpu-migrations";
    case PERF_COUNT_SW_PAGE_FAULTS_MIN: return "minor-faults";
    case PERF_COUNT_SW_PAGE_FAULTS_MAJ: return "major-faults";
    case PERF_COUNT_SW_DUMMY: return "dummy";
    default: return "software event " + std::to_string(config);
  }
}

std::string default_name(const perf_event_attr& a) {
  switch (a.type) {
    case PERF_TYPE_SOFTWARE: return software_name(a.config);
    case PERF_TYPE_HARDWARE: return "hardware event " + std::to_string(a.config);
    case PERF_TYPE_TRACEPOINT: return "tracepoint " + std::to_string(a.config);
    case PERF_TYPE_HW_CACHE: return "cache event " + hex64(a.config);
    case PERF_TYPE_BREAKPOINT: return "breakpoint";
    default: return "event type " + std::to_string(a.type) + " config " + hex64(a.config);
  }
}

// What kind of event it is, for the message of a skipped one.
std::string kind_of(const perf_event_attr& a) {
  switch (a.type) {
    case PERF_TYPE_SOFTWARE: return "a software event that does not count CPU time";
    case PERF_TYPE_HARDWARE:
    case PERF_TYPE_HW_CACHE: return "a hardware event";
    case PERF_TYPE_TRACEPOINT: return "a tracepoint";
    case PERF_TYPE_BREAKPOINT: return "a breakpoint";
    default: return "a PMU event";
  }
}

// The events whose sample period is CPU time in nanoseconds: hpd's own (cpu-clock, task-clock).
bool counts_cpu_time(const perf_event_attr& a) {
  return a.type == PERF_TYPE_SOFTWARE &&
         (a.config == PERF_COUNT_SW_CPU_CLOCK || a.config == PERF_COUNT_SW_TASK_CLOCK);
}

const char* record_name(uint32_t type) {
  switch (type) {
    case PERF_RECORD_READ: return "READ";
    case PERF_RECORD_AUX: return "AUX";
    case PERF_RECORD_ITRACE_START: return "ITRACE_START";
    case PERF_RECORD_SWITCH: return "SWITCH";
    case PERF_RECORD_SWITCH_CPU_WIDE: return "SWITCH_CPU_WIDE";
    case PERF_RECORD_NAMESPACES: return "NAMESPACES";
    case PERF_RECORD_KSYMBOL: return "KSYMBOL";
    case PERF_RECORD_BPF_EVENT: return "BPF_EVENT";
    case PERF_RECORD_CGROUP: return "CGROUP";
    case PERF_RECORD_TEXT_POKE: return "TEXT_POKE";
    case PERF_RECORD_AUX_OUTPUT_HW_ID: return "AUX_OUTPUT_HW_ID";
    case kHeaderTracingData: return "TRACING_DATA";
    case kAuxtrace: return "AUXTRACE";
    default: return nullptr;
  }
}

// A kernel record of the data section, in the order it is fed.
struct Slot {
  uint64_t time = 0;
  uint64_t offset = 0;
};

class PerfDataReader {
 public:
  PerfDataReader(std::span<const uint8_t> bytes, std::string name, std::string kernel_build_id,
                 uint64_t kernel_text)
      : bytes_(bytes),
        name_(std::move(name)),
        running_kernel_build_id_(std::move(kernel_build_id)),
        running_kernel_text_(kernel_text) {}

  PerfDataContents read();

 private:
  [[noreturn]] void fail(const std::string& why) const { throw PerfDataError(name_ + ": " + why); }
  void read_file_header();
  void read_attr(std::span<const uint8_t> attr_bytes, std::span<const uint8_t> id_bytes);
  void read_feature(uint32_t feature, std::span<const uint8_t> data);
  void read_build_ids(std::span<const uint8_t> data);
  std::string feature_string(std::span<const uint8_t> data, uint64_t& pos) const;
  void walk_data();
  void check_layouts();
  Attr* attr_of(uint64_t id);
  // The layout of the event that wrote `record`: the one all events share, or (events of different
  // layouts, which then all carry PERF_SAMPLE_IDENTIFIER) the one its identifier names.
  const RecordLayout* layout_for(std::span<const uint8_t> record);
  void feed();
  void describe();

  std::span<const uint8_t> bytes_;
  std::string name_;
  std::string running_kernel_build_id_;
  uint64_t running_kernel_text_ = 0;

  bool pipe_ = false;
  uint64_t data_begin_ = 0, data_end_ = 0;
  std::vector<Attr> attrs_;
  std::unordered_map<uint64_t, size_t> attr_by_id_;
  RecordLayout layout_;
  bool one_layout_ = true;
  bool one_trailer_ = true;  // every event writes the same sample_id trailer (non-sample records)
  std::unordered_map<std::string, std::string> build_ids_;  // by file name, as perf wrote them
  std::string hostname_, os_release_, perf_version_;
  std::vector<std::string> cmdline_;
  uint32_t cpus_online_ = 0;
  bool compressed_ = false;
  std::vector<Slot> slots_;
  std::map<std::string, uint64_t> unread_;  // records not read, by name
  uint64_t kernel_text_ = 0;                // _text as the file's kernel MMAP record says
  uint64_t switch_records_ = 0;
  uint64_t lost_samples_ = 0, lost_records_ = 0, throttles_ = 0;
  uint64_t samples_read_ = 0, samples_with_kernel_ = 0;
  uint64_t first_time_ = 0, last_time_ = 0;
  PerfDataContents out_;
};

void PerfDataReader::read_file_header() {
  uint64_t magic = 0, size = 0;
  if (bytes_.empty()) fail("the file is empty");
  if (!read_at(bytes_, 0, magic)) fail("not a perf.data file: too short for perf's header");
  if (magic == kMagicSwapped)
    fail("a perf.data file of the other byte order (recorded on a big-endian machine): not read");
  if (std::memcmp(&magic, "PERFFILE", 8) == 0)
    fail("a perf.data file of perf's first format (before 2011): not read");
  if (magic != kMagic) fail("not a perf.data file (it does not start with PERFILE2)");
  if (!read_at(bytes_, 8, size)) fail("truncated: the header ends after its magic");
  if (size == kPipeHeaderSize) {
    // `perf record -o -`: attributes, build-ids and features come as records in the stream.
    pipe_ = true;
    data_begin_ = kPipeHeaderSize;
    data_end_ = bytes_.size();
    return;
  }
  if (size < kFileHeaderSize) fail("not a perf.data file: its header size is " + std::to_string(size));
  if (bytes_.size() < kFileHeaderSize) fail("truncated: the file ends inside perf's header");
  uint64_t attr_size = 0, attrs_offset = 0, attrs_size = 0, data_offset = 0, data_size = 0;
  uint64_t features[kFeatureBits / 64] = {};
  read_at(bytes_, 16, attr_size);
  read_at(bytes_, 24, attrs_offset);
  read_at(bytes_, 32, attrs_size);
  read_at(bytes_, 40, data_offset);
  read_at(bytes_, 48, data_size);
  read_at(bytes_, 72, features);
  const uint64_t n = bytes_.size();
  if (attr_size <= 16 || attr_size > 4096)
    fail("corrupt perf.data header: an event attribute of " + std::to_string(attr_size) + " bytes");
  if (attrs_offset > n || attrs_size > n - attrs_offset)
    fail("truncated: the event attributes end at byte " + std::to_string(attrs_offset + attrs_size) + " of " +
         std::to_string(n));
  if (data_offset > n || data_size > n - data_offset)
    fail("truncated: the data section ends at byte " + std::to_string(data_offset + data_size) + " of " +
         std::to_string(n) + " (was the copy cut short, or perf record killed?)");
  if (data_size == 0)
    fail("the header says the data section is empty: perf record did not finish writing this file (killed?)");
  for (uint64_t at = attrs_offset; at + attr_size <= attrs_offset + attrs_size; at += attr_size) {
    uint64_t ids_offset = 0, ids_size = 0;
    read_at(bytes_, at + attr_size - 16, ids_offset);
    read_at(bytes_, at + attr_size - 8, ids_size);
    if (ids_offset > n || ids_size > n - ids_offset)
      fail("truncated: an event's ids lie past the end of the file");
    read_attr(bytes_.subspan(at, attr_size - 16), bytes_.subspan(ids_offset, ids_size));
  }
  data_begin_ = data_offset;
  data_end_ = data_offset + data_size;
  // The feature sections: one perf_file_section per feature bit set, after the data.
  uint64_t table = data_end_;
  std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>> sections;
  for (uint32_t bit = 0; bit < kFeatureBits; ++bit) {
    if (((features[bit / 64] >> (bit % 64)) & 1) == 0) continue;
    uint64_t offset = 0, size_bytes = 0;
    if (!read_at(bytes_, table, offset) || !read_at(bytes_, table + 8, size_bytes))
      fail("truncated: the file ends in its table of feature sections (byte " + std::to_string(n) + ")");
    table += 16;
    if (offset > n || size_bytes > n - offset)
      fail("truncated: feature section " + std::to_string(bit) + " lies past the end of the file");
    sections.push_back({bit, {offset, size_bytes}});
  }
  for (const auto& [bit, section] : sections)
    read_feature(bit, bytes_.subspan(section.first, section.second));
}

void PerfDataReader::read_attr(std::span<const uint8_t> attr_bytes, std::span<const uint8_t> id_bytes) {
  Attr a;
  std::memcpy(&a.attr, attr_bytes.data(), std::min(attr_bytes.size(), sizeof a.attr));
  for (size_t i = 0; i + 8 <= id_bytes.size(); i += 8) {
    uint64_t id = 0;
    std::memcpy(&id, id_bytes.data() + i, 8);
    a.ids.push_back(id);
    attr_by_id_.emplace(id, attrs_.size());
  }
  a.name = default_name(a.attr);
  attrs_.push_back(std::move(a));
}

std::string PerfDataReader::feature_string(std::span<const uint8_t> data, uint64_t& pos) const {
  uint32_t len = 0;
  if (!read_at(data, pos, len) || len > data.size() - pos - 4)
    fail("corrupt feature section: a string runs past it");
  std::string s = string_at(data, pos + 4, len);
  pos += 4 + uint64_t{len};
  return s;
}

void PerfDataReader::read_build_ids(std::span<const uint8_t> data) {
  // build_id_event records: header, pid, 24 bytes of build-id (its size at byte 20 when flagged), name.
  for (uint64_t pos = 0; pos + sizeof(perf_event_header) <= data.size();) {
    perf_event_header h{};
    read_at(data, pos, h);
    if (h.size < sizeof h || h.size > data.size() - pos)
      fail("corrupt BUILD_ID section at its byte " + std::to_string(pos));
    const uint64_t body = pos + sizeof h;
    uint8_t id[24] = {};
    if (h.size >= sizeof h + 4 + sizeof id && read_at(data, body + 4, id)) {
      const size_t len = (h.misc & kBuildIdSizeValid) != 0 ? std::min<size_t>(id[20], 20) : 20;
      const std::string name = string_at(data, body + 4 + sizeof id, h.size - sizeof h - 4 - sizeof id);
      const uint16_t mode = h.misc & PERF_RECORD_MISC_CPUMODE_MASK;
      // Guests' files are another machine's.
      if (!name.empty() && (mode == PERF_RECORD_MISC_KERNEL || mode == PERF_RECORD_MISC_USER))
        build_ids_[name] = to_hex({id, len});
    }
    pos += h.size;
  }
}

void PerfDataReader::read_feature(uint32_t feature, std::span<const uint8_t> data) {
  uint64_t pos = 0;
  switch (feature) {
    case kFeatBuildId: read_build_ids(data); break;
    case kFeatHostname: hostname_ = feature_string(data, pos); break;
    case kFeatOsRelease: os_release_ = feature_string(data, pos); break;
    case kFeatVersion: perf_version_ = feature_string(data, pos); break;
    case kFeatNrCpus: {
      uint32_t available = 0;
      read_at(data, 0, available);
      read_at(data, 4, cpus_online_);
      break;
    }
    case kFeatCmdline: {
      uint32_t count = 0;
      if (!read_at(data, 0, count)) fail("corrupt CMDLINE section");
      pos = 4;
      for (uint32_t i = 0; i < count && i < 4096; ++i) cmdline_.push_back(feature_string(data, pos));
      break;
    }
    case kFeatEventDesc: {
      // u32 events, u32 attr size; per event: the attribute, u32 ids, its name, the ids.
      uint32_t count = 0, attr_size = 0;
      if (!read_at(data, 0, count) || !read_at(data, 4, attr_size)) fail("corrupt EVENT_DESC section");
      pos = 8;
      for (uint32_t i = 0; i < count; ++i) {
        uint32_t ids = 0;
        if (attr_size > data.size() - std::min<uint64_t>(pos, data.size()) ||
            !read_at(data, pos + attr_size, ids))
          fail("corrupt EVENT_DESC section");
        pos += attr_size + 4;
        std::string name = feature_string(data, pos);
        if (uint64_t{ids} * 8 > data.size() - pos) fail("corrupt EVENT_DESC section");
        pos += uint64_t{ids} * 8;
        if (i < attrs_.size() && !name.empty()) attrs_[i].name = std::move(name);
      }
      break;
    }
    case kFeatCompressed: compressed_ = true; break;
    default: break;
  }
}

void PerfDataReader::walk_data() {
  uint64_t pos = data_begin_;
  uint64_t index = 0;
  while (pos < data_end_) {
    perf_event_header h{};
    if (!read_at(bytes_, pos, h) || pos + sizeof h > data_end_)
      fail("truncated: the file ends inside the header of record " + std::to_string(index) + " (byte " +
           std::to_string(pos) + ")");
    if (h.size < sizeof h)
      fail("corrupt record " + std::to_string(index) + " at byte " + std::to_string(pos) + ": its size is " +
           std::to_string(h.size));
    if (h.size > data_end_ - pos)
      fail("truncated: record " + std::to_string(index) + " at byte " + std::to_string(pos) +
           " runs past the end of " + (pipe_ ? "the file" : "the data section"));
    const auto record = bytes_.subspan(pos, h.size);
    uint64_t extra = 0;  // bytes that follow a record outside its size
    if (h.type < kHeaderAttr) {
      slots_.push_back(Slot{0, pos});
    } else {
      switch (h.type) {
        case kHeaderAttr: {
          if (!pipe_) break;
          uint32_t attr_size = 0;
          read_at(record, sizeof h + 4, attr_size);
          if (attr_size == 0) attr_size = PERF_ATTR_SIZE_VER0;
          if (attr_size > record.size() - sizeof h)
            fail("corrupt ATTR record at byte " + std::to_string(pos));
          read_attr(record.subspan(sizeof h, attr_size), record.subspan(sizeof h + attr_size));
          break;
        }
        case kHeaderBuildId:
          if (pipe_) read_build_ids(record);
          break;
        case kHeaderFeature: {
          uint64_t feature = 0;
          if (pipe_ && read_at(record, sizeof h, feature) && feature < kFeatureBits)
            read_feature(static_cast<uint32_t>(feature), record.subspan(sizeof h + 8));
          break;
        }
        case kHeaderTracingData: {
          uint32_t size = 0;
          read_at(record, sizeof h, size);
          extra = size;
          ++unread_[record_name(h.type)];
          break;
        }
        case kAuxtrace: {
          read_at(record, sizeof h, extra);
          ++unread_[record_name(h.type)];
          break;
        }
        case kCompressed: compressed_ = true; break;
        default: break;  // FINISHED_ROUND (records are sorted by time anyway), TIME_CONV, ...
      }
    }
    if (extra > data_end_ - pos - h.size)
      fail("truncated: record " + std::to_string(index) + " at byte " + std::to_string(pos) +
           " runs past the end");
    pos += h.size + extra;
    ++index;
  }
}

Attr* PerfDataReader::attr_of(uint64_t id) {
  if (attrs_.size() == 1) return &attrs_.front();
  auto it = attr_by_id_.find(id);
  return it == attr_by_id_.end() ? nullptr : &attrs_[it->second];
}

void PerfDataReader::check_layouts() {
  if (compressed_)
    fail(
        "its records are compressed (perf record -z), which hpd does not read: write an uncompressed copy "
        "with "
        "`perf inject -i FILE -o COPY`, or record without -z");
  if (attrs_.empty())
    fail(pipe_ ? "no event attribute record before the end of the stream" : "the file lists no event");
  const perf_event_attr& first = attrs_.front().attr;
  bool identified = true;
  for (Attr& a : attrs_) {
    a.layout = RecordLayout{a.attr.sample_type, a.attr.read_format, a.attr.sample_id_all != 0,
                            a.attr.sample_regs_user, a.attr.build_id != 0};
    identified = identified && (a.attr.sample_type & PERF_SAMPLE_IDENTIFIER) != 0;
    constexpr uint64_t kTrailerBits = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ID |
                                      PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER;
    if ((a.attr.sample_type & kTrailerBits) != (first.sample_type & kTrailerBits) ||
        a.attr.sample_id_all != first.sample_id_all)
      one_trailer_ = false;
    if (a.attr.sample_type != first.sample_type || a.attr.read_format != first.read_format ||
        a.attr.sample_id_all != first.sample_id_all || a.attr.sample_regs_user != first.sample_regs_user)
      one_layout_ = false;
  }
  if (!one_layout_ && !identified)
    fail(
        "its events write samples of different layouts without saying which event wrote each "
        "(PERF_SAMPLE_IDENTIFIER), which hpd does not read");
  if (attrs_.size() > 1 && (first.sample_type & (PERF_SAMPLE_ID | PERF_SAMPLE_IDENTIFIER)) == 0)
    fail("its samples do not say which of its " + std::to_string(attrs_.size()) + " events they are of");
  for (const Attr& a : attrs_) {
    if (counts_cpu_time(a.attr) && (a.attr.sample_type & PERF_SAMPLE_BRANCH_STACK) != 0)
      fail("its samples carry branch stacks (perf record -b, --call-graph lbr), which hpd does not read");
  }
  layout_ = attrs_.front().layout;
}

const RecordLayout* PerfDataReader::layout_for(std::span<const uint8_t> record) {
  if (one_layout_) return &layout_;
  perf_event_header h{};
  read_at(record, 0, h);
  // The trailer of other records, when every event writes the same one.
  if (h.type != PERF_RECORD_SAMPLE && one_trailer_) return &layout_;
  uint64_t id = 0;
  // PERF_SAMPLE_IDENTIFIER: a sample's first word, the last of another record's sample_id trailer.
  const bool found = h.type == PERF_RECORD_SAMPLE
                         ? read_at(record, sizeof h, id)
                         : h.size >= sizeof h + 8 && read_at(record, h.size - 8u, id);
  // Id 0 is perf's: the records it synthesizes carry a zero trailer, in the first event's layout.
  const Attr* attr = !found ? nullptr : id == 0 ? &attrs_.front() : attr_of(id);
  if (attr == nullptr) return nullptr;
  if (h.type != PERF_RECORD_SAMPLE && !attr->layout.sample_id_all) return nullptr;
  return &attr->layout;
}

void PerfDataReader::feed() {
  // The records of the per-CPU rings come in rounds, not in time order: sorted by time, as perf report
  // does, with the records perf synthesized for what existed before (time 0) first.
  for (Slot& slot : slots_) {
    const auto bytes = bytes_.subspan(slot.offset);
    const RecordLayout* layout = layout_for(bytes);
    if (layout == nullptr) continue;  // counted below
    auto record = decode_record(bytes, *layout);
    perf_event_header h{};
    read_at(bytes_, slot.offset, h);
    if (!record)
      fail("record at byte " + std::to_string(slot.offset) + " (type " + std::to_string(h.type) +
           ") is shorter than its event's layout: the file is corrupt");
    slot.time = record_time(*record);
  }
  std::stable_sort(slots_.begin(), slots_.end(),
                   [](const Slot& a, const Slot& b) { return a.time < b.time; });

  RawProfile& profile = out_.profile;
  // The decoder's configuration is that of the events it decodes samples of: those counting CPU time.
  const auto main_attr =
      std::find_if(attrs_.begin(), attrs_.end(), [](const Attr& a) { return counts_cpu_time(a.attr); });
  const perf_event_attr& first = main_attr != attrs_.end() ? main_attr->attr : attrs_.front().attr;
  const bool dwarf = (first.sample_type & PERF_SAMPLE_REGS_USER) != 0 &&
                     (first.sample_type & PERF_SAMPLE_STACK_USER) != 0 && first.sample_stack_user != 0;
  const uint32_t max_stack = first.sample_max_stack != 0 ? first.sample_max_stack : 127;
  // perf's samples carry their period: for cpu-clock and task-clock, the CPU time in ns since the last.
  PerfEventDecoder decoder(PerfDecoderConfig{false, max_stack, dwarf, first.sample_regs_user, 0});
  for (const Slot& slot : slots_) {
    if (slot.time != 0) {
      first_time_ = first_time_ == 0 ? slot.time : std::min(first_time_, slot.time);
      last_time_ = std::max(last_time_, slot.time);
    }
  }
  profile.info.start_mono_ns = first_time_;
  profile.info.end_mono_ns = last_time_;

  // Modules are matched by the file's build-ids; nothing is read from the live system.
  SystemLookups lookups;
  lookups.build_ids = [this](int32_t, uint64_t start, uint64_t end, const std::string& path) {
    MappedModule m;
    auto it = build_ids_.find(path);
    if (it != build_ids_.end()) m.build_id = it->second;
    // The vDSO has no file: this process's own image is the recorded one if their build-ids agree.
    // Without a build-id (a pipe-mode file), the kernel's one image of this ABI, by its size.
    if (path == "[vdso]" &&
        (m.build_id.empty() ? own_vdso().size() == end - start : build_id_of_image(own_vdso()) == m.build_id))
      m.image = own_vdso();
    return m;
  };
  RawProfileBuilder builder(profile, BuilderConfig{TrackerConfig{first_time_}, dwarf}, std::move(lookups));
  Unwinder unwinder;
  builder.set_unwinder(&unwinder);
  const EventSink sink = [&builder](const Event& e) { builder.on_event(e); };

  std::shared_ptr<SchedulerFrames> entries;
  const auto kernel_id = build_ids_.find("[kernel.kallsyms]");
  const std::string file_kernel_id = kernel_id != build_ids_.end() ? kernel_id->second : "";

  for (const Slot& slot : slots_) {
    const auto bytes = bytes_.subspan(slot.offset);
    perf_event_header h{};
    read_at(bytes_, slot.offset, h);
    const RecordLayout* layout = layout_for(bytes);
    if (layout == nullptr) {
      ++unread_[h.type == PERF_RECORD_SAMPLE ? "SAMPLE of an unknown event" : "records of an unknown event"];
      continue;
    }
    auto record = decode_record(bytes, *layout);
    if (auto* s = std::get_if<SampleRecord>(&*record)) {
      Attr* attr = attr_of(s->id);
      if (attr == nullptr) {
        ++unread_["SAMPLE of an unknown event"];
        continue;
      }
      ++attr->samples;
      if (!counts_cpu_time(attr->attr)) continue;
      ++samples_read_;
      if ((s->misc & PERF_RECORD_MISC_CPUMODE_MASK) == PERF_RECORD_MISC_KERNEL ||
          std::any_of(s->callchain.begin(), s->callchain.end(),
                      [](uint64_t a) { return a == static_cast<uint64_t>(PERF_CONTEXT_KERNEL); }))
        ++samples_with_kernel_;
      if (profile.info.first_sample_mono_ns == 0) profile.info.first_sample_mono_ns = s->time;
    } else if (auto* m = std::get_if<Mmap2Record>(&*record)) {
      if (m->pid == -1) {
        // The kernel's image and modules, which perf writes as process -1's mappings.
        if (m->filename.starts_with("[kernel.kallsyms]")) kernel_text_ = m->page_offset;
        continue;
      }
    } else if (std::holds_alternative<SwitchRecord>(*record)) {
      ++switch_records_;
      continue;
    } else if (auto* l = std::get_if<LostRecord>(&*record)) {
      (h.type == PERF_RECORD_LOST ? lost_records_ : lost_samples_) += l->lost;
    } else if (auto* t = std::get_if<ThrottleRecord>(&*record)) {
      if (!t->unthrottle) ++throttles_;
    } else if (std::holds_alternative<OtherRecord>(*record) || std::holds_alternative<ReadRecord>(*record)) {
      const char* name = record_name(h.type);
      ++unread_[name != nullptr ? name : "type " + std::to_string(h.type)];
      continue;
    }
    if (!entries && samples_with_kernel_ > 0) {
      // Before the first kernel sample: whether this boot's kernel symbols are the file's, and so which
      // kernel frames are system-call entries (what the user leaf of a sample in the kernel is).
      // KASLR places _text anew at every boot: the same address (and build-id, when the file has one: a
      // pipe-mode file has none) is this boot's kernel.
      out_.kernel_is_running_one = (file_kernel_id.empty() || file_kernel_id == running_kernel_build_id_) &&
                                   kernel_text_ != 0 && kernel_text_ == running_kernel_text_;
      entries = std::make_shared<SchedulerFrames>();
      if (out_.kernel_is_running_one) {
        KernelSymbols symbols;
        if (symbols.load()) {
          *entries = SchedulerFrames::from_symbols(symbols, SchedulerFrames::is_syscall_entry);
          if (entries->size() > 0)
            decoder.set_syscall_entries([entries](uint64_t a) { return entries->contains(a); });
        }
      }
    }
    decoder.decode(*record, h.size, sink);
  }
  if (samples_with_kernel_ > 0) {
    profile.info.kernel_frames = true;
    profile.intern_module("[kernel.kallsyms]", file_kernel_id, true);
  }
}

std::string rate_of(const perf_event_attr& a) {
  if (a.freq) {
    std::string s = std::to_string(a.sample_freq) + " Hz";
    if (counts_cpu_time(a) && a.sample_freq != 0)
      s += " (a sample every " + std::to_string(1'000'000'000ULL / a.sample_freq) + " ns of CPU time)";
    return s;
  }
  return "a sample every " + std::to_string(a.sample_period) +
         (counts_cpu_time(a) ? " ns of CPU time" : " events");
}

void PerfDataReader::describe() {
  RecordingInfo& info = out_.profile.info;
  const Attr* used = nullptr;
  for (const Attr& a : attrs_) {
    if (counts_cpu_time(a.attr) && (used == nullptr || a.samples > used->samples)) used = &a;
  }
  const perf_event_attr& a = used != nullptr ? used->attr : attrs_.front().attr;
  const bool dwarf = (a.sample_type & PERF_SAMPLE_STACK_USER) != 0 && a.sample_stack_user != 0;
  const bool callchain = (a.sample_type & PERF_SAMPLE_CALLCHAIN) != 0;
  info.backend = "perf.data";
  info.event = used != nullptr ? used->name : attrs_.front().name;
  info.call_graph = dwarf ? "dwarf" : callchain ? "fp" : "none";
  info.frequency_hz = a.freq ? static_cast<uint32_t>(a.sample_freq) : 0;
  info.interval_ns = a.freq ? (a.sample_freq != 0 ? 1'000'000'000ULL / a.sample_freq : 0) : a.sample_period;
  info.arguments = cmdline_;
  for (const std::string& arg : cmdline_) info.target += (info.target.empty() ? "" : " ") + arg;
  if (info.target.empty()) info.target = name_;
  info.hostname = hostname_;
  info.kernel_release = os_release_;
  info.logical_cpus = cpus_online_;

  std::string what = std::string(pipe_ ? "pipe-mode perf.data" : "perf.data") + " written by " +
                     (cmdline_.empty() ? std::string("perf") : "`" + info.target + "`");
  if (!perf_version_.empty()) what += " (perf " + perf_version_ + ")";
  if (!hostname_.empty()) what += " on " + hostname_;
  if (!os_release_.empty()) what += ", Linux " + os_release_;
  what += ": event " + info.event + " at " + rate_of(a) + ", call graph ";
  what += dwarf ? "dwarf (stack copies of " + std::to_string(a.sample_stack_user) +
                      " bytes, unwound by hpd's unwinder)"
          : callchain
              ? (a.exclude_callchain_user ? "kernel frames only" : "fp (the kernel's frame-pointer walk)")
              : "none (only the sampled instruction)";
  what += "; " + std::to_string(samples_read_) + " samples read";
  out_.notes.push_back(what);
  for (const Attr& e : attrs_) {
    if (counts_cpu_time(e.attr) || e.samples == 0) continue;
    out_.notes.push_back("skipped " + std::to_string(e.samples) + " samples of event " + e.name + " (" +
                         kind_of(e.attr) +
                         "): hpd's profile weighs samples by CPU time, which only cpu-clock and task-clock "
                         "samples carry");
  }
  if (!unread_.empty()) {
    std::string list;
    for (const auto& [name, count] : unread_)
      list += (list.empty() ? "" : ", ") + std::to_string(count) + " " + name;
    out_.notes.push_back("records not read: " + list);
  }
  if (lost_records_ + lost_samples_ + throttles_ > 0)
    out_.notes.push_back("perf lost " + std::to_string(lost_records_) + " records (full buffers) and " +
                         std::to_string(lost_samples_) + " samples, and was throttled " +
                         std::to_string(throttles_) + " times: the profile misses that time");
  std::string cannot =
      "what hpd cannot know from a perf.data file: time off the CPU (perf's samples are taken on the CPU" +
      std::string(switch_records_ > 0
                      ? "; its " + std::to_string(switch_records_) + " context-switch records are not read"
                      : "") +
      "), the CPU time after each thread's last sample, and the vDSO's and deleted files' contents";
  out_.notes.push_back(cannot);
  if (pipe_ && build_ids_.empty())
    out_.notes.push_back(
        "a pipe-mode file carries no build-ids: modules are read as they are now, unchecked");
  if (samples_with_kernel_ > 0 && !out_.kernel_is_running_one)
    out_.notes.push_back(
        "kernel frames stay as addresses: the file's kernel is not this boot's (its build-id or the address "
        "of "
        "_text differ), whose symbols are not known here");
}

PerfDataContents PerfDataReader::read() {
  read_file_header();
  walk_data();
  check_layouts();
  feed();
  bool any_usable = false;
  uint64_t samples = 0;
  for (const Attr& a : attrs_) {
    any_usable = any_usable || counts_cpu_time(a.attr);
    samples += a.samples;
  }
  if (samples_read_ == 0) {
    std::string events;
    for (const Attr& a : attrs_)
      events += (events.empty() ? "" : ", ") + a.name + " (" + std::to_string(a.samples) + " samples)";
    if (samples == 0) fail("it holds no samples (events: " + events + ")");
    fail("it holds no samples hpd can read: its events are " + events +
         "; hpd weighs samples by CPU time, so record with `perf record -e cpu-clock` (or task-clock)");
  }
  out_.profile.lost.lost_records = lost_records_ + lost_samples_;
  out_.profile.lost.throttle_events = throttles_;
  describe();
  return std::move(out_);
}

// The running kernel's _text, from /proc/kallsyms as the symbolizer reads it (0 when it is hidden).
uint64_t running_kernel_text() {
  KernelSymbols symbols;
  if (!symbols.load()) return 0;
  for (const KernelSymbols::Symbol& symbol : symbols.symbols()) {
    if (std::strcmp(symbols.name(symbol), "_text") == 0) return symbol.address;
  }
  return 0;
}

}  // namespace

bool is_perf_data_file(const std::string& path) {
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  uint64_t magic = 0;
  if (::pread(fd.get(), &magic, sizeof magic, 0) != static_cast<ssize_t>(sizeof magic)) return false;
  return magic == kMagic || magic == kMagicSwapped || std::memcmp(&magic, "PERFFILE", 8) == 0;
}

PerfDataContents read_perf_data(std::span<const uint8_t> bytes, const std::string& name,
                                const std::string& running_kernel_build_id, uint64_t running_kernel_text) {
  return PerfDataReader(bytes, name, running_kernel_build_id, running_kernel_text).read();
}

PerfDataContents read_perf_data_file(const std::string& path) {
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw PerfDataError("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    throw PerfDataError(path + ": not a regular file (a perf.data file is read in place)");
  if (st.st_size == 0) throw PerfDataError(path + ": the file is empty");
  const auto size = static_cast<size_t>(st.st_size);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (map == MAP_FAILED) throw PerfDataError("cannot map " + path + ": " + std::strerror(errno));
  const std::unique_ptr<void, std::function<void(void*)>> unmap(map, [size](void* p) { ::munmap(p, size); });
  PerfDataContents contents = read_perf_data({static_cast<const uint8_t*>(map), size}, path,
                                             kernel_build_id(), running_kernel_text());
  // perf's clock (perf_clock, unless -k) has no wall-clock pairing in the file: the file's time of
  // last change stands for the end.
  RecordingInfo& info = contents.profile.info;
  const uint64_t mtime = static_cast<uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000ULL + st.st_mtim.tv_nsec;
  const uint64_t span = info.end_mono_ns - info.start_mono_ns;
  info.start_unix_ns = mtime > span ? mtime - span : 0;
  return contents;
}

}  // namespace hpd
