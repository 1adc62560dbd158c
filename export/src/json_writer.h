// A streaming JSON writer: values are appended to a buffer that is handed to a sink in large chunks,
// so a profile with millions of samples is never held as a document tree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hpd::json {

// Where finished bytes go (a stream, a file, a compressor). write() throws on failure.
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void write(const char* data, size_t size) = 0;
};

// Appends `s` to `out` as a JSON string literal. Valid UTF-8 passes through unchanged; control
// characters are escaped; bytes that are not valid UTF-8 become U+FFFD, because the Firefox Profiler
// refuses a whole file that does not decode as UTF-8.
void append_string_literal(std::string& out, std::string_view s);

// Appends `ns` nanoseconds as an exact decimal number of milliseconds ("1234.5", "-0.000001", "0"):
// no exponent, no rounding.
void append_ns_as_ms(std::string& out, int64_t ns);

class Writer {
 public:
  explicit Writer(ByteSink& sink, size_t chunk_size = size_t{1} << 20);
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  void begin_object() { open('{'); }
  void end_object() { close('}'); }
  void begin_array() { open('['); }
  void end_array() { close(']'); }

  // An object key; the next call writes its value.
  void key(std::string_view k);

  void string(std::string_view s);
  void uint(uint64_t v);
  void int64(int64_t v);
  void boolean(bool v);
  void null();
  void ns_as_ms(int64_t ns);
  // A JSON token written as given, e.g. a number formatted by the caller.
  void raw(std::string_view token);

  // Hands any buffered bytes to the sink. Must be called once at the end; the destructor does not
  // flush because a sink's failure must surface as an exception, not be lost.
  void finish();

 private:
  void open(char c);
  void close(char c);
  void before_value() {
    if (after_key_) {
      after_key_ = false;
    } else if (!first_.empty()) {
      if (!first_.back()) buf_.push_back(',');
      first_.back() = false;
    }
  }
  void maybe_flush() {
    if (buf_.size() >= chunk_size_) flush();
  }
  void flush();

  ByteSink& sink_;
  size_t chunk_size_;
  std::string buf_;
  std::vector<bool> first_;  // per open container: nothing written into it yet
  bool after_key_ = false;
};

}  // namespace hpd::json
