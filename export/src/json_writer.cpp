// The streaming JSON writer: string escaping with UTF-8 repair, exact decimal milliseconds.
#include "json_writer.h"

#include <charconv>

#include "hpd/base/hex.h"

namespace hpd::json {
namespace {

// Length of the valid UTF-8 sequence starting at s[i] (a non-ASCII lead byte), or 0 if invalid.
// Follows the well-formed byte sequences table of the Unicode standard (no overlongs, no surrogates).
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return len;
}

bool plain_ascii(unsigned char c) {
  return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

// append(pointer, count) rather than append(first, last): the iterator pair goes through
// std::string's general replace path, which took 8% of writing a profile.
void append_uint(std::string& out, uint64_t v) {
  char tmp[24];
  const auto result = std::to_chars(tmp, tmp + sizeof(tmp), v);
  out.append(tmp, static_cast<size_t>(result.ptr - tmp));
}

}  // namespace

void append_string_literal(std::string& out, std::string_view s) {
  out.push_back('"');
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (plain_ascii(c)) {
      size_t j = i + 1;
      while (j < n && plain_ascii(static_cast<unsigned char>(s[j]))) ++j;
      out.append(s.data() + i, j - i);
      i = j;
      continue;
    }
    if (c < 0x80) {
      switch (c) {
        case '"': out.append("\\\""); break;
        case '\\': out.append("\\\\"); break;
        case '\n': out.append("\\n"); break;
        case '\r': out.append("\\r"); break;
        case '\t': out.append("\\t"); break;
        case '\b': out.append("\\b"); break;
        case '\f': out.append("\\f"); break;
        default: out.append("\\u00"); append_hex_byte(out, c);
      }
      ++i;
      continue;
    }
    const size_t len = utf8_sequence_length(s, i);
    if (len == 0) {
      out.append("\xEF\xBF\xBD");  // U+FFFD REPLACEMENT CHARACTER
      ++i;
    } else {
      out.append(s.data() + i, len);
      i += len;
    }
  }
  out.push_back('"');
}

void append_ns_as_ms(std::string& out, int64_t ns) {
  // Work on the magnitude as unsigned so that INT64_MIN does not overflow.
  uint64_t magnitude = static_cast<uint64_t>(ns);
  if (ns < 0) {
    out.push_back('-');
    magnitude = ~magnitude + 1;
  }
  append_uint(out, magnitude / 1000000);
  uint64_t frac = magnitude % 1000000;
  if (frac == 0) return;
  char digits[6];
  for (int k = 5; k >= 0; --k) {
    digits[k] = static_cast<char>('0' + frac % 10);
    frac /= 10;
  }
  int len = 6;
  while (digits[len - 1] == '0') --len;
  out.push_back('.');
  out.append(digits, static_cast<size_t>(len));
}

Writer::Writer(ByteSink& sink, size_t chunk_size) : sink_(sink), chunk_size_(chunk_size) {
  buf_.reserve(chunk_size_ + 4096);
}

void Writer::open(char c) {
  before_value();
  buf_.push_back(c);
  first_.push_back(true);
}

void Writer::close(char c) {
  buf_.push_back(c);
  first_.pop_back();
  maybe_flush();
}

void Writer::key(std::string_view k) {
  before_value();
  append_string_literal(buf_, k);
  buf_.push_back(':');
  after_key_ = true;
}

void Writer::string(std::string_view s) {
  before_value();
  append_string_literal(buf_, s);
  maybe_flush();
}

void Writer::uint(uint64_t v) {
  before_value();
  append_uint(buf_, v);
  maybe_flush();
}

void Writer::int64(int64_t v) {
  before_value();
  char tmp[24];
  const auto result = std::to_chars(tmp, tmp + sizeof(tmp), v);
  buf_.append(tmp, static_cast<size_t>(result.ptr - tmp));
  maybe_flush();
}

void Writer::boolean(bool v) {
  before_value();
  buf_.append(v ? "true" : "false");
}

void Writer::null() {
  before_value();
  buf_.append("null");
}

void Writer::ns_as_ms(int64_t ns) {
  before_value();
  append_ns_as_ms(buf_, ns);
  maybe_flush();
}

void Writer::raw(std::string_view token) {
  before_value();
  buf_.append(token);
  maybe_flush();
}

void Writer::flush() {
  if (buf_.empty()) return;
  sink_.write(buf_.data(), buf_.size());
  buf_.clear();
}

void Writer::finish() {
  flush();
}

}  // namespace hpd::json
