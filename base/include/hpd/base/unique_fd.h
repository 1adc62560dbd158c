// UniqueFd: sole owner of a file descriptor, closed on destruction; the one fd wrapper of hpd.
// Outside base/, hpd closes descriptors only through it (packaging/check-layers.py fails on a
// `::close(` elsewhere).
#pragma once

#include <unistd.h>

#include <cerrno>

#include <utility>

namespace hpd {

// Move-only: a moved-from UniqueFd holds -1 and closes nothing. reset() closes the old descriptor
// before taking the new one; release() gives the descriptor back without closing it. The destructor
// and reset() ignore what close(2) says; close() is the checked way, for outputs.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  ~UniqueFd() { reset(); }

  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  // Closes the descriptor now and returns what close(2) said: 0, or its errno (0 when none is held).
  // For a file written, close() may be the first to report that the data did not reach it (NFS, a
  // full disk, a quota: the write-back's error), so a caller that wrote an output checks this and
  // treats a nonzero result as a failed write. The descriptor is given up whatever the result (Linux
  // frees it even when close() fails, also on EINTR), so it is never closed twice nor retried.
  [[nodiscard]] int close() noexcept {
    const int fd = std::exchange(fd_, -1);
    if (fd < 0) return 0;
    return ::close(fd) == 0 ? 0 : errno;
  }

 private:
  int fd_ = -1;
};

}  // namespace hpd
