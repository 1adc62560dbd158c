// `hpctl report FILE`: exclusive and inclusive attribution per function from a written profile.
#include <iostream>

#include "commands.h"
#include "hpd/export/firefox_reader.h"
#include "hpd/export/report.h"
#include "profile_input.h"

namespace hpd::cli {

int run_report(const ReportArgs& args) {
  // A capture (.hpr, recognized by its magic, not its name) is symbolized here first.
  LoadedProfile loaded = load_profile(args.input, ModuleSearch{});
  print_notes(loaded.notes);
  const Profile& profile = loaded.profile;
  ReportOptions options;
  options.limit = args.limit;
  options.sort = args.sort == "total" ? ReportSort::kTotal : ReportSort::kSelf;
  options.pid = args.pid;
  options.tid = args.tid;
  const Report report = compute_report(profile, options);
  if (args.json) {
    print_report_json(report, std::cout, options);
  } else {
    print_report(report, std::cout, options);
  }
  return 0;
}

}  // namespace hpd::cli
