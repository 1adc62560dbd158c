// The tmpfs file hpd shares with its preloaded runtime: made (and removed whatever happens to the
// maker) or adopted from a descriptor.
#include "hpd/calls/shared_file.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "hpd/base/process.h"
#include "hpd/calls/call_counter.h"

namespace hpd::calls {

SharedFile::SharedFile(const std::string& prefix, uint64_t size, const void* header, size_t header_size) {
  static std::atomic<unsigned> serial{0};
  std::string path = "/dev/shm/" + prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
  fd_.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd_) throw CallCountError("cannot create " + path + ": " + std::strerror(errno));
  path_ = std::move(path);
  remover_ = remove_when_this_process_ends(path_, fd_.get());
  if (::ftruncate(fd_.get(), static_cast<off_t>(size)) != 0 ||
      ::pwrite(fd_.get(), header, header_size, 0) != static_cast<ssize_t>(header_size)) {
    const int err = errno;
    ::unlink(path_.c_str());
    throw CallCountError("cannot write " + path_ + ": " + std::strerror(err));
  }
}

SharedFile::SharedFile(UniqueFd handed_over, const std::string& what, uint64_t size)
    : fd_(std::move(handed_over)) {
  struct stat st {};
  if (!fd_ || ::fstat(fd_.get(), &st) != 0 || !S_ISREG(st.st_mode))
    throw CallCountError(what + " handed over is not a regular file");
  struct statfs fs {};
  if (::fstatfs(fd_.get(), &fs) != 0 || fs.f_type != TMPFS_MAGIC)
    throw CallCountError(what + " handed over is not on tmpfs (/dev/shm)");
  if (static_cast<uint64_t>(st.st_size) != size)
    throw CallCountError(what + " handed over has " + std::to_string(st.st_size) + " bytes, not the " +
                         std::to_string(size) + " of this hpd's layout (another hpd version?)");
}

SharedFile::~SharedFile() {
  if (!path_.empty()) ::unlink(path_.c_str());
}

std::vector<std::string> SharedFile::environment(const std::string& runtime, const char* variable) const {
  std::string preload = runtime;
  if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && old[0] != '\0')
    preload += ":" + std::string(old);
  return {"LD_PRELOAD=" + preload, std::string(variable) + "=" + path_};
}

}  // namespace hpd::calls
