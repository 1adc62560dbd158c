// hpd's export request: a window of the continuous profile, symbolized into the client's descriptor.
#include <string>
#include <vector>

#include "connection.h"
#include "daemon.h"

#ifdef HPD_HAVE_CONTINUOUS
#include "hpd/continuous/continuous.h"
#include "hpd/export/firefox.h"
#include "hpd/symbolizer/convert.h"
#include "hpd/symbolizer/symbolizer.h"
#endif

namespace hpd::service {

using nlohmann::json;

void Connection::handle_export(const Request& request, Frame& frame) {
  UniqueFd output(frame.take_fd());
#ifdef HPD_HAVE_CONTINUOUS
  const std::string dir = daemon_.continuous_directory();
  if (dir.empty()) {
    send_error(ErrorCode::kUnavailable,
               "continuous mode is off in this hpd (set continuous = on in hpd.conf and reload with SIGHUP)");
    return;
  }
  if (!privileged_) {
    log_refusal("an export", "exporting the continuous profile is reserved to root and the group");
    send_error(ErrorCode::kPermissionDenied,
               "the continuous profile holds every process of the system; exporting "
               "it is reserved to root and the '" +
                   group_ +
                   "' group; ask an "
                   "administrator to add you to the '" +
                   group_ + "' group");
    return;
  }
  if (!output) {
    send_error(ErrorCode::kBadRequest, "no output descriptor came with the export request (SCM_RIGHTS)");
    return;
  }
  const json j = json::parse(request.text, nullptr, false);
  continuous::ExportFilter filter;
  std::string name = "export.json.gz";
  try {
    const uint64_t now = continuous::unix_now_ns();
    if (j.contains("since") && j["since"].is_string()) {
      filter.since_unix_ns = continuous::parse_time_spec(j["since"].get<std::string>(), now);
    }
    if (j.contains("until") && j["until"].is_string()) {
      filter.until_unix_ns = continuous::parse_time_spec(j["until"].get<std::string>(), now);
    }
    if (j.contains("pids") && j["pids"].is_array()) {
      for (const json& pid : j["pids"]) {
        if (!pid.is_number_integer()) throw std::invalid_argument("\"pids\" must hold integers");
        filter.pids.push_back(pid.get<int32_t>());
      }
    }
    if (j.contains("comms") && j["comms"].is_array()) {
      for (const json& comm : j["comms"]) {
        if (!comm.is_string()) throw std::invalid_argument("\"comms\" must hold strings");
        filter.comms.push_back(comm.get<std::string>());
      }
    }
    if (j.contains("output") && j["output"].is_string()) name = j["output"].get<std::string>();
  } catch (const std::exception& e) {
    send_error(ErrorCode::kBadRequest, e.what());
    return;
  }
  std::vector<std::string> notes;
  try {
    continuous::LoadedChunks loaded = continuous::load_chunk_window(dir, filter, &notes);
    Symbolizer symbolizer;
    ConvertOptions convert_options;
    convert_options.kernel_frames = loaded.profile.info.kernel_frames;
    const Profile profile = symbolize_profile(loaded.profile, symbolizer, convert_options);
    write_firefox_fd(profile, output.get(), session::is_gzip_output(name));
    json done = reply_message("done");
    done["samples"] = loaded.profile.samples.size();
    done["chunks_read"] = loaded.chunks_read;
    done["chunks_skipped"] = loaded.chunks_skipped;
    done["notes"] = notes;
    send(done);
  } catch (const std::exception& e) {
    send_error(ErrorCode::kRecordFailed, std::string("export failed: ") + e.what());
  }
#else
  (void)request;
  send_error(ErrorCode::kUnavailable, "this hpd was built without continuous mode; export is not available");
#endif
}

}  // namespace hpd::service
