// DebuginfodClient over elfutils' libdebuginfod, or a stand-in that finds nothing when built without it.
#include "debuginfod_client.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#ifdef HPD_HAVE_DEBUGINFOD
#include <elfutils/debuginfod.h>
#endif

namespace hpd {

#ifdef HPD_HAVE_DEBUGINFOD

DebuginfodClient::~DebuginfodClient() {
  if (client_ != nullptr) debuginfod_end(client_);
}

bool DebuginfodClient::configured() {
  const char* urls = std::getenv("DEBUGINFOD_URLS");
  return urls != nullptr && std::strspn(urls, " \t") != std::strlen(urls);
}

std::optional<std::string> DebuginfodClient::find_debuginfo(const std::string& build_id, std::string* error) {
  const auto fail = [&](std::string why) -> std::optional<std::string> {
    if (error != nullptr) *error = "debuginfod: " + std::move(why);
    return std::nullopt;
  };
  if (build_id.empty()) return fail("no build-id to ask for");
  if (!configured()) return fail("DEBUGINFOD_URLS is not set");
  if (client_ == nullptr && !failed_) {
    client_ = debuginfod_begin();
    failed_ = client_ == nullptr;
  }
  if (client_ == nullptr) return fail("cannot start a libdebuginfod session");
  char* path = nullptr;
  // A build_id_len of 0 means: the id is given as a hex string.
  const int fd =
      debuginfod_find_debuginfo(client_, reinterpret_cast<const unsigned char*>(build_id.c_str()), 0, &path);
  std::unique_ptr<char, decltype(&std::free)> owned(path, &std::free);
  if (fd < 0) return fail("no debug file for build-id " + build_id + ": " + std::strerror(-fd));
  ::close(fd);  // the caller reopens the cached file by path
  if (path == nullptr) return fail("libdebuginfod returned no path for build-id " + build_id);
  return std::string(path);
}

#else

DebuginfodClient::~DebuginfodClient() = default;

bool DebuginfodClient::configured() {
  return false;
}

std::optional<std::string> DebuginfodClient::find_debuginfo(const std::string&, std::string* error) {
  if (error != nullptr) *error = "debuginfod: hpd was built without libdebuginfod";
  return std::nullopt;
}

#endif

}  // namespace hpd
