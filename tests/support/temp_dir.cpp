// TempDir: mkdtemp on the way in, remove_all on the way out (unless a failed test wants it kept).
#include "temp_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <system_error>

namespace hpd::testing {

TempDir::TempDir() : TempDir("hpd-test") {}

TempDir::TempDir(const std::string& prefix, Cleanup cleanup) : cleanup_(cleanup) {
  std::error_code ec;
  std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) base = "/tmp";  // $TMPDIR names no directory
  std::string pattern = (base / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("cannot create a temporary directory " + pattern + ": " + std::strerror(errno));
  }
  path_ = std::move(pattern);
}

TempDir::~TempDir() {
  // A fixture's members are destroyed while GoogleTest still counts the test as running, so
  // HasFailure() here is the verdict of the test that used the directory. A suite's directory
  // (released in TearDownTestSuite, when no test runs) is kept when any test of the suite failed.
  const ::testing::TestSuite* suite = ::testing::UnitTest::GetInstance()->current_test_suite();
  const bool failed =
      ::testing::Test::HasFailure() || (::testing::UnitTest::GetInstance()->current_test_info() == nullptr &&
                                        suite != nullptr && suite->Failed());
  if (cleanup_ == Cleanup::kKeepOnFailure && failed) {
    std::cerr << "kept for inspection: " << path_ << "\n";
    return;
  }
  // Best effort: a destructor must not throw, and a leftover directory fails no test.
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::vector<std::string> TempDir::entries() const {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(path_)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace hpd::testing
