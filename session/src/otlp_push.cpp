// POSTing OTLP profiles over HTTP/protobuf with libcurl, and checking the collector's answer.
// libcurl is loaded with dlopen on the first push, not linked: linked, it and the 30 libraries it
// needs (TLS, Kerberos, LDAP, ...) were loaded and relocated at every start of hpctl and hpd, about
// 5 ms of CPU and 25 ms of wall time on a busy machine before `hpctl record` could send its request
// (docs/performance.md, "Time to the first sample").
#include "hpd/session/otlp_push.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "hpd/base/shared_library.h"
#include "hpd/base/unique_fd.h"

namespace hpd::session {
namespace {

// The functions used, with the header's own signatures, from the library loaded once per process
// (never unloaded: libcurl does not support being unloaded).
struct Curl {
  decltype(&curl_global_init) global_init = nullptr;
  decltype(&curl_easy_init) easy_init = nullptr;
  decltype(&curl_easy_cleanup) easy_cleanup = nullptr;
  decltype(&curl_easy_setopt) easy_setopt = nullptr;
  decltype(&curl_easy_perform) easy_perform = nullptr;
  decltype(&curl_easy_getinfo) easy_getinfo = nullptr;
  decltype(&curl_easy_strerror) easy_strerror = nullptr;
  decltype(&curl_slist_append) slist_append = nullptr;
  decltype(&curl_slist_free_all) slist_free_all = nullptr;
  std::string error;  // why the library could not be used
};

// libcurl, loaded and initialized on first use; throws std::runtime_error when it cannot be.
const Curl& curl_library() {
  static const Curl loaded = [] {
    Curl c;
    SharedLibrary lib("libcurl.so.4", "libcurl4");
    lib.get(c.global_init, "curl_global_init");
    lib.get(c.easy_init, "curl_easy_init");
    lib.get(c.easy_cleanup, "curl_easy_cleanup");
    lib.get(c.easy_setopt, "curl_easy_setopt");
    lib.get(c.easy_perform, "curl_easy_perform");
    lib.get(c.easy_getinfo, "curl_easy_getinfo");
    lib.get(c.easy_strerror, "curl_easy_strerror");
    lib.get(c.slist_append, "curl_slist_append");
    lib.get(c.slist_free_all, "curl_slist_free_all");
    c.error = lib.error();
    if (!c.error.empty()) return c;
    if (const CURLcode init = c.global_init(CURL_GLOBAL_DEFAULT); init != CURLE_OK)
      c.error = std::string("libcurl: ") + c.easy_strerror(init);
    return c;
  }();
  if (!loaded.error.empty()) throw std::runtime_error(loaded.error);
  return loaded;
}

size_t append_body(char* data, size_t size, size_t count, void* user) {
  auto* body = static_cast<std::string*>(user);
  // A collector's answer is a few bytes; an endpoint that sends more than 1 MiB is not one.
  if (body->size() + size * count > (1u << 20)) return 0;
  body->append(data, size * count);
  return size * count;
}

std::string first_line(const std::string& body) {
  std::string line = body.substr(0, body.find('\n'));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.size() > 200) line = line.substr(0, 200) + "...";
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  return line.empty() ? "(empty body)" : line;
}

// Reads a protobuf varint at `pos`; false at the end of the bytes or after ten bytes.
bool read_varint(std::string_view b, size_t& pos, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && pos < b.size(); shift += 7) {
    const auto byte = static_cast<uint8_t>(b[pos++]);
    v |= uint64_t{byte & 0x7fu} << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

struct ExportResponse {
  uint64_t rejected = 0;
  std::string error_message;
};

// Walks the fields of a protobuf message: `on_field(field, wire type, varint value, bytes of a
// length-delimited field)` for each; false when the bytes are not a message (garbage, an HTML page) or
// `on_field` says so.
template <typename OnField>
bool walk_fields(std::string_view b, OnField&& on_field) {
  size_t pos = 0;
  while (pos < b.size()) {
    uint64_t key = 0;
    if (!read_varint(b, pos, key) || key >> 3 == 0) return false;
    const uint64_t field = key >> 3;
    const auto wire = static_cast<int>(key & 7);
    uint64_t v = 0;
    std::string_view bytes;
    switch (wire) {
      case 0:
        if (!read_varint(b, pos, v)) return false;
        break;
      case 1:
        if (b.size() - pos < 8) return false;
        pos += 8;
        break;
      case 5:
        if (b.size() - pos < 4) return false;
        pos += 4;
        break;
      case 2: {
        uint64_t len = 0;
        if (!read_varint(b, pos, len) || len > b.size() - pos) return false;
        bytes = b.substr(pos, len);
        pos += len;
        break;
      }
      default: return false;
    }
    if (!on_field(field, wire, v, bytes)) return false;
  }
  return true;
}

// Parses an ExportProfilesServiceResponse {partial_success = 1: {rejected_profiles = 1,
// error_message = 2}}; false when the bytes are not that message.
bool parse_response(std::string_view b, ExportResponse& out) {
  return walk_fields(b, [&](uint64_t field, int wire, uint64_t, std::string_view bytes) {
    if (field != 1 || wire != 2) return true;
    return walk_fields(bytes, [&](uint64_t inner, int inner_wire, uint64_t v, std::string_view text) {
      if (inner == 1 && inner_wire == 0) out.rejected = v;
      if (inner == 2 && inner_wire == 2) out.error_message = std::string(text);
      return true;
    });
  });
}

// The message of a google.rpc.Status {code = 1, message = 2, details = 3}, the body an OTLP/HTTP
// endpoint answers an error with (as protobuf, or as JSON for a JSON request); "" when the body is not
// one or its message is not text.
std::string status_message(std::string_view b) {
  std::string message;
  const bool parsed = walk_fields(b, [&](uint64_t field, int wire, uint64_t, std::string_view bytes) {
    if (field == 2 && wire == 2) message = std::string(bytes);
    return field <= 3;
  });
  if (!parsed) return "";
  for (char c : message) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\t') return "";
  }
  return message;
}

// An error answer's text: a Status's message when the body is one, else its first line.
std::string error_text(const std::string& body) {
  const std::string message = status_message(body);
  return message.empty() ? first_line(body) : first_line(message);
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_library().easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_library().slist_free_all(l); }
};

bool is_tls_error(CURLcode code) {
  switch (code) {
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CLIENTCERT:
    case CURLE_USE_SSL_FAILED: return true;
    default: return false;
  }
}

// What went wrong with the transfer, said for the user.
std::string transfer_error(CURLcode code, const std::string& url, const char* detail, double timeout_s) {
  const std::string why = detail[0] != '\0' ? detail : curl_library().easy_strerror(code);
  switch (code) {
    case CURLE_COULDNT_CONNECT:
      return "cannot connect to " + url + ": " + why +
             " (is the collector running, with its OTLP receiver on that address?)";
    case CURLE_COULDNT_RESOLVE_HOST: return "cannot resolve the host of " + url + ": " + why;
    case CURLE_OPERATION_TIMEDOUT: {
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g s", timeout_s);
      return "no answer from " + url + " in time (" + limit + "): " + why;
    }
    case CURLE_ABORTED_BY_CALLBACK: return "sending to " + url + " was cancelled (hpd is stopping)";
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_UNSUPPORTED_PROTOCOL: return url + " did not answer as an HTTP server: " + why;
    case CURLE_WRITE_ERROR: return url + " answered more than 1 MiB: not an OTLP receiver's answer";
    case CURLE_PEER_FAILED_VERIFICATION:
      return "TLS error with " + url + ": " + why +
             " (its certificate is not signed by a CA trusted here: the system's, or the CA file given "
             "by push_ca_file or --ca-file)";
    default:
      if (is_tls_error(code)) return "TLS error with " + url + ": " + why;
      return "sending to " + url + " failed: " + why;
  }
}

// libcurl's progress callback: a non-zero return abandons the transfer.
int cancel_check(void* flag, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<const std::atomic<bool>*>(flag)->load() ? 1 : 0;
}

struct GrpcStatus {
  int code = -1;  // -1: no grpc-status header or trailer
  std::string message;
};

// grpc-message is percent-encoded.
std::string percent_decode(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

// libcurl's header callback, called for the headers and (HTTP/2) the trailers: grpc-status and
// grpc-message, wherever they come.
size_t read_grpc_header(char* data, size_t size, size_t count, void* user) {
  auto* status = static_cast<GrpcStatus*>(user);
  std::string_view line(data, size * count);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return size * count;
  std::string name(line.substr(0, colon));
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (name == "grpc-status") {
    status->code = 0;
    for (char ch : value) {
      if (ch < '0' || ch > '9' || status->code > 1000) {
        status->code = 2;  // UNKNOWN: not a number
        break;
      }
      status->code = status->code * 10 + (ch - '0');
    }
  } else if (name == "grpc-message") {
    status->message = percent_decode(value);
  }
  return size * count;
}

const char* grpc_code_name(int code) {
  static const char* const names[] = {
      "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? names[code] : "unknown code";
}

// Opens a file of credentials (`what`: "a file of credentials", "a private key") and checks it
// through the descriptor, so that what is checked is what is read: a regular file, owned by
// `owner_uid`, no permission for its group or others.
UniqueFd open_owner_only(const std::string& path, unsigned owner_uid, const char* what, int flags,
                         struct stat& st) {
  UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | flags));
  if (!file) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  if (::fstat(file.get(), &st) != 0)
    throw std::runtime_error(path + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw std::runtime_error(path + ": not a regular file");
  if (st.st_uid != owner_uid) {
    throw std::runtime_error(
        path + ": owned by uid " + std::to_string(st.st_uid) + ", not " + std::to_string(owner_uid) + ": " +
        what + " must belong to the user who sends it (chown " + std::to_string(owner_uid) + ")");
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw std::runtime_error(path + ": mode " + mode + " lets its group or others in: " + what +
                             " must be readable by its owner only (chmod 600)");
  }
  return file;
}

// gzip (RFC 1952) at level 6, zlib's default and what OpenTelemetry's Go exporters send.
std::string gzip(std::string_view data) {
  z_stream z{};
  if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("zlib: cannot start gzip compression");
  std::string out(deflateBound(&z, static_cast<uLong>(data.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);  // deflateBound leaves room for all of it in one call
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("zlib: gzip compression failed");
  return out;
}

// The message of a gRPC answer compressed with gzip (its compressed flag set); false when it is not
// gzip or inflates to more than 1 MiB (not an export response).
bool gunzip_answer(std::string_view data, std::string& out) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return false;
  out.assign(1u << 20, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  out.resize(out.size() - z.avail_out);
  inflateEnd(&z);
  return rc == Z_STREAM_END;
}

// Said after an endpoint's refusal that names the request's encoding.
std::string refused_encoding_hint(const PushOptions& options, const std::string& answer) {
  if (options.compression == PushCompression::kNone) return "";
  std::string lower = answer;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("encoding") == std::string::npos && lower.find("compress") == std::string::npos) return "";
  return std::string(" (the endpoint does not take the request compressed with ") +
         to_string(options.compression) +
         ": set push_compression = none in hpd.conf, or give hpctl push --compression none)";
}

}  // namespace

bool parse_push_compression(std::string_view text, PushCompression& out) {
  if (text == "gzip") {
    out = PushCompression::kGzip;
    return true;
  }
  if (text == "none") {
    out = PushCompression::kNone;
    return true;
  }
  return false;
}

const char* to_string(PushCompression compression) {
  return compression == PushCompression::kGzip ? "gzip" : "none";
}

void check_private_key_file(const std::string& path, unsigned owner_uid) {
  // Links are followed (a certbot key is a link into its archive): the file read is the one checked.
  struct stat st {};
  open_owner_only(path, owner_uid, "a private key", 0, st);
}

std::vector<std::string> read_push_headers_file(const std::string& path, unsigned owner_uid) {
  struct stat st {};
  const UniqueFd file = open_owner_only(path, owner_uid, "a file of credentials", O_NOFOLLOW, st);
  if (st.st_size > (64 << 10)) throw std::runtime_error(path + ": larger than 64 KiB: not a file of headers");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(file.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  std::vector<std::string> headers;
  size_t line_number = 0;
  for (size_t at = 0; at < text.size();) {
    ++line_number;
    size_t eol = text.find('\n', at);
    if (eol == std::string::npos) eol = text.size();
    std::string line = text.substr(at, eol - at);
    at = eol + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.front() == '#') continue;
    const size_t colon = line.find(':');
    bool ok = colon != std::string::npos && colon > 0;
    for (size_t i = 0; ok && i < colon; ++i) {
      const auto ch = static_cast<unsigned char>(line[i]);
      ok = std::isalnum(ch) || std::strchr("!#$%&'*+-.^_`|~", ch) != nullptr;  // an HTTP token
    }
    for (size_t i = 0; ok && i < line.size(); ++i) {
      const auto ch = static_cast<unsigned char>(line[i]);
      ok = ch >= 0x20 || ch == '\t';
    }
    size_t value = colon + 1;
    while (ok && value < line.size() && (line[value] == ' ' || line[value] == '\t')) ++value;
    if (!ok || value == line.size()) {
      throw std::runtime_error(path + ":" + std::to_string(line_number) +
                               ": expected a header `Name: value` (e.g. Authorization: Bearer TOKEN)");
    }
    headers.push_back(line);
  }
  if (headers.empty()) throw std::runtime_error(path + ": no header in the file");
  return headers;
}

std::string otlp_profiles_url(const std::string& endpoint) {
  const size_t scheme = endpoint.find("://");
  if (scheme == std::string::npos) {
    throw std::invalid_argument(
        "'" + endpoint +
        "' is not a URL: give http://HOST:PORT or https://HOST:PORT (OTLP/HTTP, port "
        "4318 by default), or grpc://HOST:PORT or grpcs://HOST:PORT (OTLP/gRPC, 4317)");
  }
  const std::string scheme_name = endpoint.substr(0, scheme);
  const bool grpc = scheme_name == "grpc" || scheme_name == "grpcs";
  if (scheme_name != "http" && scheme_name != "https" && !grpc) {
    throw std::invalid_argument("'" + endpoint +
                                "': only http://, https://, grpc:// and grpcs:// are supported");
  }
  if (endpoint.size() == scheme + 3 || endpoint[scheme + 3] == '/') {
    throw std::invalid_argument("'" + endpoint + "' names no host: give " + scheme_name + "://HOST:PORT");
  }
  const size_t path = endpoint.find('/', scheme + 3);
  if (grpc) {
    if (path != std::string::npos && endpoint.size() != path + 1)
      throw std::invalid_argument("'" + endpoint + "': a gRPC endpoint is HOST:PORT, without a path");
    return endpoint.substr(0, path) + kOtlpGrpcExportPath;
  }
  if (path == std::string::npos) return endpoint + kOtlpProfilesPath;
  if (endpoint.size() == path + 1) return endpoint.substr(0, path) + kOtlpProfilesPath;
  return endpoint;
}

PushedBytes post_otlp_profiles(const std::string& url, const std::string& body, const PushOptions& options) {
  const Curl& lib = curl_library();
  std::unique_ptr<CURL, CurlDeleter> curl(lib.easy_init());
  if (!curl) throw std::runtime_error("libcurl: cannot create a transfer");
  // gRPC: HTTP/2 (without TLS: with prior knowledge, as gRPC clients do), the message after a 5-byte
  // prefix (its compressed flag, its length big-endian), the outcome in grpc-status.
  const bool grpc = url.rfind("grpc://", 0) == 0 || url.rfind("grpcs://", 0) == 0;
  const bool gzipped = options.compression == PushCompression::kGzip;
  const std::string transfer_url =
      !grpc ? url : (url[4] == 's' ? "https" : "http") + url.substr(url.find("://"));
  std::string compressed;
  if (gzipped) compressed = gzip(body);
  const std::string& message_sent = gzipped ? compressed : body;
  std::string request_body;
  if (grpc) {
    request_body.reserve(message_sent.size() + 5);
    request_body.push_back(gzipped ? '\1' : '\0');
    for (int shift = 24; shift >= 0; shift -= 8)
      request_body.push_back(static_cast<char>((message_sent.size() >> shift) & 0xff));
    request_body += message_sent;
  }
  const std::string& sent = grpc ? request_body : message_sent;
  std::unique_ptr<curl_slist, SlistDeleter> headers(lib.slist_append(
      nullptr, grpc ? "Content-Type: application/grpc" : "Content-Type: application/x-protobuf"));
  if (grpc) {
    lib.slist_append(headers.get(), "TE: trailers");
    if (gzipped) lib.slist_append(headers.get(), "grpc-encoding: gzip");
    // The answer may come compressed as the request was (grpc-go answers in the request's encoding).
    lib.slist_append(headers.get(),
                     gzipped ? "grpc-accept-encoding: gzip" : "grpc-accept-encoding: identity");
  } else if (gzipped) {
    lib.slist_append(headers.get(), "Content-Encoding: gzip");
  }
  for (const std::string& header : options.headers) {
    if (lib.slist_append(headers.get(), header.c_str()) == nullptr)
      throw std::runtime_error("libcurl: cannot add a header");
  }
  std::string answer;
  GrpcStatus grpc_status;
  char error[CURL_ERROR_SIZE] = {};
  CURL* c = curl.get();
  lib.easy_setopt(c, CURLOPT_URL, transfer_url.c_str());
  lib.easy_setopt(c, CURLOPT_POST, 1L);
  lib.easy_setopt(c, CURLOPT_POSTFIELDS, sent.data());
  lib.easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(sent.size()));
  lib.easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  lib.easy_setopt(c, CURLOPT_WRITEFUNCTION, append_body);
  lib.easy_setopt(c, CURLOPT_WRITEDATA, &answer);
  lib.easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  lib.easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  lib.easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  lib.easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(options.timeout_s * 1000));
  lib.easy_setopt(c, CURLOPT_USERAGENT, options.user_agent.c_str());
  if (!options.ca_file.empty()) lib.easy_setopt(c, CURLOPT_CAINFO, options.ca_file.c_str());
  if (!options.client_cert.empty()) lib.easy_setopt(c, CURLOPT_SSLCERT, options.client_cert.c_str());
  if (!options.client_key.empty()) lib.easy_setopt(c, CURLOPT_SSLKEY, options.client_key.c_str());
  if (grpc) {
    lib.easy_setopt(c, CURLOPT_HTTP_VERSION,
                    url[4] == 's' ? CURL_HTTP_VERSION_2TLS : CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
    lib.easy_setopt(c, CURLOPT_HEADERFUNCTION, read_grpc_header);
    lib.easy_setopt(c, CURLOPT_HEADERDATA, &grpc_status);
  }
  if (options.cancel != nullptr) {
    lib.easy_setopt(c, CURLOPT_XFERINFOFUNCTION, cancel_check);
    lib.easy_setopt(c, CURLOPT_XFERINFODATA, const_cast<std::atomic<bool>*>(options.cancel));
    lib.easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  }
  const CURLcode code = lib.easy_perform(c);
  const auto refused_by_grpc_status = [&] {
    return std::runtime_error(url + " answered gRPC status " + std::to_string(grpc_status.code) + " (" +
                              grpc_code_name(grpc_status.code) + "): " + first_line(grpc_status.message) +
                              refused_encoding_hint(options, grpc_status.message));
  };
  if (code != CURLE_OK) {
    // With TLS 1.3 a server refuses a client certificate (or its lack) after the handshake: libcurl
    // then reports a receive or send error whose text is OpenSSL's alert.
    const bool tls = transfer_url.rfind("https://", 0) == 0;
    if (tls && !is_tls_error(code) &&
        (std::strstr(error, "SSL") != nullptr || std::strstr(error, "alert") != nullptr))
      throw std::runtime_error("TLS error with " + url + ": " + error);
    // Or it closes the connection, and the alert is lost: the handshake was done, no answer came.
    curl_off_t handshake_us = 0;
    long answered = 0;
    lib.easy_getinfo(c, CURLINFO_APPCONNECT_TIME_T, &handshake_us);
    lib.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &answered);
    if (tls && handshake_us > 0 && answered == 0 &&
        (code == CURLE_RECV_ERROR || code == CURLE_SEND_ERROR || code == CURLE_GOT_NOTHING ||
         code == CURLE_HTTP2 || code == CURLE_HTTP2_STREAM)) {
      throw std::runtime_error(
          "TLS error with " + url + ": it closed the connection after the TLS handshake without answering (" +
          (error[0] != '\0' ? error : curl_library().easy_strerror(code)) + "); " +
          (options.client_cert.empty()
               ? "does it require a client certificate (push_client_cert, --client-cert)?"
               : "did it refuse the client certificate?"));
    }
    // A gRPC server may refuse a call at once (a trailers-only answer with its grpc-status) and reset
    // the stream while the request is still being sent: that status is its answer, not the reset.
    if (grpc && grpc_status.code > 0) throw refused_by_grpc_status();
    if (grpc && code == CURLE_HTTP2_STREAM)
      // Seen from a collector without a profiles pipeline: a trailers-only UNIMPLEMENTED answer, then a
      // reset of the stream while the request was still being sent, which Debian 12's libcurl (7.88)
      // reports as a stream error without handing over the answer's grpc-status.
      throw std::runtime_error(url +
                               " did not answer as a gRPC server (HTTP/2) with the OTLP profiles service: it "
                               "reset the call's stream (" +
                               (error[0] != '\0' ? error : curl_library().easy_strerror(code)) +
                               "); an OpenTelemetry Collector needs a profiles pipeline and the "
                               "service.profilesSupport feature gate");
    if (grpc && (code == CURLE_HTTP2 || code == CURLE_HTTP2_STREAM || code == CURLE_WEIRD_SERVER_REPLY ||
                 code == CURLE_RECV_ERROR || code == CURLE_SEND_ERROR || code == CURLE_GOT_NOTHING))
      throw std::runtime_error(url + " did not answer as a gRPC server (HTTP/2): " +
                               (error[0] != '\0' ? error : curl_library().easy_strerror(code)));
    throw std::runtime_error(transfer_error(code, url, error, options.timeout_s));
  }
  long status = 0;
  lib.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  if (status < 200 || status > 299) {
    const std::string text = error_text(answer);
    throw std::runtime_error(url + " answered HTTP " + std::to_string(status) + ": " + text +
                             (status == 400 || status == 415 ? refused_encoding_hint(options, text) : ""));
  }
  std::string_view message = answer;
  std::string inflated;
  if (grpc) {
    if (grpc_status.code < 0) {
      throw std::runtime_error(url + " answered without a grpc-status: not a gRPC server");
    }
    if (grpc_status.code != 0) throw refused_by_grpc_status();
    // One message: its prefix (compressed flag, length) and the bytes, gzip when the flag is set (only
    // asked for when the request was).
    const auto* b = reinterpret_cast<const unsigned char*>(answer.data());
    const size_t length =
        answer.size() >= 5 ? (size_t{b[1]} << 24 | size_t{b[2]} << 16 | size_t{b[3]} << 8 | b[4]) : 0;
    if (answer.size() < 5 || b[0] > (gzipped ? 1 : 0) || length != answer.size() - 5) {
      throw std::runtime_error(url + " answered gRPC status 0 with a body that is not one " +
                               (gzipped ? "message" : "uncompressed message"));
    }
    message = std::string_view(answer).substr(5);
    if (b[0] == 1) {
      if (!gunzip_answer(message, inflated))
        throw std::runtime_error(url + " answered gRPC status 0 with a compressed message that is not gzip");
      message = inflated;
    }
  }
  ExportResponse response;
  if (!parse_response(message, response)) {
    throw std::runtime_error(url + " answered HTTP " + std::to_string(status) +
                             " with a body that is not an OTLP export response: " + first_line(answer));
  }
  if (response.rejected != 0 || !response.error_message.empty()) {
    throw std::runtime_error(url + " rejected " + std::to_string(response.rejected) +
                             " profiles: " + first_line(response.error_message));
  }
  return PushedBytes{sent.size(), body.size()};
}

}  // namespace hpd::session
