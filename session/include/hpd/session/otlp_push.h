// Sending OTLP profiles (hpd/export/otlp_profiles.h) to an OpenTelemetry Collector over
// HTTP/protobuf, through libcurl: the one way a push is made, by `hpctl push` and by hpd's
// continuous mode.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace hpd::session {

// The OTLP/HTTP path of the profiles signal in the collector's OTLP receiver (development version).
inline constexpr const char* kOtlpProfilesPath = "/v1development/profiles";
// The gRPC method of the same receiver.
inline constexpr const char* kOtlpGrpcExportPath =
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";

// The URL to POST to: for http:// and https://, `endpoint` as given when it names a path, else the
// endpoint plus the receiver's profiles path (as OTLP exporters do with OTEL_EXPORTER_OTLP_ENDPOINT);
// for grpc://HOST:PORT (HTTP/2 without TLS) and grpcs://HOST:PORT (with TLS), the endpoint plus the
// gRPC method's path. Throws std::invalid_argument ("'X' is not a URL: ...") for anything else.
std::string otlp_profiles_url(const std::string& endpoint);

// How the request body travels: gzip (RFC 1952, level 6, as OpenTelemetry's exporters send it;
// `Content-Encoding: gzip` over HTTP, the message's compressed flag and `grpc-encoding: gzip` over
// gRPC) or as it is.
enum class PushCompression { kGzip, kNone };

// "gzip" or "none"; false for anything else.
bool parse_push_compression(std::string_view text, PushCompression& out);
const char* to_string(PushCompression compression);

struct PushOptions {
  PushCompression compression = PushCompression::kGzip;
  double timeout_s = 30;                      // the whole transfer
  std::string user_agent = "hpd";             // "hpctl/VERSION", "hpd/VERSION"
  const std::atomic<bool>* cancel = nullptr;  // when set and true, the transfer is abandoned
  // TLS (https://, grpcs://): the server is verified against the CAs of `ca_file` (PEM) instead of
  // the system's when it is set; `client_cert` and `client_key` (PEM) are this side's certificate.
  std::string ca_file;
  std::string client_cert;
  std::string client_key;
  std::vector<std::string> headers;  // "Name: value", sent with the request (credentials)
};

// The headers of a file, one `Name: value` a line (empty lines and lines starting with # skipped),
// for requests that carry credentials (`Authorization: Bearer ...`). The file must be a regular file
// owned by the user `owner_uid` that gives no permission to its group or others (mode 0600 or 0400).
// Throws std::runtime_error saying what is wrong: the file, its owner or mode, or the number of a line
// that is not a header (never a line's text: it may be a secret).
std::vector<std::string> read_push_headers_file(const std::string& path, unsigned owner_uid);

// Checks the private key of a client certificate: a regular file (a link to one is followed) owned by
// the user `owner_uid`, that gives no permission to its group or others (mode 0600 or 0400). Throws
// std::runtime_error saying what is wrong (its owner, its mode), as read_push_headers_file does.
void check_private_key_file(const std::string& path, unsigned owner_uid);

// What a push sent: the request body as it went on the wire (compressed when it was, with gRPC's
// 5-byte message prefix; HTTP headers not counted) and the encoded request before compression.
struct PushedBytes {
  size_t body = 0;
  size_t uncompressed = 0;
};

// POSTs an encoded ExportProfilesServiceRequest to `url` and checks the answer: a 2xx status with an
// ExportProfilesServiceResponse that rejects nothing. A grpc:// or grpcs:// URL is a gRPC call over
// HTTP/2 (the message after its 5-byte prefix; grpc-status 0 from the trailers, or the headers of a
// trailers-only answer). The body is compressed as options.compression says; an endpoint that refuses
// the encoding gets an error that says to set the compression to none. Throws std::runtime_error with one
// line saying what went wrong (nothing listening, not HTTP, a status, garbage, rejected profiles, TLS, no
// answer in time, cancelled).
PushedBytes post_otlp_profiles(const std::string& url, const std::string& body, const PushOptions& options);

}  // namespace hpd::session
