// Tests of TempDir's cleanup: a kept directory survives only a failed test, and says where it is
// (the tests that pass or fail on purpose run in temp_dir_child).
#include "temp_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "subprocess.h"

namespace hpd::testing {
namespace {

namespace fs = std::filesystem;

// One test of temp_dir_child, run to completion.
struct Child {
  test::RunResult result;
  std::string dir;  // what the child printed after dir=
};

Child run_child(const std::string& test) {
  Child child;
  child.result = test::run({HPD_TEMP_DIR_CHILD, "--gtest_filter=TempDirChild." + test});
  const size_t at = child.result.out.find("dir=");
  if (at != std::string::npos) {
    child.dir = child.result.out.substr(at + 4, child.result.out.find('\n', at) - at - 4);
  }
  return child;
}

TEST(TempDir, KeepOnFailureKeepsAFailedTestsDirectoryAndSaysWhere) {
  const Child child = run_child("KeepOnFailureFails");
  ASSERT_NE(child.result.exit_code, 0) << child.result.out;
  ASSERT_FALSE(child.dir.empty()) << child.result.out;
  EXPECT_EQ(fs::path(child.dir).filename().string().rfind("hpd-tempdir-test-", 0), 0u) << child.dir;
  EXPECT_TRUE(fs::exists(child.dir + "/evidence.txt")) << child.dir;
  EXPECT_NE(child.result.err.find("kept for inspection: " + child.dir + "\n"), std::string::npos)
      << child.result.err;
  fs::remove_all(child.dir);
}

TEST(TempDir, KeepOnFailureRemovesAPassedTestsDirectory) {
  const Child child = run_child("KeepOnFailurePasses");
  ASSERT_EQ(child.result.exit_code, 0) << child.result.out;
  ASSERT_FALSE(child.dir.empty()) << child.result.out;
  EXPECT_FALSE(fs::exists(child.dir)) << child.dir;
  EXPECT_EQ(child.result.err.find("kept for inspection"), std::string::npos) << child.result.err;
}

TEST(TempDir, AlwaysRemovesEvenAFailedTestsDirectory) {
  const Child child = run_child("AlwaysFails");
  ASSERT_NE(child.result.exit_code, 0) << child.result.out;
  ASSERT_FALSE(child.dir.empty()) << child.result.out;
  EXPECT_FALSE(fs::exists(child.dir)) << child.dir;
}

TEST(TempDir, EachIsNewEmptyAndPrivate) {
  const TempDir a, b("hpd-tempdir-test");
  EXPECT_NE(a.path(), b.path());
  EXPECT_TRUE(a.entries().empty());
  EXPECT_EQ(fs::status(b.path()).permissions() & fs::perms::all, fs::perms::owner_all);  // mkdtemp's 0700
  EXPECT_EQ(b.file("x"), b.path() + "/x");
}

}  // namespace
}  // namespace hpd::testing
