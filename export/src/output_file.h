// Byte sinks for exporters: an ostream, a file replaced atomically on commit, a gzip compressor.
#pragma once

#include <zlib.h>

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "hpd/export/error.h"
#include "json_writer.h"

namespace hpd {

class OutputFile;

class OstreamSink : public json::ByteSink {
 public:
  explicit OstreamSink(std::ostream& out) : out_(out) {}
  void write(const char* data, size_t size) override;

 private:
  std::ostream& out_;
};

// The exporters' file output: hpd::OutputFile (hpd/base/output_file.h, the one way an output path is
// opened) with kReplace, as a ByteSink. The profile goes to a temporary file beside `path`, renamed
// over it on commit(); destroyed without commit (an exception on the way), the temporary file is
// removed, so `path` is either the old file or the complete new one. An existing device or FIFO of
// the writer's is written in place; links, FIFOs and devices others could have planted are refused.
// Errors are ExportError.
class AtomicFile : public json::ByteSink {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile() override;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const char* data, size_t size) override;
  void commit();
  const std::string& path() const;

 private:
  std::unique_ptr<OutputFile> file_;
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
