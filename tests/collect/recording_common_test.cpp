// Tests for the helpers both backends share (collect/src/recording_common.h) that no recording on this
// kernel reaches: process_ended is the watch for kernels without pidfd.
#include "recording_common.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hpd/base/process.h"

namespace hpd {
namespace {

// A process runs, then is a zombie (its only thread exited, not reaped: ended, though signal 0 still
// finds it), then is reaped (no such process).
TEST(ProcessEnded, ARunningProcessHasNotEndedAZombieOrAReapedOneHas) {
  EXPECT_FALSE(process_ended(::getpid()));
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char byte;
    ::close(go[1]);
    _exit(::read(go[0], &byte, 1) == 1 ? 0 : 1);
  }
  ::close(go[0]);
  EXPECT_FALSE(process_ended(child));
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  ::close(go[1]);
  // A zombie once it has exited: waitid with WNOWAIT waits for that without reaping it.
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  EXPECT_FALSE(no_such_process(child)) << "a zombie is still there for signal 0";
  EXPECT_TRUE(process_ended(child));
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(no_such_process(child));
  EXPECT_TRUE(process_ended(child));
}

}  // namespace
}  // namespace hpd
