// `hpctl export`: a time window of the continuous profile hpd keeps on disk, symbolized and written
// as `hpctl convert` writes a capture.
#include <cstdio>
#include <stdexcept>
#include <string>

#include "commands.h"
#include "convert_output.h"
#include "hpd/continuous/continuous.h"
#include "profile_input.h"

namespace hpd::cli {
namespace {

uint64_t parse_time_option(const char* option, const std::string& text, uint64_t now) {
  try {
    return continuous::parse_time_spec(text, now);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string(option) + ": " + e.what());
  }
}

std::string filter_text(const ExportArgs& args) {
  std::string text;
  for (int32_t pid : args.pids)
    text += (text.empty() ? "" : ", ") + std::string("--pid ") + std::to_string(pid);
  for (const std::string& comm : args.comms)
    text += (text.empty() ? "" : ", ") + std::string("--comm ") + comm;
  return text;
}

}  // namespace

int run_export(const ExportArgs& args) {
  const std::string format = checked_output_format(args.output);
  const uint64_t now = continuous::unix_now_ns();
  continuous::ExportFilter filter;
  filter.since_unix_ns = parse_time_option("--since", args.since, now);
  filter.until_unix_ns = args.until.empty() ? now : parse_time_option("--until", args.until, now);
  filter.pids = args.pids;
  filter.comms = args.comms;

  std::vector<std::string> notes;
  continuous::LoadedChunks loaded = continuous::load_chunk_window(args.dir, filter, &notes);
  const std::string window = "between " + continuous::format_unix_time(loaded.since_unix_ns) + " and " +
                             continuous::format_unix_time(loaded.until_unix_ns);
  if (loaded.chunks_read == 0) {
    if (loaded.chunks_skipped != 0) {
      print_notes(notes);
      throw std::runtime_error("none of the " + std::to_string(loaded.chunks_skipped) + " chunks in " +
                               args.dir + " " + window + " could be read (see the notes above)");
    }
    throw std::runtime_error("no chunks in " + args.dir + " " + window +
                             "; is continuous mode on in /etc/hpd/hpd.conf?");
  }
  if (loaded.profile.samples.empty()) {
    if (!args.output.quiet) print_notes(notes);
    const std::string filter = filter_text(args);
    throw std::runtime_error("the " + std::to_string(loaded.chunks_read) + " chunks in " + args.dir + " " +
                             window + " hold no samples" + (filter.empty() ? "" : " of " + filter));
  }

  const size_t samples = loaded.profile.samples.size();
  CaptureContents capture;
  capture.profile = std::move(loaded.profile);
  capture.info.complete = true;
  capture.info.boot_id = loaded.boot_id;  // kernel frames are symbolized only in that boot
  capture.info.notes = std::move(notes);
  ModuleSearch search;
  search.debug_dirs = args.output.debug_dirs;
  search.debuginfod = !args.output.no_debuginfod;
  LoadedProfile profile = cli::symbolize_capture(std::move(capture), search);
  if (!args.output.quiet) {
    print_notes(profile.notes);
    std::fprintf(stderr, "hpctl: %zu chunks %s, %zu samples\n", loaded.chunks_read, window.c_str(), samples);
  }
  write_converted(profile.profile, args.output, format);
  return 0;
}

}  // namespace hpd::cli
