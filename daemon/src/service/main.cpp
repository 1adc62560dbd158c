// hpd: the profiler's service. Runs in the foreground (systemd Type=notify) and serves hpctl.
#include <malloc.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "hpd/service/config.h"
#include "hpd/service/protocol.h"
#include "hpd/service/server.h"

#ifndef HPD_VERSION
#define HPD_VERSION "unknown"
#endif

namespace {

void print_help() {
  std::printf(
      "Usage: hpd [--config FILE] [--socket PATH]\n"
      "       hpd --check-config [--config FILE]\n"
      "\n"
      "The hpd profiler service: records processes for hpctl clients over a Unix socket, with access\n"
      "control from the client's credentials. Runs in the foreground; stop it with SIGTERM, reload its\n"
      "configuration with SIGHUP. Under systemd it reports readiness (Type=notify), pings the watchdog\n"
      "and accepts a socket passed by socket activation.\n"
      "\n"
      "Options:\n"
      "  --config FILE   configuration file (default %s; defaults when it is missing)\n"
      "  --socket PATH   listen on PATH (default: `socket` of the configuration, %s)\n"
      "  --check-config  print every setting with its effective value and exit (1: the file has problems)\n"
      "  --version       print the version\n"
      "  --help          print this help\n",
      hpd::service::kDefaultConfigPath, hpd::service::kDefaultSocketPath);
}

// `hpd --check-config`: what the service would run with, so that a changed file can be checked
// before SIGHUP. A missing default file means the defaults, as at start.
int check_configuration(const hpd::service::DaemonOptions& options) {
  hpd::service::Config config;
  if (options.config_required || std::filesystem::exists(options.config_path)) {
    try {
      config = hpd::service::load_config(options.config_path);
    } catch (const hpd::service::ConfigError& e) {
      for (const std::string& problem : e.problems()) std::fprintf(stderr, "hpd: %s\n", problem.c_str());
      return 1;
    }
  }
  if (!options.socket_path.empty()) config.socket = options.socket_path;
  std::fputs(hpd::service::format_config(config).c_str(), stdout);
  return 0;
}

// What hpd frees goes back to the system (docs/performance.md, "Memory of the push"). glibc's defaults
// adapt: once a block above the mmap threshold (128 KiB) is freed, the threshold rises to its size (up
// to 32 MiB) and the trim threshold to twice that. hpd frees such blocks whenever it compiles a large
// module's unwind table (libLLVM's rows: 30 MiB), and from then on every arena kept up to 64 MiB of
// free memory at its top, resident, which malloc_trim does not return for a thread's arena: seen as
// +11 to +18 MiB of RssAnon that stayed after one clang++ ran beside a continuous hpd. Fixed
// thresholds: blocks of 256 KiB and more are mapped and unmapped on their own, and an arena returns
// its top once 1 MiB of it is free.
void return_freed_memory() {
  ::mallopt(M_MMAP_THRESHOLD, 256 << 10);
  ::mallopt(M_TRIM_THRESHOLD, 1 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  hpd::service::DaemonOptions options;
  options.config_path = hpd::service::kDefaultConfigPath;
  bool check_config = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string prefix = std::string(name) + "=";
      if (arg.rfind(prefix, 0) == 0) return argv[i] + prefix.size();
      if (i + 1 >= argc) {
        std::fprintf(stderr, "hpd: %s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      print_help();
      return 0;
    }
    if (arg == "--version") {
      std::printf("hpd %s (protocol %u)\n", HPD_VERSION, hpd::service::kProtocolVersion);
      return 0;
    }
    if (arg == "--check-config") {
      check_config = true;
    } else if (arg == "--config" || arg.rfind("--config=", 0) == 0) {
      options.config_path = value("--config");
      options.config_required = true;
    } else if (arg == "--socket" || arg.rfind("--socket=", 0) == 0) {
      options.socket_path = value("--socket");
      if (options.socket_path.empty() || options.socket_path.front() != '/') {
        std::fprintf(stderr, "hpd: --socket needs an absolute path\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "hpd: unknown argument '%s' (see hpd --help)\n", arg.c_str());
      return 2;
    }
  }
  if (check_config) return check_configuration(options);
  return_freed_memory();
  return hpd::service::run_daemon(options);
}
