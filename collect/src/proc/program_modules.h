// The files a program will map when it starts, read from its ELF file before it runs: for the
// --call-graph auto choice (every module's frame setup) and the cfi walk's prewarmed tables.
#pragma once

#include <string>
#include <vector>

namespace hpd {

// The executable, its interpreter and its DT_NEEDED libraries, recursively, found through
// DT_RUNPATH/DT_RPATH ($ORIGIN expanded) and the default library directories (at most 128 files).
std::vector<std::string> likely_modules(const std::string& executable);

}  // namespace hpd
