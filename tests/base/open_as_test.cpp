// open_as against the kernel's own permission checks (privileged: taking other file-system
// credentials needs CAP_SETUID and CAP_SETGID): mode bits, supplementary groups, an execute-only
// file, a directory without search permission, a descriptor reopened through /proc/self/fd, and
// the other threads' credentials left alone.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "hpd/base/open_as.h"
#include "hpd/base/unique_fd.h"
#include "temp_dir.h"

namespace hpd {
namespace {

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;
constexpr gid_t kOtherGroup = 54321;

std::string make_file(const std::string& path, mode_t mode, gid_t group = 0) {
  std::ofstream(path) << "secret\n";
  if (::chown(path.c_str(), 0, group) != 0 || ::chmod(path.c_str(), mode) != 0) ADD_FAILURE() << path;
  return path;
}

// errno of open_as, or 0 when it opened.
int open_error(const FsCredentials& who, const std::string& path) {
  UniqueFd fd(open_as(who, path.c_str(), O_RDONLY));
  return fd ? 0 : errno;
}

// The file-system uid of this thread, from /proc/thread-self/status ("Uid: real effective saved fs").
std::string own_fs_uid() {
  std::ifstream in("/proc/thread-self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Uid:", 0) == 0) return line.substr(line.find_last_of(" \t") + 1);
  return "";
}

class OpenAs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  }
  testing::TempDir dir_{"hpd-open-as"};
  const FsCredentials nobody_{kNobody, kNogroup, {}};
};

TEST_F(OpenAs, FollowsModeBitsAndGroups) {
  EXPECT_EQ(open_error(nobody_, make_file(dir_.file("public"), 0644)), 0);
  EXPECT_EQ(open_error(nobody_, make_file(dir_.file("root-only"), 0600)), EACCES);
  // Execute-only: the user may run it but not read it.
  EXPECT_EQ(open_error(nobody_, make_file(dir_.file("exec-only"), 0711)), EACCES);
  // Readable by a group: with it among the supplementary groups only.
  const std::string grouped = make_file(dir_.file("grouped"), 0640, kOtherGroup);
  EXPECT_EQ(open_error(nobody_, grouped), EACCES);
  EXPECT_EQ(open_error(FsCredentials{kNobody, kNogroup, {kOtherGroup}}, grouped), 0);
  EXPECT_EQ(open_error(FsCredentials{kNobody, kOtherGroup, {}}, grouped), 0);
  // Root itself is still root afterwards, in this thread and as open_as(root).
  EXPECT_EQ(own_fs_uid(), "0");
  EXPECT_TRUE(UniqueFd(::open(dir_.file("root-only").c_str(), O_RDONLY)));
  EXPECT_EQ(open_error(FsCredentials{0, 0, {}}, dir_.file("root-only")), 0);
}

TEST_F(OpenAs, NeedsSearchPermissionOnTheWay) {
  const std::string closed = dir_.file("closed");
  ASSERT_EQ(::mkdir(closed.c_str(), 0700), 0);
  const std::string inside = make_file(closed + "/public", 0644);
  EXPECT_EQ(open_error(nobody_, inside), EACCES);
  EXPECT_EQ(open_error(nobody_, dir_.file("missing")), ENOENT);
}

// hpd holds modules open; reopening one as /proc/self/fd/N is checked against the file itself.
TEST_F(OpenAs, HeldDescriptorIsCheckedAgainstTheFile) {
  UniqueFd held(::open(make_file(dir_.file("held-secret"), 0711).c_str(), O_RDONLY));
  ASSERT_TRUE(held);
  EXPECT_EQ(open_error(nobody_, "/proc/self/fd/" + std::to_string(held.get())), EACCES);
  UniqueFd readable(::open(make_file(dir_.file("held-public"), 0644).c_str(), O_RDONLY));
  EXPECT_EQ(open_error(nobody_, "/proc/self/fd/" + std::to_string(readable.get())), 0);
}

}  // namespace
}  // namespace hpd
