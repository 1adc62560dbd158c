// DebuginfodClient over elfutils' libdebuginfod, loaded with dlopen on first use, or a stand-in
// that finds nothing when built without its header.
#include "hpd/symbolizer/debuginfod_client.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "hpd/base/shared_library.h"
#include "hpd/base/unique_fd.h"

#ifdef HPD_HAVE_DEBUGINFOD
#include <elfutils/debuginfod.h>
#endif

namespace hpd {

bool DebuginfodClient::configured() {
#ifdef HPD_HAVE_DEBUGINFOD
  const char* urls = std::getenv("DEBUGINFOD_URLS");
  return urls != nullptr && std::strspn(urls, " \t") != std::strlen(urls);
#else
  return false;
#endif
}

std::optional<std::string> DebuginfodClient::find_debuginfo(const std::string& build_id, std::string* error) {
  return find(Kind::kDebuginfo, build_id, error);
}

std::optional<std::string> DebuginfodClient::find_executable(const std::string& build_id,
                                                             std::string* error) {
  return find(Kind::kExecutable, build_id, error);
}

#ifdef HPD_HAVE_DEBUGINFOD

namespace {

// The functions hpd calls, with the header's own signatures, from the library loaded once per
// process (never unloaded: libcurl does not support being unloaded).
struct Api {
  decltype(&debuginfod_begin) begin = nullptr;
  decltype(&debuginfod_end) end = nullptr;
  decltype(&debuginfod_find_debuginfo) find_debuginfo = nullptr;
  decltype(&debuginfod_find_executable) find_executable = nullptr;
  std::string error;  // why the library could not be used
};

const Api& api() {
  static const Api loaded = [] {
    Api a;
    SharedLibrary lib("libdebuginfod.so.1", "libdebuginfod1");
    lib.get(a.begin, "debuginfod_begin");
    lib.get(a.end, "debuginfod_end");
    lib.get(a.find_debuginfo, "debuginfod_find_debuginfo");
    lib.get(a.find_executable, "debuginfod_find_executable");
    a.error = lib.error();
    return a;
  }();
  return loaded;
}

}  // namespace

DebuginfodClient::~DebuginfodClient() {
  if (client_ != nullptr) api().end(client_);
}

std::optional<std::string> DebuginfodClient::find(Kind kind, const std::string& build_id,
                                                  std::string* error) {
  const auto fail = [&](std::string why) -> std::optional<std::string> {
    if (error != nullptr) *error = "debuginfod: " + std::move(why);
    return std::nullopt;
  };
  if (build_id.empty()) return fail("no build-id to ask for");
  if (!configured()) return fail("DEBUGINFOD_URLS is not set");
  const Api& lib = api();
  if (!lib.error.empty()) return fail(lib.error);
  if (client_ == nullptr && !failed_) {
    client_ = lib.begin();
    failed_ = client_ == nullptr;
  }
  if (client_ == nullptr) return fail("cannot start a libdebuginfod session");
  char* path = nullptr;
  // A build_id_len of 0 means: the id is given as a hex string.
  const auto* id = reinterpret_cast<const unsigned char*>(build_id.c_str());
  const int found = kind == Kind::kDebuginfo ? lib.find_debuginfo(client_, id, 0, &path)
                                             : lib.find_executable(client_, id, 0, &path);
  std::unique_ptr<char, decltype(&std::free)> owned(path, &std::free);
  const char* what = kind == Kind::kDebuginfo ? "debug file" : "executable";
  if (found < 0)
    return fail(std::string("no ") + what + " for build-id " + build_id + ": " + std::strerror(-found));
  const UniqueFd unused(found);  // the caller reopens the cached file by path
  if (path == nullptr) return fail("libdebuginfod returned no path for build-id " + build_id);
  return std::string(path);
}

#else

DebuginfodClient::~DebuginfodClient() = default;

std::optional<std::string> DebuginfodClient::find(Kind, const std::string&, std::string* error) {
  if (error != nullptr)
    *error = "debuginfod: hpd was built without libdebuginfod's header (libdebuginfod-dev)";
  return std::nullopt;
}

#endif

}  // namespace hpd
