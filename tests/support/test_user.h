// A real login user a privileged test makes (useradd) and removes (userdel): its own uid and
// user-private group, no home directory. Tests of what hpd gives an unprivileged user run her
// commands through setpriv, with her real, effective and saved ids and her groups.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace hpd::test {

struct TestUser {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;

  // argv run as this user: real, effective and saved ids, its groups from /etc/group.
  [[nodiscard]] std::vector<std::string> run_as(std::vector<std::string> argv) const;
};

// Makes user `name` (a leftover of an interrupted run of that name is removed first). Throws
// std::runtime_error when useradd fails.
TestUser make_test_user(const std::string& name);
// Ends every process left running as `user` (by effective and by real uid: a set-user-ID program she
// ran) and removes the user; userdel refuses a user with a process left.
void remove_test_user(const TestUser& user);

}  // namespace hpd::test
