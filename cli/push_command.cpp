// `hpctl push FILE --endpoint URL`: a saved recording (a .hpr capture, symbolized here, or a
// Firefox profile written by hpctl) sent as OTLP profiles over HTTP/protobuf to an OpenTelemetry
// Collector (hpd/export/otlp_profiles.h), through libcurl (hpd/session/otlp_push.h, which hpd's
// continuous mode pushes its chunks with). Without --endpoint, the endpoint and TLS settings of
// hpd.conf's push (hpd/service/config.h), when the caller can read them: to every endpoint it names.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "hpd/export/otlp_profiles.h"
#include "hpd/service/config.h"
#include "hpd/session/otlp_push.h"
#include "profile_input.h"

namespace hpd::cli {

namespace {

// The push settings of hpd.conf, for a push without --endpoint: the caller must be able to read the
// file and every file of credentials it names (root, when it names any); else an error that says to
// give --endpoint. Never a default endpoint.
service::Config push_settings_of(const std::string& path) {
  const std::string give =
      ": give --endpoint URL (and --ca-file, --client-cert, --client-key, --headers-file "
      "as the endpoint needs)";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw std::runtime_error("no --endpoint, and there is no " + path + " to take hpd's push endpoint from" +
                             give);
  service::Config config;
  try {
    config = service::load_config(path);
  } catch (const service::ConfigError& e) {
    std::string problems;
    for (const std::string& p : e.problems()) problems += (problems.empty() ? "" : "; ") + p;
    throw std::runtime_error("no --endpoint, and hpd's push settings cannot be read" +
                             std::string(::geteuid() != 0 ? " (they are root's)" : "") + ": " + problems +
                             give);
  }
  if (service::push_endpoints_of(config).empty())
    throw std::runtime_error("no --endpoint, and " + path + " sets no otlp_endpoint" + give);
  return config;
}

}  // namespace

namespace {

// One endpoint to send to: its URL and its transport settings.
struct PushTarget {
  std::string url;
  session::PushOptions push;
};

// The endpoint of the flags (--endpoint and its TLS flags), checked before anything is read or sent.
PushTarget target_of(const PushArgs& args, const std::vector<std::string>& conf_headers, bool from_conf) {
  PushTarget target;
  try {
    target.url = session::otlp_profiles_url(args.otlp_endpoint);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string(from_conf ? "otlp_endpoint " : "--endpoint ") + e.what());
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
  session::PushOptions& push = target.push;
  push.timeout_s = args.timeout_s > 0 ? args.timeout_s : 30;
  if (!args.compression.empty() && !session::parse_push_compression(args.compression, push.compression))
    throw std::runtime_error("--compression '" + args.compression + "': give gzip or none");
  push.user_agent = "hpctl/" HPD_VERSION;
  push.ca_file = args.ca_file;
  push.client_cert = args.client_cert;
  push.client_key = args.client_key;
  push.headers = conf_headers;
  if (!args.headers_file.empty()) {
    try {
      push.headers = session::read_push_headers_file(args.headers_file, ::geteuid());
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(std::string("--headers-file ") + e.what());
    }
  }
  return target;
}

}  // namespace

int run_push(const PushArgs& given) {
  // Without --endpoint: every endpoint of hpd.conf (the unsuffixed keys' and each otlp_endpoint.NAME),
  // each with its own TLS settings and timeout, hpd's labels; a flag given wins for each of them.
  std::vector<PushTarget> targets;
  std::vector<std::pair<std::string, std::string>> conf_labels;
  const bool from_conf = given.otlp_endpoint.empty();
  if (from_conf) {
    const service::Config conf = push_settings_of(given.config_path);
    conf_labels = conf.push_labels;
    for (const service::PushEndpoint& e : service::push_endpoints_of(conf)) {
      PushArgs args = given;
      args.otlp_endpoint = e.otlp_endpoint;
      if (args.timeout_s <= 0) args.timeout_s = e.timeout_s;
      if (args.compression.empty() && e.compression) args.compression = session::to_string(*e.compression);
      if (args.ca_file.empty()) args.ca_file = e.ca_file;
      if (args.client_cert.empty() && args.client_key.empty()) {
        args.client_cert = e.client_cert;
        args.client_key = e.client_key;  // root's, mode 0600 or 0400: checked by the parser
      }
      targets.push_back(
          target_of(args, args.headers_file.empty() ? e.headers : std::vector<std::string>{}, true));
    }
  } else {
    targets.push_back(target_of(given, {}, false));
  }
  const PushArgs& args = given;
  ModuleSearch symbolize;
  symbolize.debug_dirs = args.debug_dirs;
  symbolize.debuginfod = !args.no_debuginfod;
  LoadedProfile loaded = load_profile(args.input, symbolize);
  if (!args.quiet) print_notes(loaded.notes);
  OtlpProfilesOptions options;
  options.scope_version = HPD_VERSION;
  options.resource_labels = conf_labels;
  for (const std::string& label : args.labels) {
    const size_t eq = label.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::runtime_error("--label '" + label + "': give KEY=VALUE");
    options.resource_labels.emplace_back(label.substr(0, eq), label.substr(eq + 1));
  }
  const std::string body = encode_otlp_profiles(loaded.profile, options);
  // Each endpoint in turn; one that fails does not keep the recording from the others.
  std::string failures;
  for (const PushTarget& target : targets) {
    session::PushedBytes pushed;
    try {
      pushed = session::post_otlp_profiles(target.url, body, target.push);
    } catch (const std::exception& e) {
      if (targets.size() == 1) throw;
      std::fprintf(stderr, "hpctl: pushing %s to %s failed: %s\n", args.input.c_str(), target.url.c_str(),
                   e.what());
      failures += (failures.empty() ? "" : ", ") + target.url;
      continue;
    }
    if (!args.quiet) {
      // The request body as it went on the wire, and its size before compression when it was compressed.
      const std::string compressed = target.push.compression == session::PushCompression::kNone
                                         ? std::string()
                                         : std::string(" ") + session::to_string(target.push.compression) +
                                               ", " + std::to_string(pushed.uncompressed) + " uncompressed";
      std::fprintf(stderr, "hpctl: pushed %s to %s (OTLP profiles, %zu bytes%s, %zu threads)%s\n",
                   args.input.c_str(), target.url.c_str(), pushed.body, compressed.c_str(),
                   loaded.profile.threads.size(),
                   from_conf ? (" with the push settings of " + args.config_path).c_str() : "");
    }
  }
  if (!failures.empty())
    throw std::runtime_error("the push to " + failures + " failed (the others got the recording)");
  return 0;
}

}  // namespace hpd::cli
