// TempCgroup: a child cgroup v2 for a test's lifetime, removed (it must be empty by then) when it goes.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace hpd::testing {

class TempCgroup {
 public:
  // Under `mount`, the cgroup v2 mount (hpd::cgroup2_mount(), or "" when there is none).
  explicit TempCgroup(const std::string& mount)
      : name_("hpd-test-" + std::to_string(::getpid())), path_(mount + "/" + name_) {
    ok_ = !mount.empty() && ::mkdir(path_.c_str(), 0755) == 0;
  }
  ~TempCgroup() {
    if (ok_) ::rmdir(path_.c_str());
  }
  TempCgroup(const TempCgroup&) = delete;
  TempCgroup& operator=(const TempCgroup&) = delete;
  [[nodiscard]] bool ok() const { return ok_; }
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] const std::string& name() const { return name_; }
  bool add(pid_t pid) const {
    std::ofstream procs(path_ + "/cgroup.procs");
    procs << pid << std::endl;
    return procs.good();
  }

 private:
  std::string name_;
  std::string path_;
  bool ok_ = false;
};

}  // namespace hpd::testing
