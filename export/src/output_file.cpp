// Output sinks: ostream, atomically replaced file, gzip compression through zlib's deflate.
#include "output_file.h"

#include "hpd/model/output_write.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ostream>
#include <stdexcept>

namespace hpd {

void OstreamSink::write(const char* data, size_t size) {
  out_.write(data, static_cast<std::streamsize>(size));
  if (!out_) throw ExportError("writing the profile to the output stream failed");
}

namespace {

std::atomic<unsigned> g_temp_counter{0};

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_name_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw ExportError("cannot write profile: empty output path");
  if (path_.back() == '/') {
    throw ExportError("cannot write profile to '" + path_ + "': the path names a directory");
  }
  const std::string dir = directory_of(path_);
  const std::string base = base_name_of(path_);
  // A device or FIFO (-o /dev/null) is written in place: renaming a file over it would replace it.
  if (const OutputPlace place = inspect_output(path_); place.special) {
    fd_ = open_output(path_, 0, place);
    in_place_ = true;
    return;
  }
  // O_EXCL with a fresh name instead of mkstemp: the file then gets the usual 0666 & ~umask mode.
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_path_ = dir + "/." + base + ".tmp-" + std::to_string(::getpid()) + "-" +
                 std::to_string(g_temp_counter.fetch_add(1));
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    if (errno != EEXIST) break;
  }
  const int err = errno;
  temp_path_.clear();
  throw ExportError("cannot write profile to '" + path_ + "': cannot create a file in '" + dir +
                    "': " + std::strerror(err));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void AtomicFile::fail(const char* what, int err) {
  throw ExportError("cannot write profile to '" + path_ + "': " + what + ": " + std::strerror(err));
}

void AtomicFile::write(const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd_, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write failed", errno);
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  if (in_place_) {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("close failed", errno);
    committed_ = true;
    return;
  }
  // fsync before rename: otherwise a crash soon after could leave the new name on an empty file.
  if (::fsync(fd_) != 0 && errno != EINVAL) fail("fsync failed", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close failed", errno);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) fail("rename into place failed", errno);
  committed_ = true;
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
