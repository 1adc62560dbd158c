#include "hpd/base/shared_library.h"

#include <dlfcn.h>

namespace hpd {

SharedLibrary::SharedLibrary(const char* soname, const char* package) : soname_(soname) {
  handle_ = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* why = dlerror();
    error_ = "cannot load " + soname_ + " (Debian package " + package +
             "): " + (why != nullptr ? why : "unknown error");
  }
}

void* SharedLibrary::symbol(const char* name) {
  if (handle_ == nullptr) return nullptr;
  void* fn = dlsym(handle_, name);
  if (fn == nullptr && error_.empty()) error_ = soname_ + " lacks " + name;
  return fn;
}

}  // namespace hpd
