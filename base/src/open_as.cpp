// open_as: the open(2) done in a short-lived thread that holds the other user's file-system
// credentials; the thread's credentials die with it, so nothing has to be put back.
#include "hpd/base/open_as.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <thread>

#include "hpd/base/proc_files.h"

namespace hpd {
namespace {

// The capabilities that let a process open files their permissions refuse it.
bool drop_file_override_capabilities() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  for (const int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER})
    data[cap / 32].effective &= ~(1u << (cap % 32));
  return ::syscall(SYS_capset, &header, data) == 0;
}

// Takes `who`'s credentials for file access in the calling thread only; false when they did not
// all take (setfsuid and setfsgid report no error: the value read back says).
bool become(const FsCredentials& who) {
  if (::syscall(SYS_setgroups, who.groups.size(), who.groups.data()) != 0) return false;
  ::syscall(SYS_setfsgid, who.gid);
  if (static_cast<gid_t>(::syscall(SYS_setfsgid, -1)) != who.gid) return false;
  ::syscall(SYS_setfsuid, who.uid);
  if (static_cast<uid_t>(::syscall(SYS_setfsuid, -1)) != who.uid) return false;
  return drop_file_override_capabilities();
}

}  // namespace

int open_as(const FsCredentials& who, const char* path, int flags) {
  int fd = -1;
  int error = EPERM;
  try {
    std::thread opener([&] {
      if (!become(who)) return;
      fd = ::open(path, flags | O_CLOEXEC);
      error = fd < 0 ? errno : 0;
    });
    opener.join();
  } catch (const std::system_error&) {
    error = EAGAIN;  // no thread could be made
  }
  if (fd < 0) errno = error;
  return fd;
}

std::optional<FsCredentials> process_fs_credentials(int32_t pid) {
  const std::optional<StatusIds> ids = read_proc_status_ids(pid);
  // Real, effective, saved and file-system ids, in that order.
  if (!ids || ids->uids.size() < 4 || ids->gids.size() < 4) return std::nullopt;
  FsCredentials who{ids->uids[3], ids->gids[3], {}};
  who.groups.assign(ids->groups.begin(), ids->groups.end());
  return who;
}

}  // namespace hpd
