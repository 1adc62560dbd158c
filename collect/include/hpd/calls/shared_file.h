// The file hpd shares with the runtime it preloads into a launched command (the call table, the
// allocation log): a sparse file on tmpfs, made under /dev/shm by whoever launches the command, or
// adopted from a descriptor handed over (hpd, recording a command hpctl started).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hpd/base/unique_fd.h"

namespace hpd::calls {

class SharedFile {
 public:
  // Makes /dev/shm/<prefix>-<pid>-<serial> (0600: a command that switches to another user cannot open
  // it) of `size` bytes, sparse, and writes `header` at its start. Removed on destruction, and should
  // this process die first (SIGKILL), by a process that waits for its end (nothing is left in
  // /dev/shm). Throws CallCountError saying why when it cannot be made.
  SharedFile(const std::string& prefix, uint64_t size, const void* header, size_t header_size);
  template <typename Header>
  SharedFile(const std::string& prefix, uint64_t size, const Header& header)
      : SharedFile(prefix, size, &header, sizeof header) {}
  // Adopts a file made by someone else, from its descriptor only (no path is ever opened). Throws
  // CallCountError, naming it `what` ("the call table"), unless it is a regular file on tmpfs (a file
  // system whose reads cannot block: a FUSE file could hold a read of hpd's forever) of `size` bytes.
  SharedFile(UniqueFd handed_over, const std::string& what, uint64_t size);
  ~SharedFile();
  SharedFile(const SharedFile&) = delete;
  SharedFile& operator=(const SharedFile&) = delete;

  // Empty for an adopted file.
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] int fd() const { return fd_.get(); }
  // "NAME=VALUE" entries for the launched command: LD_PRELOAD (`runtime` first, then what the
  // environment already preloads) and `variable`=path().
  [[nodiscard]] std::vector<std::string> environment(const std::string& runtime, const char* variable) const;

 private:
  std::string path_;
  UniqueFd fd_;
  UniqueFd remover_;  // closing it lets the remover process go (remove_when_this_process_ends)
};

}  // namespace hpd::calls
