// temp_dir_child: tests that pass or fail on purpose, run one at a time by temp_dir_test. Each makes
// a TempDir with one file in it, prints its path (dir=PATH), and passes or fails as its name says.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>

#include "temp_dir.h"

namespace hpd::testing {
namespace {

void make_and_print(const TempDir& dir) {
  std::ofstream(dir.file("evidence.txt")) << "what a failed test leaves to look at\n";
  std::cout << "dir=" << dir.path() << std::endl;
}

TEST(TempDirChild, KeepOnFailureFails) {
  const TempDir dir("hpd-tempdir-test", TempDir::Cleanup::kKeepOnFailure);
  make_and_print(dir);
  ADD_FAILURE() << "failing on purpose";
}

TEST(TempDirChild, KeepOnFailurePasses) {
  const TempDir dir("hpd-tempdir-test", TempDir::Cleanup::kKeepOnFailure);
  make_and_print(dir);
}

TEST(TempDirChild, AlwaysFails) {
  const TempDir dir("hpd-tempdir-test");
  make_and_print(dir);
  ADD_FAILURE() << "failing on purpose";
}

}  // namespace
}  // namespace hpd::testing
