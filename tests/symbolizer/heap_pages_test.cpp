// prefer_huge_pages_for_heap on the real kernel: the heap is advised MADV_HUGEPAGE, large arrays
// land in it, and they are backed by huge pages. The calls run in a fresh process
// (fixtures/heap_pages_probe), as in hpctl, where the heap is still small when they are made.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>

namespace {

std::string run_probe(const std::string& mode) {
  std::string out;
  FILE* p = popen((std::string(HPD_HEAP_PAGES_PROBE) + " " + mode).c_str(), "r");
  if (p == nullptr) return out;
  char buf[512];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  return status == 0 ? out : "exit status " + std::to_string(status) + ": " + out;
}

TEST(HeapPages, LargeArraysLandInTheAdvisedHeapAndGetHugePages) {
  const std::string report = run_probe("large");
  std::istringstream in(report);
  bool advised = false, in_heap = false, huge_flag = false;
  size_t advised_bytes = 0, anon_huge_kb = 0;
  ASSERT_TRUE(in >> advised >> advised_bytes >> in_heap >> huge_flag >> anon_huge_kb) << report;
  ASSERT_TRUE(advised) << report;
  EXPECT_GE(advised_bytes, size_t{60} << 20) << "the heap did not grow by the reserve";
  EXPECT_TRUE(in_heap) << "a 16 MiB array did not come from the heap";
  EXPECT_TRUE(huge_flag) << "[heap] lacks VmFlags hg";
  // 16 MiB written: most of its whole 2 MiB pages must be huge (the kernel falls back to small
  // pages only when it cannot find free 2 MiB blocks, which a test machine has).
  EXPECT_GE(anon_huge_kb, 8u * 1024) << report;
}

TEST(HeapPages, ALaterCallCoversWhatTheHeapGrewBy) {
  const std::string report = run_probe("grow");
  std::istringstream in(report);
  bool first = false, second = false;
  size_t first_bytes = 0, second_bytes = 0;
  ASSERT_TRUE(in >> first >> first_bytes >> second >> second_bytes) << report;
  ASSERT_TRUE(first && second) << report;
  EXPECT_GE(second_bytes, first_bytes + (size_t{20} << 20)) << report;
}

}  // namespace
