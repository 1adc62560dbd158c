// Capture file internals shared by the writer and reader: layout constants, varint encoding, framing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "hpd/capture/capture.h"

namespace hpd::capture {

// "\x89HPR\r\n\x1a\n": the high byte and the CR LF / ^Z pair expose 7-bit and text-mode transfers,
// as PNG's signature does.
inline constexpr uint8_t kMagic[8] = {0x89, 'H', 'P', 'R', '\r', '\n', 0x1a, '\n'};
inline constexpr size_t kFileHeaderSize = 16;   // magic, u32 version, u32 flags
inline constexpr size_t kBlockHeaderSize = 16;  // u16 type, u16 flags, u32 stored size, u32 raw size, u32 crc
// Bounds a reader trusts; a block claiming more is corrupt. The writer splits its blocks well below.
inline constexpr uint32_t kMaxBlockBytes = 64u << 20;
inline constexpr size_t kSamplesPerBlock = 65536;
inline constexpr size_t kStacksPerBlock = 32768;

enum class BlockType : uint16_t {
  kInfo = 1,            // RecordingInfo, writer, boot id; the last one wins
  kModules = 2,         // modules appended since the previous block
  kProcesses = 3,       // processes whose fields changed, with their new or changed mappings
  kThreads = 4,         // threads whose fields changed
  kStacks = 5,          // unique stacks appended since the previous block
  kSamples = 6,         // samples appended since the previous block
  kCallEdges = 7,       // every call edge; the last one wins
  kLost = 8,            // profile-wide lost counts; the last one wins
  kMip = 9,             // every MIP snapshot; optional (written without the required flag); the last one wins
  kModuleImages = 10,   // ELF images of modules without a file (the vDSO); optional
  kCallLatency = 11,    // every call latency of hpd's runtime; optional; the last one wins
  kAllocations = 12,    // the sampled allocations of hpd's runtime (--alloc); optional; the last one wins
  kKernelSymbols = 13,  // kallsyms lines naming the stacks' kernel addresses; optional; the last one wins
  kStackGeneration = 14,  // the stack indices start over: later blocks name the stacks written after it
  kEnd = 15,              // the recording finished; totals for a consistency check
  kJitSymbols = 16,       // the JIT symbols read for the recording; optional; the last one wins
};

inline constexpr uint16_t kFlagZstd = 1;      // payload is one zstd frame
inline constexpr uint16_t kFlagRequired = 2;  // a reader that does not know the type must refuse the file

const char* block_name(uint16_t type);

// CRC-32 (zlib) over the first 12 header bytes and the stored payload.
uint32_t block_crc(const uint8_t* header12, std::span<const uint8_t> payload);

inline void put_le16(uint8_t* p, uint16_t v) {
  p[0] = v & 0xff, p[1] = v >> 8;
}
inline void put_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t get_le16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}
inline uint32_t get_le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

inline uint64_t zigzag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t unzigzag(uint64_t v) {
  return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}

// Appends LEB128 varints and length-prefixed strings to a growing payload. The bytes are written through
// a pointer into a buffer grown geometrically, whose used length is kept apart: a byte costs a store,
// where std::string::push_back checked the capacity and wrote a terminator for each (7.5% of hpd's CPU
// in a recording of a whole build machine, most of it the frames of new stacks: docs/performance.md).
class Encoder {
 public:
  void u8(uint8_t v) {
    *room(1) = static_cast<char>(v);
    ++used_;
  }
  void var(uint64_t v) {
    char* p = room(kMaxVarBytes);
    size_t n = 0;
    while (v >= 0x80) {
      p[n++] = static_cast<char>(v | 0x80);
      v >>= 7;
    }
    p[n++] = static_cast<char>(v);
    used_ += n;
  }
  void svar(int64_t v) { var(zigzag(v)); }
  // kNoIndex becomes 0, everything else index + 1: small and never a 5-byte varint for "none".
  void index(uint32_t v) { var(v == kNoIndex ? 0 : uint64_t{v} + 1); }
  void str(std::string_view s) {
    var(s.size());
    append(s);
  }
  void append(std::string_view s) {
    if (s.empty()) return;
    std::memcpy(room(s.size()), s.data(), s.size());
    used_ += s.size();
  }
  // The payload so far (valid until the next write).
  const std::string& bytes() {
    out_.resize(used_);
    return out_;
  }
  size_t size() const { return used_; }
  void clear() { used_ = 0; }

 private:
  static constexpr size_t kMaxVarBytes = 10;
  // Room for `n` more bytes at the end of the payload.
  char* room(size_t n) {
    if (out_.size() - used_ < n) out_.resize(std::max(2 * out_.size(), used_ + n + 256));
    return out_.data() + used_;
  }
  std::string out_;  // out_.size() is the buffer's; bytes past used_ are not the payload's
  size_t used_ = 0;
};

// Reads what Encoder wrote; any overrun or out-of-range value throws CaptureError with `what_`.
class Decoder {
 public:
  Decoder(std::span<const uint8_t> data, std::string what)
      : p_(data.data()), end_(data.data() + data.size()), what_(std::move(what)) {}

  bool at_end() const { return p_ == end_; }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  uint8_t u8() {
    need(1);
    return *p_++;
  }
  uint64_t var() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const uint8_t b = *p_++;
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) {
        if (shift == 63 && b > 1) fail("varint overflows 64 bits");
        return v;
      }
    }
    fail("varint longer than 10 bytes");
  }
  int64_t svar() { return unzigzag(var()); }
  uint32_t u32() {
    const uint64_t v = var();
    if (v > UINT32_MAX) fail("value " + std::to_string(v) + " exceeds 32 bits");
    return static_cast<uint32_t>(v);
  }
  int32_t s32() {
    const int64_t v = svar();
    if (v < INT32_MIN || v > INT32_MAX) fail("value " + std::to_string(v) + " exceeds 32 bits");
    return static_cast<int32_t>(v);
  }
  uint32_t index() {
    const uint64_t v = var();
    if (v == 0) return kNoIndex;
    if (v - 1 >= kNoIndex) fail("index " + std::to_string(v - 1) + " out of range");
    return static_cast<uint32_t>(v - 1);
  }
  std::string str() {
    const uint64_t n = var();
    need(n);
    std::string s(reinterpret_cast<const char*>(p_), static_cast<size_t>(n));
    p_ += n;
    return s;
  }
  // A count of entries each at least `min_bytes` long: bounded by what is left, so a corrupt count
  // cannot make the reader reserve gigabytes.
  size_t count(size_t min_bytes = 1) {
    const uint64_t n = var();
    if (min_bytes != 0 && n > remaining() / min_bytes)
      fail("count " + std::to_string(n) + " exceeds the block");
    return static_cast<size_t>(n);
  }
  [[noreturn]] void fail(const std::string& why) const { throw CaptureError(what_ + ": " + why); }

 private:
  void need(uint64_t n) const {
    if (n > remaining()) fail("truncated payload");
  }
  const uint8_t* p_;
  const uint8_t* end_;
  std::string what_;
};

}  // namespace hpd::capture
