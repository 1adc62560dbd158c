// The collection of continuous mode drops what exited processes hold (chunk_cut.h,
// forget_exited_processes), so that its memory does not grow with the maps of every process the
// system ran.
#include <gtest/gtest.h>

#include <cstdint>

#include "chunk_cut.h"

namespace hpd::continuous {
namespace {

// The processes that exited before the time given lose their mappings, command line, executable and
// cgroup, each counted once; live processes and those that exited later keep theirs; every entry
// stays, found by pid with its name and times.
TEST(ForgetExitedProcesses, EmptiesOnlyThoseThatExitedBefore) {
  RawProfile live;
  const uint32_t module = live.intern_module("/usr/bin/sort", "ab");
  auto add = [&](int32_t pid, uint64_t end_ns) {
    RawProcess& p = live.process(pid);
    p.name = "sort";
    p.exe = "/usr/bin/sort-with-a-long-path";
    p.cmdline = {"sort", "-R", "a-file-name-longer-than-a-short-string"};
    p.cgroup = "/user.slice/user-0.slice/session-1.scope";
    p.start_ns = 100;
    p.end_ns = end_ns;
    for (uint64_t i = 0; i < 40; ++i)
      p.mappings.push_back(RawMapping{0x1000 * i, 0x1000 * (i + 1), 0, module, 0, 0});
  };
  for (int32_t pid = 1; pid <= 100; ++pid) add(pid, 1000 + static_cast<uint64_t>(pid));  // exits 1001..1100
  add(200, 0);                                                                           // alive
  EXPECT_EQ(forget_exited_processes(live, 1051), 50u);  // those that exited at 1001..1050
  EXPECT_EQ(forget_exited_processes(live, 1051), 0u);   // each once
  for (int32_t pid = 1; pid <= 100; ++pid) {
    const RawProcess* p = live.find_process(pid);
    ASSERT_NE(p, nullptr) << pid;
    EXPECT_EQ(p->name, "sort");
    EXPECT_EQ(p->start_ns, 100u);
    EXPECT_EQ(p->end_ns, 1000u + static_cast<uint64_t>(pid));
    const bool forgotten = pid <= 50;
    EXPECT_EQ(p->mappings.empty(), forgotten) << pid;
    EXPECT_EQ(p->mappings.capacity() == 0, forgotten) << pid;  // the memory itself, not only the size
    EXPECT_EQ(p->cmdline.empty(), forgotten) << pid;
    EXPECT_EQ(p->exe.empty(), forgotten) << pid;
    EXPECT_EQ(p->cgroup.empty(), forgotten) << pid;
  }
  EXPECT_EQ(forget_exited_processes(live, UINT64_MAX), 50u);  // the other exited ones; never the live one
  EXPECT_EQ(live.find_process(200)->mappings.size(), 40u);
  EXPECT_EQ(live.processes.size(), 101u);
}

}  // namespace
}  // namespace hpd::continuous
