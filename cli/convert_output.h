// The output half of `hpctl convert`, shared with `hpctl export`: format checks and writing a Profile.
#pragma once

#include <string>

#include "commands.h"
#include "hpd/model/profile.h"

namespace hpd::cli {

// The format to write (--format, else from the output's suffix); throws std::runtime_error when it
// cannot be told or does not go to stdout. Call it before any slow loading.
std::string checked_output_format(const ConvertArgs& args);

// Writes `profile` to args.output in `format` (firefox, pprof, collapsed, report), as convert does.
void write_converted(const Profile& profile, const ConvertArgs& args, const std::string& format);

// llvm-sample, symbol-order (llvm_sample_output.cpp): LLVM's sample profile or a symbol order file
// of one binary (ConvertArgs::binary). Throws std::runtime_error for a binary that is not the one
// recorded, was rebuilt since, or has no debug information.
void write_llvm_sample(const Profile& profile, const ConvertArgs& args, const std::string& format);

}  // namespace hpd::cli
