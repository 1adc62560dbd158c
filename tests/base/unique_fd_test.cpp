// UniqueFd: ownership moves with the object, and the descriptor is closed exactly once.
#include "hpd/base/unique_fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>

#include <utility>

namespace hpd {
namespace {

bool is_open(int fd) {
  return ::fcntl(fd, F_GETFD) != -1;
}

int open_null() {
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  return fd;
}

TEST(UniqueFd, EmptyByDefault) {
  const UniqueFd fd;
  EXPECT_FALSE(fd.valid());
  EXPECT_FALSE(static_cast<bool>(fd));
  EXPECT_EQ(fd.get(), -1);
}

TEST(UniqueFd, ClosesOnDestruction) {
  const int raw = open_null();
  {
    const UniqueFd fd(raw);
    EXPECT_TRUE(fd.valid());
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_FALSE(is_open(raw));
}

TEST(UniqueFd, MoveConstructionTransfersOwnership) {
  const int raw = open_null();
  UniqueFd from(raw);
  {
    const UniqueFd to(std::move(from));
    EXPECT_EQ(from.get(), -1);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
    EXPECT_EQ(to.get(), raw);
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_FALSE(is_open(raw));  // closed by `to`, not left open nor closed twice
}

TEST(UniqueFd, MoveAssignmentClosesTheTargetsOldDescriptor) {
  const int kept = open_null();
  const int replaced = open_null();
  UniqueFd source(kept);
  UniqueFd target(replaced);
  target = std::move(source);
  EXPECT_FALSE(is_open(replaced));
  EXPECT_TRUE(is_open(kept));
  EXPECT_EQ(target.get(), kept);
  EXPECT_EQ(source.get(), -1);  // NOLINT(bugprone-use-after-move)
}

TEST(UniqueFd, SelfMoveAssignmentKeepsTheDescriptor) {
  const int raw = open_null();
  UniqueFd fd(raw);
  UniqueFd& alias = fd;
  fd = std::move(alias);
  EXPECT_EQ(fd.get(), raw);
  EXPECT_TRUE(is_open(raw));
}

TEST(UniqueFd, ResetClosesTheOldAndTakesTheNew) {
  const int first = open_null();
  const int second = open_null();
  UniqueFd fd(first);
  fd.reset(second);
  EXPECT_FALSE(is_open(first));
  EXPECT_EQ(fd.get(), second);
  fd.reset();
  EXPECT_FALSE(is_open(second));
  EXPECT_FALSE(fd.valid());
}

TEST(UniqueFd, ReleaseHandsBackWithoutClosing) {
  const int raw = open_null();
  int released = -1;
  {
    UniqueFd fd(raw);
    released = fd.release();
    EXPECT_FALSE(fd.valid());
  }
  EXPECT_EQ(released, raw);
  EXPECT_TRUE(is_open(raw));
  ::close(raw);
}

TEST(UniqueFd, CheckedCloseClosesAndSaysItWorked) {
  const int raw = open_null();
  UniqueFd fd(raw);
  EXPECT_EQ(fd.close(), 0);
  EXPECT_FALSE(fd.valid());
  EXPECT_FALSE(is_open(raw));
  EXPECT_EQ(fd.close(), 0);  // nothing held: nothing to report
}

// The kernel's refusal comes back as its errno. EBADF is the failure a test can cause for real (the
// descriptor closed behind the owner's back); the write-back errors of NFS or a full disk take the same
// path, and the descriptor is given up in both cases.
TEST(UniqueFd, CheckedCloseReturnsTheKernelsError) {
  const int raw = open_null();
  UniqueFd fd(raw);
  ASSERT_EQ(::close(raw), 0);
  EXPECT_EQ(fd.close(), EBADF);
  EXPECT_FALSE(fd.valid());
}

}  // namespace
}  // namespace hpd
