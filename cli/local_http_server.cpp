// The loopback HTTP server of `hpctl open`: accepts on 127.0.0.1 only, reads whole requests with
// poll() so that an idle connection (browsers open some ahead of time) never blocks the others.
#include "local_http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace hpd::cli {
namespace {

constexpr size_t kMaxHeaderBytes = 64 * 1024;
constexpr size_t kMaxBodyBytes = 4 * 1024 * 1024;
constexpr auto kIdleTimeout = std::chrono::seconds(60);

struct Connection {
  UniqueFd fd;
  std::string buffer;
  std::chrono::steady_clock::time_point last_activity;
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return s.substr(b, e - b);
}

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    default: return "Error";
  }
}

// Writes all of `data`; false when the peer went away or stalled past the send timeout.
bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void send_response(int fd, const HttpResponse& response) {
  std::string head = "HTTP/1.1 " + std::to_string(response.status) + " " + reason(response.status) + "\r\n";
  for (const auto& [name, value] : response.headers) head += name + ": " + value + "\r\n";
  head += "Content-Length: " + std::to_string(response.body.size()) + "\r\nConnection: close\r\n\r\n";
  // The connection was read without blocking; the answer is written blocking, with a timeout so
  // that a reader that never reads cannot hold the server forever.
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  timeval timeout{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  if (write_all(fd, head.data(), head.size())) write_all(fd, response.body.data(), response.body.size());
}

// Parses a complete request out of `buffer`. Returns 0 and fills `request` when one is complete,
// -1 when more bytes are needed, or an HTTP status (400, 413) for a request to refuse.
int parse_request(const std::string& buffer, HttpRequest& request) {
  const size_t head_end = buffer.find("\r\n\r\n");
  if (head_end == std::string::npos) return buffer.size() > kMaxHeaderBytes ? 413 : -1;
  const size_t line_end = buffer.find("\r\n");
  const std::string line = buffer.substr(0, line_end);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos) return 400;
  request.method = line.substr(0, sp1);
  request.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  request.headers.clear();
  size_t pos = line_end + 2;
  while (pos < head_end) {
    size_t eol = buffer.find("\r\n", pos);
    if (eol == std::string::npos || eol > head_end) eol = head_end;
    const std::string header = buffer.substr(pos, eol - pos);
    const size_t colon = header.find(':');
    if (colon == std::string::npos) return 400;
    request.headers.emplace_back(lower(trim(header.substr(0, colon))), trim(header.substr(colon + 1)));
    pos = eol + 2;
  }
  size_t length = 0;
  const std::string content_length = request.header("content-length");
  if (!content_length.empty()) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(content_length.c_str(), &end, 10);
    if (errno != 0 || end == content_length.c_str() || *end != '\0') return 400;
    if (n > kMaxBodyBytes) return 413;
    length = static_cast<size_t>(n);
  }
  if (!request.header("transfer-encoding").empty()) return 400;  // chunked bodies: not needed here
  const size_t body_start = head_end + 4;
  if (buffer.size() < body_start + length) return -1;
  request.body = buffer.substr(body_start, length);
  return 0;
}

}  // namespace

std::string HttpRequest::header(const std::string& name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return {};
}

LocalHttpServer::LocalHttpServer(uint16_t port) {
  listen_fd_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listen_fd_) throw std::runtime_error(std::string("cannot create a socket: ") + std::strerror(errno));
  const int one = 1;
  setsockopt(listen_fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // never reachable from another machine
  if (::bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_.get(), 64) != 0) {
    const int e = errno;
    throw std::runtime_error("cannot listen on 127.0.0.1:" + std::to_string(port) + ": " + std::strerror(e));
  }
  socklen_t len = sizeof addr;
  getsockname(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
}

LocalHttpServer::~LocalHttpServer() = default;

void LocalHttpServer::serve(const std::function<HttpResponse(const HttpRequest&)>& handler,
                            const std::atomic<bool>& stop) {
  std::vector<Connection> connections;
  std::vector<pollfd> fds;
  while (!stop.load()) {
    fds.clear();
    fds.push_back({listen_fd_.get(), POLLIN, 0});
    for (const Connection& c : connections) fds.push_back({c.fd.get(), POLLIN, 0});
    const int ready = ::poll(fds.data(), fds.size(), 200);
    if (ready < 0 && errno != EINTR) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    const auto now = std::chrono::steady_clock::now();
    if (ready > 0 && (fds[0].revents & POLLIN)) {
      while (true) {
        const int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        connections.push_back({UniqueFd(fd), {}, now});
      }
    }
    std::vector<Connection> still_open;
    for (size_t i = 0; i < connections.size(); ++i) {
      Connection& c = connections[i];
      const short revents = fds[i + 1].revents;
      bool done = false;
      if (revents & (POLLIN | POLLHUP | POLLERR)) {
        char chunk[16384];
        const ssize_t n = ::recv(c.fd.get(), chunk, sizeof chunk, 0);
        if (n > 0) {
          c.buffer.append(chunk, static_cast<size_t>(n));
          c.last_activity = now;
          HttpRequest request;
          const int parsed = parse_request(c.buffer, request);
          if (parsed == 0) {
            send_response(c.fd.get(), handler(request));
            done = true;
          } else if (parsed > 0) {
            HttpResponse refusal;
            refusal.status = parsed;
            send_response(c.fd.get(), refusal);
            done = true;
          }
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          done = true;
        }
      }
      if (!done && now - c.last_activity > kIdleTimeout) done = true;
      if (!done) still_open.push_back(std::move(c));
    }
    connections = std::move(still_open);
  }
}

}  // namespace hpd::cli
