// `hpctl report FILE`: exclusive and inclusive attribution per function from a written profile.
#include <iostream>

#include "commands.h"
#include "hpd/export/firefox_reader.h"
#include "hpd/export/report.h"

namespace hpd::cli {

int run_report(const ReportArgs& args) {
  const Profile profile = read_firefox_file(args.input);
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
