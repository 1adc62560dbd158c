// TempDir: a fresh scratch directory for one test, removed with everything in it when the test ends.
#pragma once

#include <string>
#include <vector>

namespace hpd::testing {

class TempDir {
 public:
  // What happens to the directory when the TempDir goes away.
  enum class Cleanup {
    kAlways,         // removed
    kKeepOnFailure,  // kept (and its path printed) when the running GoogleTest test has failed, so
                     // that the recordings and logs an integration test left there can be inspected
  };

  // Creates hpd-test-XXXXXX under the system's temporary directory ($TMPDIR, else /tmp); throws
  // std::runtime_error when it cannot.
  TempDir();
  // The same with the name PREFIX-XXXXXX (PREFIX says which test left a kept directory behind).
  explicit TempDir(const std::string& prefix, Cleanup cleanup = Cleanup::kAlways);
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
  Cleanup cleanup_;
};

}  // namespace hpd::testing
