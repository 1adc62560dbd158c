// TempDir: a fresh scratch directory for one test, removed with everything in it when the test ends.
#pragma once

#include <string>
#include <vector>

namespace hpd::testing {

class TempDir {
 public:
  // Creates hpd-test-XXXXXX under the system's temporary directory ($TMPDIR, else /tmp); throws
  // std::runtime_error when it cannot.
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  [[nodiscard]] const std::string& path() const { return path_; }
  // path()/name. A std::string converts to std::filesystem::path where one is wanted.
  [[nodiscard]] std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Names (not paths) of the entries in the directory, hidden ones included, sorted.
  [[nodiscard]] std::vector<std::string> entries() const;

 private:
  std::string path_;
};

}  // namespace hpd::testing
