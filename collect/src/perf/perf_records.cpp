// Decoding of perf_event records; every read is bounds-checked so garbage cannot crash the reader.
#include "perf/perf_records.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "hpd/base/hex.h"

namespace hpd {

namespace {

class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, size_t end) : bytes_(bytes), end_(end) {}

  template <typename T>
  bool take(T& out) {
    if (end_ - pos_ < sizeof(T) || pos_ > end_) return false;
    std::memcpy(&out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool skip(size_t n) {
    if (pos_ > end_ || end_ - pos_ < n) return false;
    pos_ += n;
    return true;
  }
  // A NUL-terminated string padded to 8 bytes, running at most to the end of the body.
  bool take_string(std::string& out) {
    if (pos_ > end_) return false;
    const auto* begin = reinterpret_cast<const char*>(bytes_.data() + pos_);
    const size_t room = end_ - pos_;
    const auto* nul = static_cast<const char*>(std::memchr(begin, '\0', room));
    const size_t len = nul != nullptr ? static_cast<size_t>(nul - begin) : room;
    out.assign(begin, len);
    pos_ = end_;
    return true;
  }
  [[nodiscard]] size_t pos() const { return pos_; }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = sizeof(perf_event_header);
  size_t end_;
};

size_t trailer_size(const RecordLayout& layout) {
  if (!layout.sample_id_all) return 0;
  size_t n = 0;
  for (const uint64_t bit : {PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_SAMPLE_ID, PERF_SAMPLE_STREAM_ID,
                             PERF_SAMPLE_CPU, PERF_SAMPLE_IDENTIFIER}) {
    if (layout.sample_type & bit) n += 8;
  }
  return n;
}

bool decode_sample_id(std::span<const uint8_t> bytes, const RecordLayout& layout, SampleId& out) {
  const size_t size = trailer_size(layout);
  if (size == 0) return true;
  if (bytes.size() < sizeof(perf_event_header) + size) return false;
  Cursor c(bytes.first(bytes.size()), bytes.size());
  c.skip(bytes.size() - size - sizeof(perf_event_header));
  const uint64_t t = layout.sample_type;
  uint32_t pid = 0, tid = 0, cpu = 0, reserved = 0;
  uint64_t stream_id = 0, identifier = 0;
  if ((t & PERF_SAMPLE_TID) && !(c.take(pid) && c.take(tid))) return false;
  if ((t & PERF_SAMPLE_TIME) && !c.take(out.time)) return false;
  if ((t & PERF_SAMPLE_ID) && !c.take(out.id)) return false;
  if ((t & PERF_SAMPLE_STREAM_ID) && !c.take(stream_id)) return false;
  if ((t & PERF_SAMPLE_CPU) && !(c.take(cpu) && c.take(reserved))) return false;
  if ((t & PERF_SAMPLE_IDENTIFIER) && !c.take(identifier)) return false;
  out.pid = static_cast<int32_t>(pid);
  out.tid = static_cast<int32_t>(tid);
  out.cpu = cpu;
  if ((t & PERF_SAMPLE_IDENTIFIER) && !(t & PERF_SAMPLE_ID)) out.id = identifier;
  out.present = true;
  return true;
}

bool take_read_value(Cursor& c, uint64_t read_format, std::optional<uint64_t>& value) {
  uint64_t word = 0;
  const int extras = ((read_format & PERF_FORMAT_TOTAL_TIME_ENABLED) ? 1 : 0) +
                     ((read_format & PERF_FORMAT_TOTAL_TIME_RUNNING) ? 1 : 0);
  const int per_value =
      1 + ((read_format & PERF_FORMAT_ID) ? 1 : 0) + ((read_format & PERF_FORMAT_LOST) ? 1 : 0);
  if (read_format & PERF_FORMAT_GROUP) {
    uint64_t nr = 0;
    if (!c.take(nr) || nr > 4096) return false;
    if (!c.skip(8 * static_cast<size_t>(extras))) return false;
    for (uint64_t i = 0; i < nr; ++i) {
      if (!c.take(word)) return false;
      if (i == 0) value = word;  // the leader's value
      if (!c.skip(8 * static_cast<size_t>(per_value - 1))) return false;
    }
    return true;
  }
  if (!c.take(word)) return false;
  value = word;
  return c.skip(8 * static_cast<size_t>(extras + per_value - 1));
}

std::optional<PerfRecord> decode_sample(std::span<const uint8_t> bytes, uint16_t misc,
                                        const RecordLayout& layout) {
  Cursor c(bytes, bytes.size());
  SampleRecord s;
  s.misc = misc;
  const uint64_t t = layout.sample_type;
  uint64_t skipped = 0;
  uint32_t pid = 0, tid = 0, reserved = 0;
  if ((t & PERF_SAMPLE_IDENTIFIER) && !c.take(s.id)) return std::nullopt;
  if ((t & PERF_SAMPLE_IP) && !c.take(s.ip)) return std::nullopt;
  if ((t & PERF_SAMPLE_TID) && !(c.take(pid) && c.take(tid))) return std::nullopt;
  if ((t & PERF_SAMPLE_TIME) && !c.take(s.time)) return std::nullopt;
  if ((t & PERF_SAMPLE_ADDR) && !c.take(skipped)) return std::nullopt;
  if ((t & PERF_SAMPLE_ID) && !c.take(s.id)) return std::nullopt;
  if ((t & PERF_SAMPLE_STREAM_ID) && !c.take(skipped)) return std::nullopt;
  if ((t & PERF_SAMPLE_CPU) && !(c.take(s.cpu) && c.take(reserved))) return std::nullopt;
  if ((t & PERF_SAMPLE_PERIOD) && !c.take(s.period)) return std::nullopt;
  if ((t & PERF_SAMPLE_READ) && !take_read_value(c, layout.read_format, s.read_value)) return std::nullopt;
  if (t & PERF_SAMPLE_CALLCHAIN) {
    uint64_t nr = 0;
    if (!c.take(nr)) return std::nullopt;
    if (nr > (bytes.size() - c.pos()) / 8) return std::nullopt;
    s.callchain.resize(static_cast<size_t>(nr));
    for (auto& address : s.callchain) c.take(address);
  }
  if (t & PERF_SAMPLE_RAW) {
    // u32 size, then size bytes; the kernel pads size so that the record stays 8-byte aligned.
    uint32_t raw_size = 0;
    if (!c.take(raw_size) || !c.skip(raw_size)) return std::nullopt;
  }
  // The branch stack's layout depends on branch_sample_type, which the layout does not carry.
  if (t & PERF_SAMPLE_BRANCH_STACK) return std::nullopt;
  if (t & PERF_SAMPLE_REGS_USER) {
    if (!c.take(s.regs_abi)) return std::nullopt;
    if (s.regs_abi != PERF_SAMPLE_REGS_ABI_NONE) {
      s.user_regs.resize(static_cast<size_t>(__builtin_popcountll(layout.sample_regs_user)));
      for (auto& reg : s.user_regs) {
        if (!c.take(reg)) return std::nullopt;
      }
    }
  }
  if (t & PERF_SAMPLE_STACK_USER) {
    // u64 size, size bytes, and u64 dyn_size only when size != 0 (the kernel copied nothing otherwise).
    if (!c.take(s.stack_size)) return std::nullopt;
    if (s.stack_size != 0) {
      const size_t data = c.pos();
      if (s.stack_size > bytes.size() || !c.skip(static_cast<size_t>(s.stack_size))) return std::nullopt;
      uint64_t dyn_size = 0;
      if (!c.take(dyn_size)) return std::nullopt;
      s.user_stack = bytes.subspan(data, static_cast<size_t>(std::min(dyn_size, s.stack_size)));
    }
  }
  s.pid = static_cast<int32_t>(pid);
  s.tid = static_cast<int32_t>(tid);
  return s;
}

}  // namespace

std::optional<PerfRecord> decode_record(std::span<const uint8_t> bytes, const RecordLayout& layout) {
  perf_event_header header;
  if (bytes.size() < sizeof header) return std::nullopt;
  std::memcpy(&header, bytes.data(), sizeof header);
  if (header.size < sizeof header || header.size > bytes.size()) return std::nullopt;
  bytes = bytes.first(header.size);
  if (header.type == PERF_RECORD_SAMPLE) return decode_sample(bytes, header.misc, layout);

  const size_t trailer = trailer_size(layout);
  if (bytes.size() < sizeof header + trailer) return std::nullopt;
  Cursor c(bytes, bytes.size() - trailer);
  SampleId sample_id;
  if (!decode_sample_id(bytes, layout, sample_id)) return std::nullopt;
  uint32_t pid = 0, tid = 0;

  switch (header.type) {
    case PERF_RECORD_MMAP2: {
      Mmap2Record r;
      uint8_t id_block[24];
      if (!(c.take(pid) && c.take(tid) && c.take(r.address) && c.take(r.length) && c.take(r.page_offset) &&
            c.take(id_block) && c.take(r.prot) && c.take(r.flags) && c.take_string(r.filename))) {
        return std::nullopt;
      }
      if ((header.misc & PERF_RECORD_MISC_MMAP_BUILD_ID) && layout.build_ids) {
        // Layout: u8 size, u8 + u16 reserved, u8 build_id[20].
        const size_t n = std::min<size_t>(id_block[0], 20);
        r.build_id = to_hex({id_block + 4, n});
      }
      r.pid = static_cast<int32_t>(pid);
      r.tid = static_cast<int32_t>(tid);
      r.sample_id = sample_id;
      return r;
    }
    case PERF_RECORD_MMAP: {
      // The older record (perf.data files, synthesized by perf or from events without attr.mmap2): no
      // device, inode, protection or flags; a mapping of data is flagged PERF_RECORD_MISC_MMAP_DATA.
      Mmap2Record r;
      if (!(c.take(pid) && c.take(tid) && c.take(r.address) && c.take(r.length) && c.take(r.page_offset) &&
            c.take_string(r.filename))) {
        return std::nullopt;
      }
      r.prot = (header.misc & PERF_RECORD_MISC_MMAP_DATA) != 0 ? PROT_READ : PROT_READ | PROT_EXEC;
      r.pid = static_cast<int32_t>(pid);
      r.tid = static_cast<int32_t>(tid);
      r.sample_id = sample_id;
      return r;
    }
    case PERF_RECORD_COMM: {
      CommRecord r;
      if (!(c.take(pid) && c.take(tid) && c.take_string(r.comm))) return std::nullopt;
      r.pid = static_cast<int32_t>(pid);
      r.tid = static_cast<int32_t>(tid);
      r.exec = (header.misc & PERF_RECORD_MISC_COMM_EXEC) != 0;
      r.sample_id = sample_id;
      return r;
    }
    case PERF_RECORD_FORK:
    case PERF_RECORD_EXIT: {
      TaskRecord r;
      uint32_t ppid = 0, ptid = 0;
      if (!(c.take(pid) && c.take(ppid) && c.take(tid) && c.take(ptid) && c.take(r.time)))
        return std::nullopt;
      r.fork = header.type == PERF_RECORD_FORK;
      r.pid = static_cast<int32_t>(pid);
      r.ppid = static_cast<int32_t>(ppid);
      r.tid = static_cast<int32_t>(tid);
      r.ptid = static_cast<int32_t>(ptid);
      r.sample_id = sample_id;
      return r;
    }
    case PERF_RECORD_LOST: {
      LostRecord r;
      if (!(c.take(r.id) && c.take(r.lost))) return std::nullopt;
      r.sample_id = sample_id;
      return r;
    }
    case PERF_RECORD_LOST_SAMPLES: {
      // Samples the kernel could not write (no id: they are of the event that writes the record).
      LostRecord r;
      if (!c.take(r.lost)) return std::nullopt;
      r.sample_id = sample_id;
      return r;
    }
    case PERF_RECORD_THROTTLE:
    case PERF_RECORD_UNTHROTTLE: {
      ThrottleRecord r;
      if (!(c.take(r.time) && c.take(r.id) && c.take(r.stream_id))) return std::nullopt;
      r.unthrottle = header.type == PERF_RECORD_UNTHROTTLE;
      r.sample_id = sample_id;
      return r;
    }
    case PERF_RECORD_SWITCH: {
      if (!sample_id.present) return OtherRecord{header.type};  // no thread or time to pair it by
      SwitchRecord r;
      r.out = (header.misc & PERF_RECORD_MISC_SWITCH_OUT) != 0;
      r.preempt = r.out && (header.misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT) != 0;
      r.sample_id = sample_id;
      return r;
    }
    case PERF_RECORD_READ: {
      ReadRecord r;
      std::optional<uint64_t> value;
      if (!(c.take(pid) && c.take(tid) && take_read_value(c, layout.read_format, value) && value))
        return std::nullopt;
      r.pid = static_cast<int32_t>(pid);
      r.tid = static_cast<int32_t>(tid);
      r.value = *value;
      r.sample_id = sample_id;
      return r;
    }
    default: return OtherRecord{header.type};
  }
}

void split_callchain(std::span<const uint64_t> chain, SplitCallchain& out) {
  out.kernel.clear();
  out.user.clear();
  out.address_count = 0;
  enum class Context { kUnknown, kKernel, kUser, kOther } context = Context::kUnknown;
  for (const uint64_t address : chain) {
    if (address >= static_cast<uint64_t>(PERF_CONTEXT_MAX)) {
      if (address == static_cast<uint64_t>(PERF_CONTEXT_KERNEL)) {
        context = Context::kKernel;
      } else if (address == static_cast<uint64_t>(PERF_CONTEXT_USER)) {
        context = Context::kUser;
      } else {
        context = Context::kOther;  // hypervisor or guest frames
      }
      continue;
    }
    ++out.address_count;
    Context effective = context;
    if (effective == Context::kUnknown) {
      // No marker yet (not produced by current kernels): x86-64 kernel addresses have the top bit set.
      effective = (address >> 63) != 0 ? Context::kKernel : Context::kUser;
    }
    if (effective == Context::kKernel) {
      out.kernel.push_back(address);
    } else if (effective == Context::kUser) {
      out.user.push_back(address);
    }
  }
}

uint64_t record_time(const PerfRecord& record) {
  return std::visit(
      [](const auto& r) -> uint64_t {
        using T = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<T, SampleRecord> || std::is_same_v<T, TaskRecord>) {
          return r.time;
        } else if constexpr (std::is_same_v<T, OtherRecord>) {
          return 0;
        } else {
          return r.sample_id.present ? r.sample_id.time : 0;
        }
      },
      record);
}

}  // namespace hpd
