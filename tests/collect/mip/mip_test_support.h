// Helpers for the MIP tests: fixture paths, ELF symbol tables, and fixture processes driven over pipes.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hpd/mip/mip.h"
#include "temp_dir.h"

namespace hpd::mip::test {

// What mip_calls.c does, by construction. order 0 = not called.
struct Expected {
  const char* name;  // C name (the clang fixture is C++: matched on the demangled name before '(')
  uint64_t calls;
  uint64_t order;
};
// Before the first line on stdin (late not yet called), or after it.
std::vector<Expected> calls_fixture_expected(bool after_late);

// The function whose demangled name, up to '(', is `base`; nullptr if none.
const Function* find_base(const Module& m, const std::string& base);

// Checks every expected count and first-call order, the never-called list, and the block coverage of
// setup (one block never taken), leaf and never_called. Returns "" or a description of the first mismatch.
std::string check_calls_fixture(const Module& m, bool after_late);

// Checks every function's address and size against the ELF symbol table of `binary`
// (file_address when `runtime` is false, runtime_address - load_bias when true). "" or the first mismatch.
std::string check_against_symbols(const Module& m, const std::string& binary, bool runtime);

// Path of a fixture built by tests/collect/mip/CMakeLists.txt.
std::string fixture(const std::string& name);

struct ElfSymbol {
  uint64_t value = 0;
  uint64_t size = 0;
};
// Function symbols of .symtab by name.
std::map<std::string, ElfSymbol> read_function_symbols(const std::string& path);

// The scratch directory shared by all tests (tests/support/temp_dir.h), by its old name here.
using ::hpd::testing::TempDir;

// A fixture process with its stdin and stdout on pipes; killed and reaped on destruction if still running.
class Child {
 public:
  Child(const std::string& path, const std::vector<std::string>& env);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  // Reads stdout until a line equal to `line` arrives; false on EOF or after `timeout_ms`.
  bool wait_for_line(const std::string& line, int timeout_ms = 10000);
  void send_line();
  void close_stdin();
  // Waits for the exit; returns the exit status (or 128 + signal).
  int wait_exit();
  void kill_and_reap();

 private:
  pid_t pid_ = -1;
  int in_ = -1;
  int out_ = -1;
  std::string buffered_;
};

}  // namespace hpd::mip::test
