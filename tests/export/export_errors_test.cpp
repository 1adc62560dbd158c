// The exporters' one error style: every exporter rejects a broken Profile with model's validation
// message, and their own failures (paths, streams, foreign input, report options) are ExportError.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "hpd/export/collapsed.h"
#include "hpd/export/error.h"
#include "hpd/export/firefox.h"
#include "hpd/export/firefox_reader.h"
#include "hpd/export/pprof.h"
#include "hpd/export/report.h"
#include "hpd/export/report_views.h"
#include "synthetic_profile.h"
#include "temp_dir.h"

namespace hpd {
namespace {

using testing::make_synthetic_profile;

// What `run` threw, as "<type>: <what()>"; "nothing" when it returned.
std::string thrown_by(const std::function<void()>& run) {
  try {
    run();
  } catch (const InvalidProfileError& e) {
    return std::string("InvalidProfileError: ") + e.what();
  } catch (const ExportError& e) {
    return std::string("ExportError: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
  return "nothing";
}

TEST(ExportErrors, EveryExporterRejectsABrokenProfileWithTheSameMessage) {
  Profile p = make_synthetic_profile();
  ASSERT_GT(p.stacks.size(), 3u);
  p.stacks[3].frame = 999;
  const std::string expected = "InvalidProfileError: invalid profile: stack 3 refers to frame 999 of " +
                               std::to_string(p.frames.size());
  std::ostringstream out;
  EXPECT_EQ(thrown_by([&] { write_firefox_json(p, out); }), expected);
  EXPECT_EQ(thrown_by([&] { encode_pprof(p); }), expected);
  EXPECT_EQ(thrown_by([&] { write_collapsed(p, out); }), expected);
  EXPECT_EQ(thrown_by([&] { compute_report(p, ReportOptions{}); }), expected);
  EXPECT_EQ(thrown_by([&] { compute_call_tree(p, ReportOptions{}, "main", CallTreeDirection::kCallees); }),
            expected);
  EXPECT_EQ(thrown_by([&] { annotate_function(p, ReportOptions{}, "main"); }), expected);
  // Nothing was written before the check.
  EXPECT_TRUE(out.str().empty());
}

// A func's latency row pointing past the funcs table was read unchecked by the Firefox writer.
TEST(ExportErrors, AnUncheckedCallLatencyIsNowRejected) {
  Profile p = make_synthetic_profile();
  CallLatency l;
  l.func = static_cast<uint32_t>(p.funcs.size()) + 5;
  l.calls = 1;
  p.call_latency.push_back(l);
  std::ostringstream out;
  EXPECT_EQ(thrown_by([&] { write_firefox_json(p, out); }),
            "InvalidProfileError: invalid profile: call latency 0 refers to func " +
                std::to_string(p.funcs.size() + 5) + " of " + std::to_string(p.funcs.size()));
}

TEST(ExportErrors, OwnFailuresAreExportErrors) {
  const Profile p = make_synthetic_profile();
  testing::TempDir dir;
  const std::string to_dir = thrown_by([&] { write_firefox_file(p, dir.path()); });
  EXPECT_EQ(to_dir, "ExportError: cannot write '" + dir.path() + "': it is a directory; give a file name");
  std::ofstream closed;  // never opened: every write fails
  EXPECT_EQ(thrown_by([&] { write_firefox_json(p, closed); }),
            "ExportError: writing the profile to the output stream failed");

  const std::string not_json = dir.file("not.json");
  std::ofstream(not_json) << "hello";
  const std::string read = thrown_by([&] { read_firefox_file(not_json); });
  EXPECT_EQ(read.rfind("ExportError: " + not_json + ": not a JSON document", 0), 0u) << read;
  const std::string foreign = thrown_by([&] { parse_firefox_json("{\"meta\": {}}", "x.json"); });
  EXPECT_EQ(foreign.rfind("ExportError: x.json: not a Firefox processed profile", 0), 0u) << foreign;

  ReportOptions bad_regex;
  bad_regex.function = "(";
  const std::string report = thrown_by([&] { compute_report(p, bad_regex); });
  EXPECT_EQ(report.rfind("ExportError: --function (", 0), 0u) << report;
  const std::string lookup = thrown_by([&] { find_functions(p, "no_such_function_anywhere"); });
  EXPECT_EQ(lookup, "ExportError: no function of the profile matches no_such_function_anywhere");
}

}  // namespace
}  // namespace hpd
