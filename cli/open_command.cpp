// `hpctl open FILE`: serves a profile on 127.0.0.1 under a random token and opens the Firefox
// Profiler on it, with the symbol-server API (source and assembly views) answered by SymbolApi.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "commands.h"
#include "hpd/base/hex.h"
#include "hpd/capture/capture.h"
#include "hpd/export/firefox.h"
#include "local_http_server.h"
#include "profile_input.h"
#include "symbol_api.h"

extern char** environ;

namespace hpd::cli {
namespace {

std::atomic<bool> g_open_stop{false};

void on_open_stop(int) {
  g_open_stop.store(true);
}

// 128 random bits as hex: the URL path prefix without which the server answers 404, so that other
// local users and web pages cannot read the profile or the machine's sources through it.
std::string random_token() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  return to_hex(bytes);
}

// Percent-encodes everything but unreserved characters (RFC 3986), so a URL can be a path segment
// or a query value of another URL.
std::string url_encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
        c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      append_hex_byte(out, c, HexCase::kUpper);
    }
  }
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Starts `opener URL` without waiting for it; false when it cannot be started (not installed).
// The opener's own output is discarded: xdg-open prints nothing useful when it works.
bool start_browser(const std::string& opener, const std::string& url) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::string arg0 = opener, arg1 = url;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, opener.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return false;
  // xdg-open hands the URL to a browser and exits; its status says whether that worked.
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

int run_open(const OpenArgs& args) {
  LoadedProfile loaded = load_profile(args.input, ModuleSearch{});
  print_notes(loaded.notes);
  const Profile& profile = loaded.profile;

  // A Firefox profile written by hpctl is served as it is (gzip bytes with Content-Encoding: gzip,
  // which the browser undoes); a capture is symbolized above and served as JSON.
  std::string body;
  bool gzip = false;
  if (loaded.from_capture) {
    std::ostringstream json;
    write_firefox_json(profile, json);
    body = json.str();
  } else {
    body = read_file(args.input);
    gzip = body.size() >= 2 && static_cast<unsigned char>(body[0]) == 0x1f &&
           static_cast<unsigned char>(body[1]) == 0x8b;
  }

  SymbolApi api(profile);
  LocalHttpServer server(args.port);
  const std::string token = random_token();
  const std::string prefix = "/" + token;
  const std::string server_url = "http://127.0.0.1:" + std::to_string(server.port()) + prefix;
  const std::string profile_url = server_url + "/profile.json";
  std::string profiler = args.profiler_url;
  while (ends_with(profiler, "/")) profiler.pop_back();
  const std::string url =
      profiler + "/from-url/" + url_encode(profile_url) + "/?symbolServer=" + url_encode(server_url);

  auto handle = [&](const HttpRequest& request) {
    HttpResponse response;
    const std::string path = request.target.substr(0, request.target.find('?'));
    if (path.compare(0, prefix.size() + 1, prefix + "/") != 0) {
      // Without the token: nothing, not even CORS headers.
      response.status = 404;
      return response;
    }
    const std::string route = path.substr(prefix.size());
    // The profiler runs on another origin (https://profiler.firefox.com): allow it to read answers.
    response.headers.emplace_back("Access-Control-Allow-Origin", "*");
    if (request.method == "OPTIONS") {
      response.status = 204;
      response.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      const std::string wanted = request.header("access-control-request-headers");
      if (!wanted.empty()) response.headers.emplace_back("Access-Control-Allow-Headers", wanted);
      // Chrome asks before a public https page may reach a loopback address.
      if (!request.header("access-control-request-private-network").empty()) {
        response.headers.emplace_back("Access-Control-Allow-Private-Network", "true");
      }
      response.headers.emplace_back("Access-Control-Max-Age", "86400");
      return response;
    }
    if (request.method == "GET" && route == "/profile.json") {
      response.headers.emplace_back("Content-Type", "application/json; charset=UTF-8");
      if (gzip) response.headers.emplace_back("Content-Encoding", "gzip");
      response.body = body;
      return response;
    }
    if (request.method == "POST" && (route == "/source/v1" || route == "/asm/v1")) {
      response.headers.emplace_back("Content-Type", "application/json");
      response.body = route == "/source/v1" ? api.source_v1(request.body) : api.asm_v1(request.body);
      return response;
    }
    response.status = 404;
    return response;
  };

  struct sigaction sa {};
  sa.sa_handler = on_open_stop;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  std::printf("Serving %s on http://127.0.0.1:%u (this machine only) until Ctrl-C.\n", args.input.c_str(),
              server.port());
  std::printf("Firefox Profiler: %s\n", url.c_str());
  std::fflush(stdout);
  if (!args.no_browser) {
    const char* browser = std::getenv("BROWSER");
    const std::string opener = browser != nullptr && *browser != '\0' ? browser : "xdg-open";
    if (!start_browser(opener, url)) {
      std::fprintf(stderr,
                   "hpctl: could not start a browser (%s); open the URL above in one on this machine\n",
                   opener.c_str());
    }
  }
  server.serve(handle, g_open_stop);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return 0;
}

}  // namespace hpd::cli
