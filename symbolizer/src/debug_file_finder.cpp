// DebugFileFinder: the binary tried through the held descriptor, /proc/PID/map_files, /proc/PID/root
// and its path; its debug file through the build-id tree, .gnu_debuglink directories and debuginfod.
#include "debug_file_finder.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>

namespace hpd {
namespace {

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string join_errors(const std::vector<std::string>& errors) {
  std::string out;
  for (const auto& e : errors) {
    if (!out.empty()) out += "; ";
    out += e;
  }
  return out;
}

}  // namespace

DebugFileFinder::DebugFileFinder(std::string debug_root, bool use_debuginfod,
                                 std::function<int(const std::string&, int)> open_file)
    : debug_root_(std::move(debug_root)), use_debuginfod_(use_debuginfod), open_file_(std::move(open_file)) {}

std::unique_ptr<ElfFile> DebugFileFinder::open_elf(const std::string& path, std::string* error,
                                                   bool* denied) {
  if (!open_file_) return ElfFile::open(path, error);
  // Without blocking: a FIFO planted where a file is looked for must not hold the symbolizer.
  UniqueFd fd(open_file_(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) {
    const int e = errno;
    if (denied != nullptr) *denied = e == EACCES || e == EPERM;
    if (error != nullptr) *error = "cannot open " + path + ": " + std::strerror(e);
    return nullptr;
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    if (error != nullptr) *error = path + ": not a regular file";
    return nullptr;
  }
  return ElfFile::open_fd(std::move(fd), path, error);
}

std::unique_ptr<ElfFile> DebugFileFinder::open_debug_candidate(const std::string& path,
                                                               std::vector<std::string>& denied) {
  if (!open_file_ && !is_regular_file(path)) return nullptr;
  bool refused = false;
  auto file = open_elf(path, nullptr, &refused);
  if (refused && std::find(denied.begin(), denied.end(), path) == denied.end()) denied.push_back(path);
  return file;
}

ModuleFiles DebugFileFinder::find(const ModuleRef& ref, ModuleInfo& info) {
  std::vector<std::string> errors;
  std::unique_ptr<ElfFile> mismatched;
  bool binary_denied = false;
  std::vector<std::string> debug_denied;
  std::unique_ptr<ElfFile> binary = open_binary(ref, errors, mismatched, binary_denied);
  std::unique_ptr<ElfFile> debug;
  if (!binary && !ref.build_id.empty()) {
    // The binary is gone or rebuilt, but a debug file with the expected build-id beats a
    // mismatching binary: it carries the same program headers and a full .symtab.
    if (auto p = build_id_path(ref.build_id); !p.empty()) {
      auto file = open_debug_candidate(p, debug_denied);
      if (file && file->build_id() == ref.build_id && !file->segments().empty()) debug = std::move(file);
    }
    // A debug file with the right build-id also beats a mismatching binary. Not when the files are
    // opened with a client's rights (open_file_) and its binary was not opened: the build-id is then
    // hpd's reading, not one the client could have read and asked a server for itself.
    if (!debug && !open_file_) {
      auto file = fetch_debug_file(ref.build_id, info);
      if (file && !file->segments().empty()) debug = std::move(file);
    }
  }
  // What the client could not read and nothing stood in for.
  if (binary_denied && !binary && !debug && !mismatched) info.denied.push_back(ref.path);
  if (!binary && !debug && mismatched) {
    binary = std::move(mismatched);
    info.build_id_mismatch = true;
    info.error = "build-id mismatch: expected " + ref.build_id + ", " + binary->path() + " has " +
                 (binary->build_id().empty() ? std::string("none") : binary->build_id()) +
                 "; symbols may be wrong";
  }
  if (!binary && !debug) {
    for (const std::string& path : debug_denied) info.denied.push_back(path);
    info.error = join_errors(errors);
    if (info.error.empty()) info.error = "cannot read " + ref.path;
    return {};
  }
  if (binary && !binary->has_debug_info()) {
    debug_denied.clear();
    debug = find_debug_file(*binary, ref, info, debug_denied);
    if (!debug)
      for (const std::string& path : debug_denied) info.denied.push_back(path);
  }
  return {std::move(binary), std::move(debug)};
}

std::unique_ptr<ElfFile> DebugFileFinder::open_binary(const ModuleRef& ref, std::vector<std::string>& errors,
                                                      std::unique_ptr<ElfFile>& mismatched, bool& denied) {
  std::vector<std::string> candidates;
  if (!ref.image.empty()) {
    std::string error;
    auto file = ElfFile::open_image(ref.image, ref.path, &error);
    if (file && (ref.build_id.empty() || file->build_id() == ref.build_id)) return file;
    errors.push_back(file ? ref.path + ": the image's build-id " + file->build_id() +
                                " is not the recorded " + ref.build_id
                          : error);
    return nullptr;
  }
  if (ref.path == "[vdso]") {  // no file anywhere: only the image the process mapped describes it
    errors.push_back(
        "[vdso]: its image was not read while the process lived (the process was gone or its memory "
        "unreadable, or the capture was written by an older hpd)");
    return nullptr;
  }
  if (ref.held_fd >= 0) candidates.push_back("/proc/self/fd/" + std::to_string(ref.held_fd));
  if (ref.pid != 0) {
    if (ref.map_end > ref.map_start) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, ref.pid, ref.map_start,
                    ref.map_end);
      candidates.emplace_back(buf);
    }
    if (!ref.path.empty() && ref.path[0] == '/') {
      candidates.push_back("/proc/" + std::to_string(ref.pid) + "/root" + ref.path);
    }
  }
  if (!ref.path.empty()) candidates.push_back(ref.path);
  for (const auto& path : candidates) {
    std::string error;
    bool refused = false;
    auto file = open_elf(path, &error, &refused);
    denied = denied || refused;
    if (!file) {
      // /proc candidates fail routinely (exited process, no permission); report only the path.
      if (path == ref.path) errors.push_back(error);
      continue;
    }
    if (ref.build_id.empty() || file->build_id() == ref.build_id) return file;
    if (!mismatched) mismatched = std::move(file);
  }
  if (candidates.empty()) errors.push_back("no path to open");
  return nullptr;
}

std::string DebugFileFinder::build_id_path(const std::string& build_id) const {
  return hpd::build_id_path(debug_root_, build_id);
}

std::unique_ptr<ElfFile> DebugFileFinder::fetch_debug_file(const std::string& build_id, ModuleInfo& info) {
  if (!use_debuginfod_ || build_id.empty() || !DebuginfodClient::configured()) return nullptr;
  std::string error;
  auto path = debuginfod_.find_debuginfo(build_id, &error);
  if (!path) {
    info.debuginfod_error = error;
    return nullptr;
  }
  // The download is opened with the symbolizer's own rights, not through open_file_: it is a file of
  // libdebuginfod's cache (hpd's, under its state directory, for a session of hpd), whose content
  // the server gives anyone who asks for the build-id, and the build-id is that of a binary the
  // client could open (find() asks only then).
  auto file = ElfFile::open(*path, &error);
  if (!file || file->build_id() != build_id) {
    info.debuginfod_error = "debuginfod: " + *path + (file ? ": build-id differs" : ": " + error);
    return nullptr;
  }
  info.from_debuginfod = true;
  return file;
}

std::unique_ptr<ElfFile> DebugFileFinder::find_debug_file(const ElfFile& binary, const ModuleRef& ref,
                                                          ModuleInfo& info,
                                                          std::vector<std::string>& denied) {
  std::vector<std::string> candidates;
  const std::string& bid = binary.build_id().empty() ? ref.build_id : binary.build_id();
  if (auto p = build_id_path(bid); !p.empty()) candidates.push_back(p);
  if (auto link = binary.debuglink()) {
    std::vector<std::string> dirs{dir_of(binary.path())};
    if (!ref.path.empty() && dir_of(ref.path) != dirs[0]) dirs.push_back(dir_of(ref.path));
    for (const auto& dir : dirs) {
      if (dir.rfind("/proc/", 0) == 0 && dir.find("/map_files") != std::string::npos) continue;
      candidates.push_back(dir + "/" + *link);
      candidates.push_back(dir + "/.debug/" + *link);
      candidates.push_back(debug_root_ + dir + "/" + *link);
    }
  }
  for (const auto& path : candidates) {
    if (path == binary.path()) continue;
    auto file = open_debug_candidate(path, denied);
    if (!file) continue;
    if (!bid.empty() && !file->build_id().empty() && file->build_id() != bid) continue;
    if (file->has_debug_info() || file->section(".symtab")) return file;
  }
  return fetch_debug_file(bid, info);
}

}  // namespace hpd
