// The allocation runtime's unwinder (collect/src/calls/runtime/alloc_unwind.c: a rule per return
// address, cached) against libgcc's _Unwind_Backtrace, frame for frame. The fixtures run with the
// runtime preloaded, a log of their own at a 4 KiB mean (thousands of samples), and
// HPD_ALLOC_UNWIND_CHECK: every sample is then unwound both ways, and each process appends
// "unwind check pid P: samples S fast F mismatched M" to the file at its exit (F: the samples the
// cached rules unwound; the others were libgcc's alone). Stacks: recursion up to 300 deep, frames whose
// CFA is rbp (variable-length arrays), glibc's qsort calling back, a call to a noreturn function that
// ends its caller, a second thread, a dlopened library dlclosed and dlopened again (gcc and clang,
// -O2, no frame pointers), and C++ (-O2: std::map, std::function, virtual calls, exceptions).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "hpd/calls/alloc_abi.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace {

std::string fixture(const std::string& name) {
  return std::string(HPD_CALLS_FIXTURES) + "/" + name;
}

// A log of the runtime's layout, as hpd makes it, with a mean of `mean` bytes.
void make_log(const std::string& path, uint64_t mean) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(HPD_ALLOC_FILE_SIZE)), 0);
  hpd_alloc_header h{};
  h.magic = HPD_ALLOC_MAGIC;
  h.version = HPD_ALLOC_VERSION;
  h.header_size = sizeof h;
  h.file_size = HPD_ALLOC_FILE_SIZE;
  h.mean_bytes = mean;
  ASSERT_EQ(::pwrite(fd, &h, sizeof h, 0), static_cast<ssize_t>(sizeof h));
  ::close(fd);
}

hpd_alloc_header read_header(const std::string& path) {
  hpd_alloc_header h{};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  if (fd >= 0) {
    EXPECT_EQ(::pread(fd, &h, sizeof h, 0), static_cast<ssize_t>(sizeof h));
    ::close(fd);
  }
  return h;
}

struct CheckCounts {
  uint64_t samples = 0, fast = 0, mismatched = 0;
  int processes = 0;
  std::string mismatches;  // the runtime's lines for the first samples that differed
};

CheckCounts read_check(const std::string& path) {
  CheckCounts c;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    unsigned long s = 0, f = 0, m = 0;
    int pid = 0;
    if (std::sscanf(line.c_str(), "unwind check pid %d: samples %lu fast %lu mismatched %lu", &pid, &s, &f,
                    &m) == 4) {
      c.samples += s;
      c.fast += f;
      c.mismatched += m;
      ++c.processes;
    } else {
      c.mismatches += line + "\n";
    }
  }
  return c;
}

// Runs `argv` with the runtime preloaded and the check on; the program's own process must have
// sampled at least `min_samples`, all of them alike both ways, almost all by the cached rules.
void check_program(const std::vector<std::string>& argv, uint64_t min_samples) {
  SCOPED_TRACE(argv[0]);
  const hpd::testing::TempDir dir("hpd-alloc-unwind");
  const std::string log = dir.file("alloc.log");
  const std::string check = dir.file("check.txt");
  make_log(log, 4096);
  const hpd::test::RunResult r =
      hpd::test::run(argv, 300,
                     {"LD_PRELOAD=" + std::string(HPD_CALLS_RUNTIME_PATH),
                      std::string(HPD_ALLOC_ENV_LOG) + "=" + log, "HPD_ALLOC_UNWIND_CHECK=" + check});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const CheckCounts c = read_check(check);
  EXPECT_EQ(c.processes, 1) << "one line per process that ran with the log";
  EXPECT_GE(c.samples, min_samples);
  EXPECT_EQ(c.mismatched, 0u) << c.mismatches;
  // The cached rules unwind the samples (libgcc alone only where a frame needs it: none here but the
  // few that overlap a dlclose).
  EXPECT_GE(c.fast, c.samples * 99 / 100) << c.samples << " samples, " << c.fast << " by the cached rules";
  const hpd_alloc_header h = read_header(log);
  EXPECT_EQ(h.processes, 1u);
  EXPECT_EQ(h.slow_unwinds, c.samples - c.fast);
  EXPECT_GT(h.cursor, c.samples * sizeof(hpd_alloc_record));
}

TEST(AllocUnwind, CachedRulesGiveLibgccsFramesInCBuiltByGcc) {
  check_program({fixture("alloc_unwind_gcc"), fixture("liballoc_unwind.so")}, 10000);
}

TEST(AllocUnwind, CachedRulesGiveLibgccsFramesInCBuiltByClang) {
  check_program({fixture("alloc_unwind_clang"), fixture("liballoc_unwind.so")}, 10000);
}

TEST(AllocUnwind, CachedRulesGiveLibgccsFramesInCxx) {
  check_program({fixture("alloc_unwind_cxx")}, 3000);
}

}  // namespace
