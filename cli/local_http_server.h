// A small HTTP/1.1 server on 127.0.0.1 for `hpctl open`: one thread, poll(), one request per
// connection (Connection: close), enough for a browser fetching a profile and posting API queries.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "hpd/base/unique_fd.h"

namespace hpd::cli {

struct HttpRequest {
  std::string method;                                        // GET, POST, OPTIONS, ...
  std::string target;                                        // the request target as sent (path and query)
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case
  std::string body;
  // The value of a header (name in lower case), or "" when absent.
  std::string header(const std::string& name) const;
};

struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

class LocalHttpServer {
 public:
  // Listens on 127.0.0.1 at `port` (0 = a port the kernel picks). Throws std::runtime_error.
  explicit LocalHttpServer(uint16_t port = 0);
  ~LocalHttpServer();
  LocalHttpServer(const LocalHttpServer&) = delete;
  LocalHttpServer& operator=(const LocalHttpServer&) = delete;

  uint16_t port() const { return port_; }

  // Answers requests with `handler` until `stop` becomes true (checked at least every 200 ms).
  // A request that cannot be parsed or is too large gets 400 or 413 without reaching the handler.
  void serve(const std::function<HttpResponse(const HttpRequest&)>& handler, const std::atomic<bool>& stop);

 private:
  UniqueFd listen_fd_;
  uint16_t port_ = 0;
};

}  // namespace hpd::cli
