// write_output_fully: a write loop that waits for a slow reader with poll(), up to a stall timeout;
// inspect_output / open_output: output paths that are devices, and symbolic links in shared directories.
#include "hpd/model/output_write.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace hpd {
namespace {

std::atomic<int> stall_timeout_ms{10000};

}  // namespace

void set_output_stall_timeout_ms(int timeout_ms) {
  stall_timeout_ms.store(timeout_ms);
}
int output_stall_timeout_ms() {
  return stall_timeout_ms.load();
}

size_t write_output_fully(int fd, const void* data, size_t size, const char* what) {
  const char* at = static_cast<const char*>(data);
  size_t left = size;
  while (left > 0) {
    const ssize_t n = ::write(fd, at, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        // A non-blocking output whose reader is behind: wait for room, not forever.
        pollfd p{fd, POLLOUT, 0};
        const int timeout = stall_timeout_ms.load();
        const int ready = ::poll(&p, 1, timeout);
        if (ready == 0) {
          throw std::runtime_error(std::string(what) + ": the reader of the output took no data for " +
                                   std::to_string(timeout / 1000) + " s");
        }
        if (ready < 0 && errno != EINTR)
          throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
        continue;
      }
      throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
    }
    at += n;
    left -= static_cast<size_t>(n);
  }
  return size;
}

OutputPlace inspect_output(const std::string& path) {
  OutputPlace place;
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct stat st {};
  // Writable by its group or by everyone (sticky or not): others may put a link there.
  if (::stat(dir.c_str(), &st) == 0) place.shared_directory = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  // In a shared directory a link is not followed, so it is judged itself (a regular file is then made
  // in its place); elsewhere what it points to counts.
  const int found = place.shared_directory ? ::lstat(path.c_str(), &st) : ::stat(path.c_str(), &st);
  place.special = found == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode) && !S_ISDIR(st.st_mode);
  return place;
}

int open_output(const std::string& path, int flags, const OutputPlace& place, unsigned mode) {
  flags |= O_WRONLY | O_CLOEXEC;
  if (place.shared_directory) flags |= O_NOFOLLOW;
  if (place.special) flags &= ~O_TRUNC;
  const int fd = ::open(path.c_str(), flags, static_cast<mode_t>(mode));
  if (fd >= 0) return fd;
  const int err = errno;
  if (err == ELOOP && place.shared_directory) {
    throw std::runtime_error("cannot write '" + path +
                             "': it is a symbolic link in a directory others may write, and is not followed; "
                             "remove it or write elsewhere");
  }
  throw std::runtime_error("cannot write '" + path + "': " + std::strerror(err));
}

}  // namespace hpd
