// Byte sinks for exporters: an ostream, a file replaced atomically on commit, a gzip compressor.
#pragma once

#include <zlib.h>

#include <iosfwd>
#include <string>
#include <vector>

#include "hpd/export/error.h"
#include "json_writer.h"

namespace hpd {

class OstreamSink : public json::ByteSink {
 public:
  explicit OstreamSink(std::ostream& out) : out_(out) {}
  void write(const char* data, size_t size) override;

 private:
  std::ostream& out_;
};

// Writes to a temporary file beside `path` and renames it over `path` on commit(). Destroyed without
// commit (an exception on the way), it removes the temporary file, so `path` is either the old file or
// the complete new one. An existing device or FIFO is written in place instead, never replaced.
class AtomicFile : public json::ByteSink {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile() override;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const char* data, size_t size) override;
  void commit();
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(const char* what, int err);

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  bool in_place_ = false;  // a device or FIFO, written directly (no temporary file, no rename)
};

// Compresses into gzip format (RFC 1952, readable by the Firefox Profiler and gunzip) and passes the
// result to `next`. finish() writes the trailer; without it the output is incomplete.
class GzipSink : public json::ByteSink {
 public:
  GzipSink(json::ByteSink& next, int level);
  ~GzipSink() override;
  GzipSink(const GzipSink&) = delete;
  GzipSink& operator=(const GzipSink&) = delete;

  void write(const char* data, size_t size) override;
  void finish();

 private:
  void pump(int flush);

  json::ByteSink& next_;
  z_stream stream_{};
  std::vector<unsigned char> out_;
  bool finished_ = false;
};

}  // namespace hpd
