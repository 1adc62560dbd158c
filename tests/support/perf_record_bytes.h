// A perf_event record built field by field, laid out as the kernel writes it into the ring: the
// header (type, misc, size) and then the fields in the order the test appends them.
#pragma once

#include <linux/perf_event.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace hpd {

class PerfRecordBytes {
 public:
  PerfRecordBytes(uint32_t type, uint16_t misc) : type_(type), misc_(misc) {
    bytes_.resize(sizeof(perf_event_header));
  }
  PerfRecordBytes& u64(uint64_t v) { return raw(&v, 8); }
  PerfRecordBytes& u32(uint32_t v) { return raw(&v, 4); }
  // A NUL-terminated string padded to 8 bytes, as in MMAP2 and COMM records.
  PerfRecordBytes& str(const std::string& s) {
    std::vector<uint8_t> padded(s.begin(), s.end());
    padded.resize((s.size() + 8) & ~size_t{7}, 0);
    return raw(padded.data(), padded.size());
  }
  PerfRecordBytes& raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
    return *this;
  }
  // The sample_id trailer of a layout with TID, TIME, ID and CPU: pid/tid, time, id, cpu/res.
  PerfRecordBytes& trailer(int32_t pid, int32_t tid, uint64_t time, uint64_t id, uint32_t cpu) {
    return u32(static_cast<uint32_t>(pid)).u32(static_cast<uint32_t>(tid)).u64(time).u64(id).u32(cpu).u32(0);
  }
  std::vector<uint8_t> done() {
    perf_event_header h{type_, misc_, static_cast<uint16_t>(bytes_.size())};
    std::memcpy(bytes_.data(), &h, sizeof h);
    return bytes_;
  }

 private:
  uint32_t type_;
  uint16_t misc_;
  std::vector<uint8_t> bytes_;
};

}  // namespace hpd
