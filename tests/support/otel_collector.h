// The real OpenTelemetry Collector the OTLP tests push to (built by the suite from its Go modules,
// packaging/otelcol, target hpd_otelcol), on a loopback port, writing what it receives with its file
// exporter; and loopback sockets and a canned server for the endpoints that are not a collector.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "subprocess.h"

namespace hpd::test {

// A loopback TCP socket bound to a port the kernel picks; listening or not.
class LoopbackSocket {
 public:
  explicit LoopbackSocket(bool listening);
  ~LoopbackSocket();
  LoopbackSocket(const LoopbackSocket&) = delete;
  LoopbackSocket& operator=(const LoopbackSocket&) = delete;
  int fd() const { return fd_; }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// Whether something accepts connections on 127.0.0.1:port.
bool can_connect(uint16_t port);
// A port nothing listens on now (bound, then released); a server takes it a moment later.
uint16_t free_port();

// A server that answers each connection with `answer` after reading the request (headers, and a
// body of Content-Length bytes), or after the first bytes when `read_all` is false (a TLS hello).
class CannedServer {
 public:
  CannedServer(std::string answer, bool read_all);
  ~CannedServer();
  uint16_t port() const { return socket_.port(); }
  int connections() const { return connections_; }

 private:
  void serve(bool read_all);

  LoopbackSocket socket_;
  std::string answer_;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

// A test PKI made with openssl in `dir`: a CA, a server certificate for 127.0.0.1 and localhost and a
// client certificate, both signed by it, and another CA that signed neither (a wrong CA). Throws
// std::runtime_error with openssl's output when a step fails.
struct TestPki {
  explicit TestPki(const std::string& dir);
  std::string ca_cert, server_cert, server_key, client_cert, client_key, other_ca_cert;
};

// TLS and authentication of the collector's OTLP receiver (HTTP and gRPC alike).
struct CollectorTls {
  std::string cert_file, key_file;  // "" = no TLS
  std::string client_ca_file;       // "" = no client certificate asked for
  std::string bearer_token;         // "" = no token asked for (the bearertokenauth extension)
  // The HTTP receiver's compression_algorithms, a YAML list ("" = its default, which takes gzip);
  // `[""]` takes uncompressed requests only.
  std::string http_compression_algorithms;
};

// The collector (hpd-otelcol, built by the target hpd_otelcol into BUILD/otelcol: a test that starts
// one depends on that target) with one pipeline, profiles: otlp (HTTP on
// 127.0.0.1:port, gRPC on another free port) -> file (`output`, one line of OTLP JSON per request received),
// its own metrics off. Its configuration and log are DIR/otelcol-PORT.yaml and .log. The constructor returns
// when the receiver accepts connections, or the collector exited, or after 120 s. `signal` "traces" makes a
// collector without the profiles pipeline (its receiver does not serve profiles). `tls` makes both
// receivers TLS (https://, grpcs://), asking for a client certificate and a bearer token when it says so.
class Collector {
 public:
  Collector(const std::string& dir, const std::string& output, uint16_t port = 0,
            const std::string& signal = "profiles", const CollectorTls& tls = {});
  ~Collector();
  uint16_t port() const { return port_; }
  uint16_t grpc_port() const { return grpc_port_; }
  bool running() const;  // not exited
  // Success when both receivers accept connections; else a failure with the collector's log
  // (ASSERT_TRUE(collector.up())).
  ::testing::AssertionResult up() const;
  std::string endpoint() const {
    return (tls_ ? "https" : "http") + std::string("://127.0.0.1:") + std::to_string(port_);
  }
  std::string grpc_endpoint() const {
    return (tls_ ? "grpcs" : "grpc") + std::string("://127.0.0.1:") + std::to_string(grpc_port_);
  }
  std::string log() const { return read_text_file(log_path_); }
  void stop();  // SIGKILL; the receiver's port is free again

 private:
  uint16_t port_;
  uint16_t grpc_port_;
  bool tls_ = false;
  std::string log_path_;
  std::unique_ptr<Background> process_;
};

// The complete JSON lines of `path` that hold resourceProfiles (requests the file exporter wrote).
std::vector<nlohmann::json> received_requests(const std::string& path);
// Those of every file of `paths` (one after the other), waiting up to 60 s until there are `want`.
std::vector<nlohmann::json> wait_received_requests(const std::vector<std::string>& paths, size_t want);
// The first one, waiting up to 60 s for the file exporter to write it; null when none came.
nlohmann::json wait_for_profiles(const std::string& path);

// An integer of OTLP JSON, which writes 64-bit integers as strings and leaves zero values out.
int64_t otlp_int(const nlohmann::json& j, const char* key);

// Reading a request the collector wrote (ExportProfilesServiceRequest as OTLP JSON): the string at
// `index` of its dictionary's string table.
std::string otlp_string(const nlohmann::json& request, int64_t index);
// An AnyValue as text: inline, or (pdata moves strings into the dictionary) as a string index.
std::string otlp_value(const nlohmann::json& request, const nlohmann::json& value);
// The attributes of a resourceProfiles entry's resource, by key.
std::map<std::string, std::string> otlp_resource(const nlohmann::json& request,
                                                 const nlohmann::json& resource_profile);
// Entry `index` of the dictionary's attribute table: (key, value).
std::pair<std::string, std::string> otlp_attribute(const nlohmann::json& request, int64_t index);
// The sum of a sample's values.
int64_t otlp_sample_total(const nlohmann::json& sample);

}  // namespace hpd::test
