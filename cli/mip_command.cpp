// `hpctl mip show|merge`: MIP (Machine IR Profile) counts of a live process or of dumped .mipraw files.
#include <iostream>
#include <stdexcept>

#include "commands.h"
#include "hpd/mip/mip.h"

namespace hpd::cli {
namespace {

mip::PrintOptions print_options(const MipArgs& args) {
  mip::PrintOptions options;
  if (args.sort == "calls") {
    options.sort = mip::SortOrder::kCalls;
  } else if (args.sort == "name") {
    options.sort = mip::SortOrder::kName;
  } else if (args.sort == "address") {
    options.sort = mip::SortOrder::kAddress;
  } else {
    options.sort = mip::SortOrder::kFirstCall;
  }
  options.include_never_called = !args.hide_never_called;
  return options;
}

// --mipmap MODULE=FILE, or FILE alone (then it applies to the executable's file name).
mip::LiveOptions live_options(const MipArgs& args) {
  mip::LiveOptions options;
  for (const std::string& spec : args.mipmaps) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos) {
      throw std::runtime_error("--mipmap takes MODULE=FILE (MODULE is the mapped path or its file name): '" + spec +
                               "'");
    }
    options.mipmap_files[spec.substr(0, eq)] = spec.substr(eq + 1);
  }
  return options;
}

template <typename T>
void print(const T& what, const MipArgs& args) {
  if (args.json) {
    std::cout << mip::to_json(what) << '\n';
  } else {
    mip::print_table(what, std::cout, print_options(args));
  }
}

}  // namespace

int run_mip_show(const MipArgs& args) {
  if (args.pid != 0) {
    if (!args.files.empty()) throw std::runtime_error("give either --pid or a .mipraw file, not both");
    const mip::Snapshot snapshot = mip::snapshot_process(args.pid, live_options(args));
    if (snapshot.modules.empty() && snapshot.errors.empty()) {
      throw std::runtime_error("process " + std::to_string(args.pid) +
                               " maps no module with a __llvm_mipraw section (was it built with MIP?)");
    }
    print(snapshot, args);
    for (const auto& e : snapshot.errors) std::cerr << "hpctl: " << e.path << ": " << e.message << '\n';
    return snapshot.errors.empty() ? 0 : 1;
  }
  if (args.files.size() != 1) throw std::runtime_error("mip show needs --pid PID, or one FILE.mipraw with --map BINARY");
  if (args.map.empty()) {
    throw std::runtime_error("decoding " + args.files[0] +
                             " needs --map: the instrumented binary or its .mipmap file");
  }
  print(mip::decode_file(args.files[0], args.map), args);
  return 0;
}

int run_mip_merge(const MipArgs& args) {
  if (args.files.empty()) throw std::runtime_error("mip merge needs one or more .mipraw files");
  if (args.map.empty()) throw std::runtime_error("mip merge needs --map: the instrumented binary or its .mipmap file");
  print(mip::merge_files(args.files, args.map), args);
  return 0;
}

}  // namespace hpd::cli
