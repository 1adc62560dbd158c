// The files a program will map when it starts (program_modules.h).
#include "proc/program_modules.h"

#include <unistd.h>

#include <algorithm>
#include <set>

#include "hpd/base/elf.h"

namespace hpd {

namespace {

// DT_NEEDED, DT_RUNPATH/DT_RPATH and PT_INTERP of an ELF file.
struct DynamicInfo {
  std::vector<std::string> needed;
  std::vector<std::string> search;
  std::string interpreter;
};

DynamicInfo read_dynamic(const std::string& path) {
  DynamicInfo info;
  const OpenedElf file = OpenedElf::open(path, ELF_C_READ_MMAP);
  if (!file) return info;
  info.interpreter = file.view().interpreter();
  ElfDynamic dynamic = file.view().dynamic();
  info.needed = std::move(dynamic.needed);
  const std::string origin = path.substr(0, path.rfind('/'));
  for (std::string list : dynamic.search_paths) {
    for (size_t at = list.find("$ORIGIN"); at != std::string::npos; at = list.find("$ORIGIN"))
      list.replace(at, 7, origin);
    for (size_t begin = 0; begin <= list.size();) {
      const size_t end = std::min(list.find(':', begin), list.size());
      if (end > begin) info.search.push_back(list.substr(begin, end - begin));
      begin = end + 1;
    }
  }
  return info;
}

}  // namespace

std::vector<std::string> likely_modules(const std::string& executable) {
  static const char* const kDefaultDirs[] = {
      "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib",
      "/usr/local/lib"};
  std::vector<std::string> out;
  std::vector<std::string> queue = {executable};
  std::set<std::string> seen_names;
  while (!queue.empty() && out.size() < 128) {
    const std::string path = queue.back();
    queue.pop_back();
    if (std::find(out.begin(), out.end(), path) != out.end()) continue;
    out.push_back(path);
    const DynamicInfo info = read_dynamic(path);
    if (!info.interpreter.empty()) queue.push_back(info.interpreter);
    for (const std::string& name : info.needed) {
      if (!seen_names.insert(name).second) continue;
      std::vector<std::string> dirs = info.search;
      dirs.insert(dirs.end(), std::begin(kDefaultDirs), std::end(kDefaultDirs));
      for (const std::string& dir : dirs) {
        const std::string candidate = name.find('/') != std::string::npos ? name : dir + "/" + name;
        if (::access(candidate.c_str(), R_OK) == 0) {
          queue.push_back(candidate);
          break;
        }
      }
    }
  }
  return out;
}

}  // namespace hpd
