// `hpctl push FILE --endpoint URL`: a saved recording (a .hpr capture, symbolized here, or a
// Firefox profile written by hpctl) sent as OTLP profiles over HTTP/protobuf to an OpenTelemetry
// Collector (hpd/export/otlp_profiles.h), through libcurl (hpd/session/otlp_push.h, which hpd's
// continuous mode pushes its chunks with).
#include <unistd.h>

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
    throw std::runtime_error(std::string("--endpoint ") + e.what());
  }
  // The TLS files and the credentials, checked before the recording is read and anything is sent.
  if (args.client_cert.empty() != args.client_key.empty()) {
    throw std::runtime_error(args.client_cert.empty() ? "--client-key is given without --client-cert"
                                                      : "--client-cert is given without --client-key");
  }
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--ca-file", args.ca_file},
                                   {"--client-cert", args.client_cert},
                                   {"--client-key", args.client_key}}) {
    if (!path.empty() && ::access(path.c_str(), R_OK) != 0)
      throw std::runtime_error(std::string(flag) + " " + path + ": cannot read it");
  }
  // A private key others can read is refused, as a file of headers is: yours, mode 0600 or 0400.
  if (!args.client_key.empty()) {
    try {
      session::check_private_key_file(args.client_key, ::geteuid());
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(std::string("--client-key ") + e.what());
    }
  }
  session::PushOptions push;
  push.timeout_s = args.timeout_s;
  push.user_agent = "hpctl/" HPD_VERSION;
  push.ca_file = args.ca_file;
  push.client_cert = args.client_cert;
  push.client_key = args.client_key;
  if (!args.headers_file.empty()) {
    try {
      push.headers = session::read_push_headers_file(args.headers_file, ::geteuid());
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(std::string("--headers-file ") + e.what());
    }
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
  session::post_otlp_profiles(url, body, push);
  if (!args.quiet) {
    std::fprintf(stderr, "hpctl: pushed %s to %s (OTLP profiles, %zu bytes, %zu threads)\n",
                 args.input.c_str(), url.c_str(), body.size(), loaded.profile.threads.size());
  }
  return 0;
}

}  // namespace hpd::cli
