// The OpenTelemetry Collector of the OTLP tests, loopback sockets, a canned HTTP server.
#include "otel_collector.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace hpd::test {

using nlohmann::json;

LoopbackSocket::LoopbackSocket(bool listening) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      (listening && ::listen(fd_, 4) != 0)) {
    throw std::runtime_error("cannot bind a loopback socket");
  }
  socklen_t len = sizeof a;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
}

LoopbackSocket::~LoopbackSocket() {
  if (fd_ >= 0) ::close(fd_);
}

bool can_connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

uint16_t free_port() {
  return LoopbackSocket(false).port();
}

CannedServer::CannedServer(std::string answer, bool read_all) : socket_(true), answer_(std::move(answer)) {
  thread_ = std::thread([this, read_all] { serve(read_all); });
}

CannedServer::~CannedServer() {
  stop_ = true;
  thread_.join();
}

void CannedServer::serve(bool read_all) {
  while (!stop_) {
    pollfd p{socket_.fd(), POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int c = ::accept4(socket_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    ++connections_;
    std::string request;
    char buf[65536];
    for (;;) {
      pollfd q{c, POLLIN, 0};
      if (::poll(&q, 1, 10000) <= 0) break;
      const ssize_t n = ::read(c, buf, sizeof buf);
      if (n <= 0) break;
      request.append(buf, static_cast<size_t>(n));
      if (!read_all) break;
      const size_t end = request.find("\r\n\r\n");
      if (end == std::string::npos) continue;
      size_t length = 0;
      const size_t cl = request.find("Content-Length: ");
      if (cl != std::string::npos && cl < end) length = std::stoul(request.substr(cl + 16));
      if (request.size() >= end + 4 + length) break;
    }
    (void)!::write(c, answer_.data(), answer_.size());
    ::shutdown(c, SHUT_WR);
    ::close(c);
  }
}

namespace {

void openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  const RunResult r = run(argv, 120);
  if (r.exit_code != 0) {
    std::string line;
    for (const std::string& a : argv) line += a + " ";
    throw std::runtime_error(line + "failed: " + r.err + r.out);
  }
}

// A key and a certificate signed by `ca` (or self-signed when `ca` is empty), with `extensions`.
void make_certificate(const std::string& base, const std::string& subject, const std::string& ca,
                      const std::string& extensions) {
  std::ofstream(base + ".ext") << extensions;
  openssl({"req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", base + ".key", "-subj", subject, "-out",
           base + ".csr"});
  if (ca.empty()) {
    openssl({"x509", "-req", "-in", base + ".csr", "-signkey", base + ".key", "-days", "2", "-extfile",
             base + ".ext", "-out", base + ".pem"});
  } else {
    openssl({"x509", "-req", "-in", base + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
             "-CAcreateserial", "-days", "2", "-extfile", base + ".ext", "-out", base + ".pem"});
  }
}

}  // namespace

TestPki::TestPki(const std::string& dir) {
  const std::string ca_ext = "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n";
  make_certificate(dir + "/ca", "/CN=hpd test CA", "", ca_ext);
  make_certificate(dir + "/other-ca", "/CN=hpd test other CA", "", ca_ext);
  make_certificate(dir + "/server", "/CN=127.0.0.1", dir + "/ca",
                   "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
                   "extendedKeyUsage=serverAuth\n");
  make_certificate(dir + "/client", "/CN=hpd test client", dir + "/ca",
                   "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n");
  ca_cert = dir + "/ca.pem";
  other_ca_cert = dir + "/other-ca.pem";
  server_cert = dir + "/server.pem";
  server_key = dir + "/server.key";
  client_cert = dir + "/client.pem";
  client_key = dir + "/client.key";
}

Collector::Collector(const std::string& dir, const std::string& output, uint16_t port,
                     const std::string& signal, const CollectorTls& tls)
    : port_(port != 0 ? port : free_port()), grpc_port_(free_port()), tls_(!tls.cert_file.empty()) {
  const std::string base = dir + "/otelcol-" + std::to_string(port_);
  const std::string config = base + ".yaml";
  log_path_ = base + ".log";
  // The TLS and auth settings of one protocol's server (confighttp, configgrpc).
  std::string server;
  if (tls_) {
    server += "        tls:\n          cert_file: " + tls.cert_file +
              "\n          key_file: " + tls.key_file + "\n";
    if (!tls.client_ca_file.empty()) server += "          client_ca_file: " + tls.client_ca_file + "\n";
  }
  if (!tls.bearer_token.empty()) server += "        auth:\n          authenticator: bearertokenauth\n";
  std::ofstream out(config);
  out << "receivers:\n"
         "  otlp:\n"
         "    protocols:\n"
         "      http:\n"
         "        endpoint: 127.0.0.1:"
      << port_ << "\n"
      << server;
  if (!tls.http_compression_algorithms.empty())
    out << "        compression_algorithms: " << tls.http_compression_algorithms << "\n";
  out << "      grpc:\n"
         "        endpoint: 127.0.0.1:"
      << grpc_port_ << "\n"
      << server;
  if (!tls.bearer_token.empty())
    out << "extensions:\n  bearertokenauth:\n    token: \"" << tls.bearer_token << "\"\n";
  out << "exporters:\n"
         "  file:\n"
         "    path: "
      << output
      << "\n"
         "service:\n";
  if (!tls.bearer_token.empty()) out << "  extensions: [bearertokenauth]\n";
  out << "  telemetry:\n"
         "    metrics:\n"
         "      level: none\n"
         "  pipelines:\n"
         "    "
      << signal
      << ":\n"
         "      receivers: [otlp]\n"
         "      exporters: [file]\n";
  out.close();
  BackgroundOptions options;
  options.stdout_path = log_path_;
  process_ = std::make_unique<Background>(
      std::vector<std::string>{"/bin/sh", "-c", "exec \"$0\" --config \"$1\" 2>&1", HPD_OTELCOL_PATH, config},
      options);
  // Ready when its receiver accepts connections (or it exited: then the test fails, with its log).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while ((!can_connect(port_) || !can_connect(grpc_port_)) && running() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Collector::~Collector() = default;

::testing::AssertionResult Collector::up() const {
  if (can_connect(port_) && can_connect(grpc_port_)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the collector did not start: " << log();
}

bool Collector::running() const {
  if (!process_) return false;
  const std::string stat = read_text_file("/proc/" + std::to_string(process_->pid()) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

void Collector::stop() {
  // SIGTERM: the file exporter writes what it buffered (up to its flush interval) before it exits;
  // killed, the last requests it accepted could be missing from its file.
  if (process_) process_->terminate();
  process_.reset();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (can_connect(port_) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::vector<json> received_requests(const std::string& path) {
  std::vector<json> out;
  std::istringstream lines(read_text_file(path));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find("resourceProfiles") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.push_back(std::move(j));
  }
  return out;
}

std::vector<json> wait_received_requests(const std::vector<std::string>& paths, size_t want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::vector<json> out;
  for (;;) {
    out.clear();
    for (const std::string& path : paths) {
      for (json& j : received_requests(path)) out.push_back(std::move(j));
    }
    if (out.size() >= want || std::chrono::steady_clock::now() >= deadline) return out;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

json wait_for_profiles(const std::string& path) {
  std::vector<json> requests = wait_received_requests({path}, 1);
  return requests.empty() ? json() : std::move(requests.front());
}

int64_t otlp_int(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return 0;
  const json& v = j.at(key);
  return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>();
}

std::string otlp_string(const json& request, int64_t index) {
  return request.at("dictionary").at("stringTable").at(static_cast<size_t>(index)).get<std::string>();
}

std::string otlp_value(const json& request, const json& value) {
  if (value.contains("stringValue")) return value.at("stringValue").get<std::string>();
  if (value.contains("stringValueStrindex"))
    return otlp_string(request, otlp_int(value, "stringValueStrindex"));
  if (value.contains("intValue")) return std::to_string(otlp_int(value, "intValue"));
  return "";
}

std::map<std::string, std::string> otlp_resource(const json& request, const json& resource_profile) {
  std::map<std::string, std::string> out;
  if (!resource_profile.contains("resource") || !resource_profile.at("resource").contains("attributes"))
    return out;
  for (const json& kv : resource_profile.at("resource").at("attributes")) {
    const std::string key = kv.contains("key") ? kv.at("key").get<std::string>()
                                               : otlp_string(request, otlp_int(kv, "keyStrindex"));
    out[key] = otlp_value(request, kv.at("value"));
  }
  return out;
}

std::pair<std::string, std::string> otlp_attribute(const json& request, int64_t index) {
  const json& a = request.at("dictionary").at("attributeTable").at(static_cast<size_t>(index));
  return {otlp_string(request, otlp_int(a, "keyStrindex")),
          a.contains("value") ? otlp_value(request, a.at("value")) : ""};
}

int64_t otlp_sample_total(const json& sample) {
  int64_t total = 0;
  for (const json& v : sample.at("values"))
    total += v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>();
  return total;
}

}  // namespace hpd::test
