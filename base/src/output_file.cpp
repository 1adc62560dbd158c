// OutputFile: an output path judged and opened through its directory's descriptor (shared
// directories, planted links, FIFOs and devices); write_output_fully: a write loop that waits for a
// slow reader with poll(), up to a stall timeout.
#include "hpd/base/output_file.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

namespace hpd {
namespace {

std::atomic<int> stall_timeout_ms{10000};
std::atomic<unsigned> temp_counter{0};

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw std::runtime_error("cannot write '" + path + "': " + why);
}

const char* kind_name(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a file";
}

// The output's directory and last component, the directory open (O_PATH) and judged.
struct Place {
  std::string dir;
  std::string base;
  int dir_fd = -1;
  bool shared = false;
  std::string shared_why;  // "directory 'D', which others may write"
  uid_t dir_uid = 0;
  bool sticky = false;
};

Place open_place(const std::string& path) {
  if (path.empty()) throw std::runtime_error("the output path is empty");
  Place place;
  const size_t slash = path.rfind('/');
  place.dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  place.base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (place.base.empty() || place.base == "." || place.base == "..")
    refuse(path, "it names a directory; give a file name");
  place.dir_fd = ::open(place.dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (place.dir_fd < 0) {
    const int err = errno;
    refuse(path, err == ENOENT ? "directory '" + place.dir + "' does not exist"
                               : "directory '" + place.dir + "': " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(place.dir_fd, &st) != 0) {
    const int err = errno;
    ::close(place.dir_fd);
    refuse(path, "directory '" + place.dir + "': " + std::strerror(err));
  }
  const uid_t writer = ::geteuid();
  place.dir_uid = st.st_uid;
  place.sticky = (st.st_mode & S_ISVTX) != 0;
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    place.shared = true;
    place.shared_why = "directory '" + place.dir + "', which others may write";
  } else if (st.st_uid != writer && st.st_uid != 0) {
    place.shared = true;
    place.shared_why = "directory '" + place.dir + "', which belongs to another user";
  }
  return place;
}

enum class Found { kNothing, kRegular, kSpecial };

struct Judged {
  Found found = Found::kNothing;
  struct stat st {};      // of what is written: a link's target when followed
  bool via_link = false;  // the last component is a link the rules allow to follow
};

// What the last component names, judged by the rules of output_file.h; throws on a refusal.
Judged judge(const std::string& path, const Place& place, OutputWrite how) {
  const uid_t writer = ::geteuid();
  Judged j;
  if (::fstatat(place.dir_fd, place.base.c_str(), &j.st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return j;
    refuse(path, std::strerror(errno));
  }
  if (S_ISLNK(j.st.st_mode)) {
    if (place.shared && j.st.st_uid != writer) {
      refuse(path, "it is a symbolic link in " + place.shared_why +
                       ", and not yours: it is not followed (whoever made it chose where it points); "
                       "remove it or write elsewhere");
    }
    j.via_link = true;
    if (::fstatat(place.dir_fd, place.base.c_str(), &j.st, 0) != 0) {
      if (errno == ENOENT) return j;  // the writer's own dangling link: its target is created
      refuse(path, std::strerror(errno));
    }
  }
  if (S_ISDIR(j.st.st_mode)) refuse(path, "it is a directory; give a file name");
  if (S_ISSOCK(j.st.st_mode)) refuse(path, "it is a socket, which is not written to");
  if (!S_ISREG(j.st.st_mode)) {
    if (place.shared && j.st.st_uid != writer) {
      refuse(path, std::string("it is ") + kind_name(j.st.st_mode) + " in " + place.shared_why +
                       ", and not yours: it is not written; remove it or write elsewhere");
    }
    j.found = Found::kSpecial;
    return j;
  }
  j.found = Found::kRegular;
  // A sticky directory lets only a file's owner (or the directory's, or root) rename over it: said now,
  // not when a recording's profile is complete.
  if (how == OutputWrite::kReplace && !j.via_link && place.sticky && writer != 0 && j.st.st_uid != writer &&
      place.dir_uid != writer) {
    refuse(path, "it is another user's file in the sticky directory '" + place.dir +
                     "', which only its owner may replace; remove it or write elsewhere");
  }
  if (how == OutputWrite::kInPlace && place.shared && !j.via_link) {
    if (j.st.st_uid != writer) {
      refuse(path, "it is a file in " + place.shared_why +
                       ", and not yours: it is not overwritten; remove it or write elsewhere");
    }
    if (j.st.st_nlink > 1) {
      refuse(path, "it has other hard links, in " + place.shared_why +
                       ": it is not overwritten; remove it or write elsewhere");
    }
  }
  return j;
}

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

void set_blocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
}

std::string temporary_name(const std::string& base) {
  return "." + base + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(temp_counter.fetch_add(1));
}

}  // namespace

void set_output_stall_timeout_ms(int timeout_ms) {
  stall_timeout_ms.store(timeout_ms);
}
int output_stall_timeout_ms() {
  return stall_timeout_ms.load();
}

size_t write_output_fully(int fd, const void* data, size_t size, const char* what) {
  using Clock = std::chrono::steady_clock;
  const char* at = static_cast<const char*>(data);
  size_t left = size;
  Clock::time_point last_progress = Clock::now();
  while (left > 0) {
    const ssize_t n = ::write(fd, at, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
      // A non-blocking output whose reader is behind: wait for room, not forever. The limit is read
      // again each slice: hpd lowers it when it stops.
      const int timeout = stall_timeout_ms.load();
      const auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_progress).count();
      if (waited >= timeout) {
        throw std::runtime_error(
            std::string(what) + ": the reader of the output took no data for " +
            (timeout >= 1000 ? std::to_string(timeout / 1000) + " s" : std::to_string(timeout) + " ms"));
      }
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 100) < 0 && errno != EINTR)
        throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
      continue;
    }
    at += n;
    left -= static_cast<size_t>(n);
    last_progress = Clock::now();
  }
  return size;
}

OutputFile::OutputFile(std::string path, OutputWrite how, unsigned mode) : path_(std::move(path)) {
  Place place = open_place(path_);
  dir_fd_ = place.dir_fd;
  base_ = place.base;
  const uid_t writer = ::geteuid();
  // A name that changes between the checks and the open is judged again, a few times.
  for (int attempt = 0; attempt < 5; ++attempt) {
    const Judged j = judge(path_, place, how);
    const int nofollow = j.via_link ? 0 : O_NOFOLLOW;
    if (j.found == Found::kSpecial) {
      // O_NONBLOCK: a FIFO nobody reads fails at once (ENXIO) instead of blocking the open forever.
      fd_ = ::openat(dir_fd_, base_.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | nofollow);
      if (fd_ < 0) {
        const int err = errno;
        if (err == ELOOP || err == ENOENT) continue;
        if (err == ENXIO && S_ISFIFO(j.st.st_mode)) {
          refuse(path_,
                 "it is a FIFO that no process reads; start its reader first (hpctl does not wait for one)");
        }
        fail("", err);
      }
      struct stat st {};
      if (::fstat(fd_, &st) != 0 || !same_file(st, j.st)) {
        close_fd();
        continue;
      }
      set_blocking(fd_);
      special_ = true;
      return;
    }
    if (how == OutputWrite::kReplace) {
      for (int n = 0; n < 100; ++n) {
        temp_name_ = temporary_name(base_);
        fd_ = ::openat(dir_fd_, temp_name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
        if (fd_ >= 0) return;
        if (errno != EEXIST) break;
      }
      const int err = errno;
      temp_name_.clear();
      refuse(path_, "cannot create a file in '" + place.dir + "': " + std::strerror(err));
    }
    const bool created = j.found == Found::kNothing;
    if (created) {
      // O_EXCL: a name that appeared meanwhile (a link, a FIFO) is not opened but judged again.
      fd_ =
          ::openat(dir_fd_, base_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (j.via_link ? 0 : O_EXCL), mode);
    } else {
      fd_ = ::openat(dir_fd_, base_.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | nofollow);
    }
    if (fd_ < 0) {
      const int err = errno;
      if (err == EEXIST || err == ELOOP || err == ENOENT || err == ENXIO) continue;
      fail("", err);
    }
    struct stat st {};
    const bool ok = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) && (created || same_file(st, j.st)) &&
                    (!place.shared || j.via_link || (st.st_uid == writer && st.st_nlink == 1));
    if (!ok) {
      close_fd();
      continue;
    }
    set_blocking(fd_);
    // Truncated only now, once the descriptor is known to be the file that was judged.
    if (!created && ::ftruncate(fd_, 0) != 0) fail("truncating failed", errno);
    dev_ = st.st_dev;
    ino_ = st.st_ino;
    return;
  }
  refuse(path_, "it kept changing while it was checked; write elsewhere");
}

OutputFile::~OutputFile() {
  close_fd();
  if (!done_ && dir_fd_ >= 0) {
    if (!temp_name_.empty()) {
      ::unlinkat(dir_fd_, temp_name_.c_str(), 0);
    } else if (!special_ && ino_ != 0) {
      struct stat st {};
      if (::fstatat(dir_fd_, base_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == dev_ &&
          st.st_ino == ino_)
        ::unlinkat(dir_fd_, base_.c_str(), 0);
    }
  }
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

void OutputFile::fail(const std::string& what, int err) const {
  refuse(path_, what.empty() ? std::string(std::strerror(err)) : what + ": " + std::strerror(err));
}

void OutputFile::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void OutputFile::write(const void* data, size_t size) {
  try {
    write_output_fully(fd_, data, size, "write failed");
  } catch (const std::runtime_error& e) {
    refuse(path_, e.what());
  }
}

int OutputFile::release_fd() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void OutputFile::commit() {
  if (done_) return;
  if (fd_ >= 0) {
    // fsync before rename: otherwise a crash soon after could leave the new name on an empty file.
    if (!temp_name_.empty() && ::fsync(fd_) != 0 && errno != EINVAL) fail("fsync failed", errno);
    const int fd = release_fd();
    if (::close(fd) != 0) fail("close failed", errno);
  }
  if (!temp_name_.empty() && ::renameat(dir_fd_, temp_name_.c_str(), dir_fd_, base_.c_str()) != 0)
    fail("rename into place failed", errno);
  done_ = true;
}

void OutputFile::keep() {
  close_fd();
  done_ = true;
}

void check_output_path(const std::string& path, OutputWrite how) {
  const Place place = open_place(path);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{place.dir_fd};
  const Judged j = judge(path, place, how);
  if (j.found != Found::kSpecial) {
    // Probed by creating (and removing) a file beside it, which also catches read-only file systems
    // where access() would not.
    const std::string probe = temporary_name("hpd-probe");
    const int fd = ::openat(place.dir_fd, probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      const int err = errno;
      refuse(path, std::string(std::strerror(err)) + " (in directory '" + place.dir + "')");
    }
    ::close(fd);
    ::unlinkat(place.dir_fd, probe.c_str(), 0);
  }
  if (j.found != Found::kNothing && ::faccessat(place.dir_fd, place.base.c_str(), W_OK, AT_EACCESS) != 0) {
    refuse(path, std::strerror(errno));
  }
}

}  // namespace hpd
