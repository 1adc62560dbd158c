// DebugFileFinder: the binary tried through the held descriptor, /proc/PID/map_files, /proc/PID/root
// and its path; its debug file through the build-id tree, .gnu_debuglink directories and debuginfod.
#include "debug_file_finder.h"

#include <sys/stat.h>

#include <cinttypes>
#include <cstdio>
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

DebugFileFinder::DebugFileFinder(std::string debug_root, bool use_debuginfod)
    : debug_root_(std::move(debug_root)), use_debuginfod_(use_debuginfod) {}

ModuleFiles DebugFileFinder::find(const ModuleRef& ref, ModuleInfo& info) {
  std::vector<std::string> errors;
  std::unique_ptr<ElfFile> mismatched;
  std::unique_ptr<ElfFile> binary = open_binary(ref, errors, mismatched);
  std::unique_ptr<ElfFile> debug;
  if (!binary && !ref.build_id.empty()) {
    // The binary is gone or rebuilt, but a debug file with the expected build-id beats a
    // mismatching binary: it carries the same program headers and a full .symtab.
    if (auto p = build_id_path(ref.build_id); !p.empty() && is_regular_file(p)) {
      auto file = ElfFile::open(p, nullptr);
      if (file && file->build_id() == ref.build_id && !file->segments().empty()) debug = std::move(file);
    }
    if (!debug) {  // a debug file with the right build-id also beats a mismatching binary
      auto file = fetch_debug_file(ref.build_id, info);
      if (file && !file->segments().empty()) debug = std::move(file);
    }
  }
  if (!binary && !debug && mismatched) {
    binary = std::move(mismatched);
    info.build_id_mismatch = true;
    info.error = "build-id mismatch: expected " + ref.build_id + ", " + binary->path() + " has " +
                 (binary->build_id().empty() ? std::string("none") : binary->build_id()) +
                 "; symbols may be wrong";
  }
  if (!binary && !debug) {
    info.error = join_errors(errors);
    if (info.error.empty()) info.error = "cannot read " + ref.path;
    return {};
  }
  if (binary && !binary->has_debug_info()) debug = find_debug_file(*binary, ref, info);
  return {std::move(binary), std::move(debug)};
}

std::unique_ptr<ElfFile> DebugFileFinder::open_binary(const ModuleRef& ref, std::vector<std::string>& errors,
                                                      std::unique_ptr<ElfFile>& mismatched) {
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
    auto file = ElfFile::open(path, &error);
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
  if (build_id.size() < 3) return {};
  return debug_root_ + "/.build-id/" + build_id.substr(0, 2) + "/" + build_id.substr(2) + ".debug";
}

std::unique_ptr<ElfFile> DebugFileFinder::fetch_debug_file(const std::string& build_id, ModuleInfo& info) {
  if (!use_debuginfod_ || build_id.empty() || !DebuginfodClient::configured()) return nullptr;
  std::string error;
  auto path = debuginfod_.find_debuginfo(build_id, &error);
  if (!path) {
    info.debuginfod_error = error;
    return nullptr;
  }
  auto file = ElfFile::open(*path, &error);
  if (!file || file->build_id() != build_id) {
    info.debuginfod_error = "debuginfod: " + *path + (file ? ": build-id differs" : ": " + error);
    return nullptr;
  }
  info.from_debuginfod = true;
  return file;
}

std::unique_ptr<ElfFile> DebugFileFinder::find_debug_file(const ElfFile& binary, const ModuleRef& ref,
                                                          ModuleInfo& info) {
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
    if (path == binary.path() || !is_regular_file(path)) continue;
    auto file = ElfFile::open(path, nullptr);
    if (!file) continue;
    if (!bid.empty() && !file->build_id().empty() && file->build_id() != bid) continue;
    if (file->has_debug_info() || file->section(".symtab") != nullptr) return file;
  }
  return fetch_debug_file(bid, info);
}

}  // namespace hpd
