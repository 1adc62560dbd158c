// One row per function in the terminal report, also where the profile keeps a function as several
// funcs: a func is a (name, source file, library), and a function whose body takes lines from a file
// it #includes (glibc's __vfprintf_internal includes vfprintf-process-arg.c) has one func per file.
// The Firefox and pprof outputs keep the parts, since their functions carry one source file each and
// the source views must put each line in its own file; the report, its trees and its diff join them.
#pragma once

#include <cstdint>
#include <vector>

#include "hpd/model/profile.h"

namespace hpd::report_rows {

// For each func of `p`, the func that stands for its whole function: of the parts of one function,
// the one holding its lowest address (the entry, in the function's own file); itself for every other
// func. Parts are the funcs of outer frames (inline depth 0) of
// one native symbol that carry the same name; two static functions of one name in two files are two
// native symbols, so they stay apart.
std::vector<uint32_t> whole_functions(const Profile& p);

}  // namespace hpd::report_rows
