// SharedLibrary: a library loaded with dlopen when a feature first needs it, rather than linked, so
// that hpctl and hpd do not load and relocate it (and what it needs) at every start: libdebuginfod,
// libcurl (an OTLP push), Capstone (ARM64 code). Never unloaded (libcurl does not support it).
#pragma once

#include <string>

namespace hpd {

class SharedLibrary {
 public:
  // Opens `soname` (RTLD_NOW | RTLD_LOCAL); `package` names the Debian package that has it, for the
  // error when it cannot be opened.
  SharedLibrary(const char* soname, const char* package);

  // Sets `fn` to the function `name`, with the type of the header's declaration (decltype(&f)); null,
  // with error() saying so, when the library is not open or lacks it.
  template <class Fn>
  void get(Fn& fn, const char* name) {
    fn = reinterpret_cast<Fn>(symbol(name));
  }
  // Why the library or one of its functions could not be had (the first problem), "" when all was.
  [[nodiscard]] const std::string& error() const { return error_; }

 private:
  void* symbol(const char* name);

  void* handle_ = nullptr;
  std::string soname_;
  std::string error_;
};

}  // namespace hpd
