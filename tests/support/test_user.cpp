#include "test_user.h"

#include <pwd.h>

#include <stdexcept>

#include "subprocess.h"

namespace hpd::test {

std::vector<std::string> TestUser::run_as(std::vector<std::string> argv) const {
  std::vector<std::string> full = {"setpriv", "--reuid=" + name, "--regid=" + name, "--init-groups"};
  full.insert(full.end(), argv.begin(), argv.end());
  return full;
}

TestUser make_test_user(const std::string& name) {
  run({"userdel", name}, 30);  // a leftover of an interrupted run
  const RunResult made = run({"useradd", "--no-create-home", "--user-group", "--shell", "/bin/sh", name}, 30);
  if (made.exit_code != 0) throw std::runtime_error("useradd " + name + ": " + made.err);
  const passwd* entry = getpwnam(name.c_str());
  if (entry == nullptr) throw std::runtime_error("useradd made no user " + name);
  return TestUser{name, entry->pw_uid, entry->pw_gid};
}

void remove_test_user(const TestUser& user) {
  if (user.name.empty()) return;
  run({"pkill", "-KILL", "-u", user.name}, 30);  // effective uid
  run({"pkill", "-KILL", "-U", user.name}, 30);  // real uid
  run({"userdel", user.name}, 30);
}

}  // namespace hpd::test
