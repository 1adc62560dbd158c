// open_as: opens a file as another user would, with the kernel deciding (permission bits, ACLs,
// directories' search permission, LSMs): hpd symbolizes a client's recording only from files the
// client could read itself.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace hpd {

// The credentials the kernel checks a file's permissions against.
struct FsCredentials {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups
};

// open(path, flags) done by a thread of its own that takes `who`'s file-system uid and gid and
// supplementary groups (the raw setfsuid, setfsgid and setgroups system calls, which change only
// the calling thread's credentials; glibc's setgroups would change every thread's) and drops the
// capabilities that override file permissions (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER)
// from its effective set. The descriptor, or -1 with errno set: EACCES or EPERM when `who` may not
// open it, and EPERM too when this process cannot take those credentials (it needs CAP_SETUID
// and CAP_SETGID): nothing is opened then, so a missing privilege never reads more.
int open_as(const FsCredentials& who, const char* path, int flags);

// The credentials process `pid` opens files with (/proc/PID/status: its file-system uid and gid, its
// supplementary groups); nullopt when it is gone or its status is malformed.
std::optional<FsCredentials> process_fs_credentials(int32_t pid);

}  // namespace hpd
