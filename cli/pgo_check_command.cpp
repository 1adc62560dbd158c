// `hpctl pgo-check PROFILE --binary B`: whether an LLVM sample profile written by `hpctl convert
// --format llvm-sample` is for the binary: its first line's build-id against the binary's, and,
// when they differ, its functions and their declaration lines (its "# decl-line" comments) against
// the binary's DWARF, which tells a rebuilt program from another one and names the functions whose
// start lines moved (their samples would land on the wrong lines).
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"
#include "hpd/base/elf.h"
#include "hpd/symbolizer/sample_lines.h"

namespace hpd::cli {
namespace {

struct ProfileHeader {
  std::string build_id;  // "" = none
  std::string program;   // the binary's file name as written
  std::map<std::string, uint32_t> decl_lines;
  std::vector<std::string> functions;  // top-level names, in file order
};

ProfileHeader read_header(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read '" + path + "'");
  ProfileHeader h;
  const std::string kHead = "# hpd sample profile of ";
  const std::string kDecl = "# decl-line ";
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (first && line.starts_with(kHead)) {
      const size_t id = line.rfind(", build-id ");
      if (id != std::string::npos && id >= kHead.size()) {
        h.program = line.substr(kHead.size(), id - kHead.size());
        h.build_id = line.substr(id + 11);
        if (h.build_id == "none") h.build_id.clear();
      }
    } else if (line.starts_with(kDecl)) {
      const size_t space = line.rfind(' ');
      if (space > kDecl.size()) {
        try {
          h.decl_lines[line.substr(kDecl.size(), space - kDecl.size())] =
              static_cast<uint32_t>(std::stoul(line.substr(space + 1)));
        } catch (const std::exception&) {
        }
      }
    } else if (!line.empty() && line[0] != ' ' && line[0] != '#') {
      const size_t c2 = line.rfind(':');
      const size_t c1 = c2 == std::string::npos || c2 == 0 ? std::string::npos : line.rfind(':', c2 - 1);
      if (c1 == std::string::npos)
        throw std::runtime_error("'" + path + "' is not an LLVM text sample profile");
      h.functions.push_back(line.substr(0, c1));
    }
    first = false;
  }
  if (h.functions.empty() && h.build_id.empty())
    throw std::runtime_error("'" + path +
                             "' holds no sample profile (write one with hpctl convert --format llvm-sample)");
  return h;
}

}  // namespace

int run_pgo_check(const PgoCheckArgs& args) {
  const ProfileHeader h = read_header(args.profile);
  const std::optional<std::string> binary_id = file_build_id(args.binary);
  if (!binary_id) throw std::runtime_error("cannot read '" + args.binary + "' as an ELF file");
  const auto say = [&](const std::string& s) {
    if (!args.quiet) std::printf("%s\n", s.c_str());
  };
  if (!h.build_id.empty() && h.build_id == *binary_id) {
    say("match: " + args.profile + " is a profile of " + args.binary + " (build-id " + h.build_id + ")");
    return kPgoCheckMatch;
  }

  // The functions of the profile in the binary's DWARF, and their declaration lines.
  std::string error;
  std::unique_ptr<SampleLineReader> reader = SampleLineReader::open(args.binary, &error);
  std::map<std::string, uint32_t> binary_lines;
  if (reader) binary_lines = reader->declaration_lines();
  size_t found = 0;
  for (const std::string& f : h.functions) found += binary_lines.count(f);
  std::vector<std::string> moved;
  for (const auto& [name, line] : h.decl_lines) {
    const auto it = binary_lines.find(name);
    if (it != binary_lines.end() && it->second != line) {
      moved.push_back(name + ": line " + std::to_string(line) + " in the profile, " +
                      std::to_string(it->second) + " in the binary");
    }
  }

  int status = 0;
  if (h.build_id.empty() || binary_id->empty()) {
    say(std::string("no build-id: ") +
        (h.build_id.empty() ? "the profile carries none (it was not written by hpctl convert)"
                            : "'" + args.binary + "' has none (link it with -Wl,--build-id)") +
        ", so it cannot be told whether the profile is of this build");
    status = kPgoCheckNoBuildId;
  } else if (reader && found * 2 > h.functions.size()) {
    say("stale: " + args.binary + " (build-id " + *binary_id + ") was rebuilt since the profile of " +
        h.program + " (build-id " + h.build_id + "); " + std::to_string(found) + " of its " +
        std::to_string(h.functions.size()) + " functions are in it");
    status = kPgoCheckStale;
  } else {
    say("another binary: " + args.binary + " (build-id " + *binary_id + ") is not the profiled " + h.program +
        " (build-id " + h.build_id + ")" +
        (reader ? "; " + std::to_string(found) + " of the profile's " + std::to_string(h.functions.size()) +
                      " functions are in it"
                : "; its DWARF cannot be read to compare functions: " + error));
    status = kPgoCheckOtherBinary;
  }
  if (!moved.empty()) {
    say(std::to_string(moved.size()) +
        " functions start on another line than in the profile (their samples would fall on the wrong "
        "lines):");
    for (const std::string& m : moved) say("  " + m);
  }
  return status;
}

}  // namespace hpd::cli
