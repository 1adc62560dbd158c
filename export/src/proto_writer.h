// The protobuf wire format, written by hand for the exporters that emit protobuf messages (pprof's
// profile.proto, OTLP profiles): one writer, so that both encode fields the same way.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace hpd {

// Field key = number << 3 | wire type; 0 = varint, 1 = 64-bit, 2 = length-delimited.
// Negative int64 values would take ten bytes; every value the exporters write is non-negative.
class ProtoWriter {
 public:
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void fixed64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
  }
  // proto3 leaves fields at their default value out.
  void uint_field(uint32_t field, uint64_t v) {
    if (v == 0) return;
    varint(uint64_t{field} << 3);
    varint(v);
  }
  void fixed64_field(uint32_t field, uint64_t v) {
    if (v == 0) return;
    varint(uint64_t{field} << 3 | 1);
    fixed64(v);
  }
  void bool_field(uint32_t field, bool v) { uint_field(field, v ? 1 : 0); }
  void bytes_field(uint32_t field, std::string_view bytes) {
    varint(uint64_t{field} << 3 | 2);
    varint(bytes.size());
    out_.append(bytes);
  }
  void message_field(uint32_t field, const ProtoWriter& m) { bytes_field(field, m.out_); }
  // Packed repeated varints (the proto3 default for repeated scalars).
  template <typename Range>
  void packed_field(uint32_t field, const Range& values) {
    if (values.empty()) return;
    ProtoWriter body;
    for (const auto v : values) body.varint(static_cast<uint64_t>(v));
    message_field(field, body);
  }
  const std::string& bytes() const { return out_; }
  std::string take() { return std::move(out_); }
  void clear() { out_.clear(); }

 private:
  std::string out_;
};

}  // namespace hpd
