// Output sinks: ostream, atomically replaced file (hpd::OutputFile), gzip compression through zlib's deflate.
#include "output_file.h"

#include "hpd/base/output_file.h"

#include <algorithm>
#include <memory>
#include <ostream>
#include <stdexcept>

namespace hpd {

void OstreamSink::write(const char* data, size_t size) {
  out_.write(data, static_cast<std::streamsize>(size));
  if (!out_) throw ExportError("writing the profile to the output stream failed");
}

namespace {

// OutputFile says what went wrong as a plain runtime_error; the exporters throw ExportError.
template <typename F>
auto as_export_error(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ExportError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw ExportError(e.what());
  }
}

}  // namespace

AtomicFile::AtomicFile(const std::string& path)
    : file_(as_export_error([&] { return std::make_unique<OutputFile>(path, OutputWrite::kReplace); })) {}

AtomicFile::~AtomicFile() = default;

const std::string& AtomicFile::path() const {
  return file_->path();
}

void AtomicFile::write(const char* data, size_t size) {
  as_export_error([&] { file_->write(data, size); });
}

void AtomicFile::commit() {
  as_export_error([&] { file_->commit(); });
}

GzipSink::GzipSink(json::ByteSink& next, int level) : next_(next), out_(size_t{1} << 18) {
  // windowBits 15 + 16 selects the gzip wrapper instead of zlib's.
  if (deflateInit2(&stream_, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw ExportError("cannot initialize gzip compression");
  }
}

GzipSink::~GzipSink() {
  deflateEnd(&stream_);
}

void GzipSink::write(const char* data, size_t size) {
  // zlib's avail_in is 32-bit; feed large buffers in slices.
  while (size > 0) {
    const size_t slice = std::min<size_t>(size, 1u << 30);
    stream_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
    stream_.avail_in = static_cast<uInt>(slice);
    pump(Z_NO_FLUSH);
    data += slice;
    size -= slice;
  }
}

void GzipSink::finish() {
  if (finished_) return;
  stream_.next_in = nullptr;
  stream_.avail_in = 0;
  pump(Z_FINISH);
  finished_ = true;
}

void GzipSink::pump(int flush) {
  while (true) {
    stream_.next_out = out_.data();
    stream_.avail_out = static_cast<uInt>(out_.size());
    const int rc = deflate(&stream_, flush);
    if (rc == Z_STREAM_ERROR) throw ExportError("gzip compression failed");
    const size_t produced = out_.size() - stream_.avail_out;
    if (produced > 0) next_.write(reinterpret_cast<const char*>(out_.data()), produced);
    if (flush == Z_FINISH) {
      if (rc == Z_STREAM_END) return;
    } else if (stream_.avail_in == 0 && stream_.avail_out != 0) {
      return;
    }
  }
}

}  // namespace hpd
