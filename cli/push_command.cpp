// `hpctl push FILE --otlp-endpoint URL`: a saved recording (a .hpr capture, symbolized here, or a
// Firefox profile written by hpctl) sent as OTLP profiles over HTTP/protobuf to an OpenTelemetry
// Collector (hpd/export/otlp_profiles.h), through libcurl (hpd/session/otlp_push.h, which hpd's
// continuous mode pushes its chunks with).
#include <cstdio>
#include <stdexcept>
#include <string>

#include "commands.h"
#include "hpd/export/otlp_profiles.h"
#include "hpd/session/otlp_push.h"
#include "profile_input.h"

namespace hpd::cli {

int run_push(const PushArgs& args) {
  std::string url;
  try {
    url = session::otlp_profiles_url(args.otlp_endpoint);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string("--otlp-endpoint ") + e.what());
  }
  ModuleSearch symbolize;
  symbolize.debug_dirs = args.debug_dirs;
  symbolize.debuginfod = !args.no_debuginfod;
  LoadedProfile loaded = load_profile(args.input, symbolize);
  if (!args.quiet) print_notes(loaded.notes);
  OtlpProfilesOptions options;
  options.scope_version = HPD_VERSION;
  for (const std::string& label : args.labels) {
    const size_t eq = label.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::runtime_error("--label '" + label + "': give KEY=VALUE");
    options.resource_labels.emplace_back(label.substr(0, eq), label.substr(eq + 1));
  }
  const std::string body = encode_otlp_profiles(loaded.profile, options);
  session::PushOptions push;
  push.timeout_s = args.timeout_s;
  push.user_agent = "hpctl/" HPD_VERSION;
  session::post_otlp_profiles(url, body, push);
  if (!args.quiet) {
    std::fprintf(stderr, "hpctl: pushed %s to %s (OTLP profiles, %zu bytes, %zu threads)\n",
                 args.input.c_str(), url.c_str(), body.size(), loaded.profile.threads.size());
  }
  return 0;
}

}  // namespace hpd::cli
