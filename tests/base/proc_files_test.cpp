// Tests for the small /proc readers.
#include "hpd/base/proc_files.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

namespace hpd {
namespace {

TEST(ProcFiles, CpuListsAndOwnProcess) {
  EXPECT_EQ(parse_cpu_list("0-3,6,8-9\n"), (std::vector<int>{0, 1, 2, 3, 6, 8, 9}));
  EXPECT_EQ(parse_cpu_list("0"), std::vector<int>{0});
  EXPECT_TRUE(parse_cpu_list("").empty());
  EXPECT_EQ(parse_cpu_list("3-1"), std::vector<int>{});
  EXPECT_FALSE(online_cpus().empty());

  const int32_t pid = ::getpid();
  EXPECT_EQ(read_process_state(pid), 'R');
  EXPECT_EQ(read_process_state(-1), 0);
  EXPECT_FALSE(read_comm(pid).empty());
  EXPECT_FALSE(read_cmdline(pid).empty());
  EXPECT_EQ(list_threads(pid).front(), pid);
  EXPECT_TRUE(list_threads(-1).empty());
  ASSERT_TRUE(read_process_uid(pid));
  EXPECT_EQ(*read_process_uid(pid), ::getuid());
  EXPECT_FALSE(read_int_file("/nonexistent"));
}

}  // namespace
}  // namespace hpd

namespace hpd {
namespace {

// The thread's context switches from /proc are the kernel's nvcsw + nivcsw, which getrusage gives too.
TEST(ProcFiles, ThreadContextSwitchesAreTheKernelsCounts) {
  const int32_t tid = static_cast<int32_t>(::gettid());
  for (int round = 0; round < 3; ++round) {
    ::usleep(1000);  // one voluntary switch at least
    rusage before{}, after{};
    ::getrusage(RUSAGE_THREAD, &before);
    const auto read = read_thread_context_switches(::getpid(), tid);
    ::getrusage(RUSAGE_THREAD, &after);
    ASSERT_TRUE(read.has_value());
    const auto count = [](const rusage& u) { return static_cast<uint64_t>(u.ru_nvcsw + u.ru_nivcsw); };
    EXPECT_GE(*read, count(before));
    EXPECT_LE(*read, count(after));
    EXPECT_GT(*read, 0u);
  }
  EXPECT_FALSE(read_thread_context_switches(::getpid(), -1).has_value());
}

}  // namespace
}  // namespace hpd
