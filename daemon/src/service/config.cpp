// hpd.conf: parsing with every problem reported as FILE:LINE.
#include "hpd/service/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

#include <unistd.h>

#include "hpd/session/otlp_push.h"

namespace hpd::service {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The number at the start of `text` and the suffix after it.
bool split_number(std::string_view text, double& number, std::string_view& suffix) {
  size_t end = 0;
  while (end < text.size() && ((text[end] >= '0' && text[end] <= '9') || text[end] == '.')) ++end;
  if (end == 0) return false;
  const std::string digits(text.substr(0, end));
  char* stop = nullptr;
  errno = 0;
  number = std::strtod(digits.c_str(), &stop);
  if (errno != 0 || stop != digits.c_str() + digits.size() || !std::isfinite(number)) return false;
  suffix = trim(text.substr(end));
  return true;
}

bool parse_uint(std::string_view text, uint64_t max, uint64_t& out) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t n = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (n > (std::numeric_limits<uint64_t>::max() - digit) / 10) return false;
    n = n * 10 + digit;
  }
  if (n > max) return false;
  out = n;
  return true;
}

using Setter = std::function<std::string(Config&, std::string_view)>;  // returns "" or what is wrong

Setter uint_setter(uint32_t Config::*field, uint64_t min, uint64_t max) {
  return [=](Config& c, std::string_view v) -> std::string {
    uint64_t n = 0;
    if (!parse_uint(v, max, n) || n < min) {
      return "expected a whole number from " + std::to_string(min) + " to " + std::to_string(max);
    }
    c.*field = static_cast<uint32_t>(n);
    return "";
  };
}

Setter bool_setter(bool Config::*field) {
  return [=](Config& c, std::string_view v) -> std::string {
    if (v == "on" || v == "yes" || v == "true" || v == "1") {
      c.*field = true;
    } else if (v == "off" || v == "no" || v == "false" || v == "0") {
      c.*field = false;
    } else {
      return "expected on or off";
    }
    return "";
  };
}

Setter string_setter(std::string Config::*field, bool absolute_path) {
  return [=](Config& c, std::string_view v) -> std::string {
    if (v.empty()) return "expected a value";
    if (absolute_path && v.front() != '/') return "expected an absolute path";
    c.*field = std::string(v);
    return "";
  };
}

using Getter = std::function<std::string(const Config&)>;  // the value as a line of the file would give it

// Each key's parser and printer side by side, so `hpd --check-config` prints every key there is.
struct Key {
  Setter set;
  Getter get;
};

template <typename T>
Getter number_getter(T Config::*field) {
  return [=](const Config& c) { return std::to_string(c.*field); };
}

Getter bool_getter(bool Config::*field) {
  return [=](const Config& c) -> std::string { return c.*field ? "on" : "off"; };
}

Getter string_getter(std::string Config::*field) {
  return [=](const Config& c) { return c.*field; };
}

// A PEM file hpd reads when it pushes (a CA bundle, a certificate, a key): an absolute path to a
// regular file that can be read now.
Key pem_file_key(std::string Config::*field) {
  return {[=](Config& c, std::string_view v) -> std::string {
            if (!v.empty()) {
              if (v.front() != '/') return "expected an absolute path";
              const std::string path(v);
              std::error_code ec;
              if (!std::filesystem::is_regular_file(path, ec))
                return path + " is not a file" + (ec ? ": " + ec.message() : std::string());
              if (::access(path.c_str(), R_OK) != 0)
                return "cannot read " + path + ": " + std::strerror(errno);
            }
            c.*field = std::string(v);
            return "";
          },
          string_getter(field)};
}

// A duration in seconds from `min` to `max` ("90", "90s", "2m").
Key duration_key(double Config::*field, double min, double max) {
  return {[=](Config& c, std::string_view v) -> std::string {
            double s = 0;
            if (!parse_duration_s(v, s) || s < min || s > max) {
              char text[96];
              std::snprintf(text, sizeof text, "expected a duration from %g s to %g s (e.g. 30, 2m)", min,
                            max);
              return text;
            }
            c.*field = s;
            return "";
          },
          [=](const Config& c) {
            char text[32];
            std::snprintf(text, sizeof text, "%.17g", c.*field);
            return std::string(text);
          }};
}

// A number of MiB from 1 to 1048576, as max_session_memory_mb.
Key mib_key(uint64_t Config::*field) {
  return {[=](Config& c, std::string_view v) -> std::string {
            uint64_t n = 0;
            if (!parse_uint(v, 1u << 20, n) || n < 1) return "expected a number of MiB from 1 to 1048576";
            c.*field = n;
            return "";
          },
          number_getter(field)};
}

const std::map<std::string, Key, std::less<>>& keys() {
  static const std::map<std::string, Key, std::less<>> table = {
      {"socket", {string_setter(&Config::socket, true), string_getter(&Config::socket)}},
      {"group", {string_setter(&Config::group, false), string_getter(&Config::group)}},
      {"log_level",
       {[](Config& c, std::string_view v) -> std::string {
          if (v == "error")
            c.log_level = LogLevel::kError;
          else if (v == "warning")
            c.log_level = LogLevel::kWarning;
          else if (v == "info")
            c.log_level = LogLevel::kInfo;
          else if (v == "debug")
            c.log_level = LogLevel::kDebug;
          else
            return "expected error, warning, info or debug";
          return "";
        },
        [](const Config& c) -> std::string { return to_string(c.log_level); }}},
      {"max_sessions", {uint_setter(&Config::max_sessions, 1, 1024), number_getter(&Config::max_sessions)}},
      {"max_duration_s",
       {[](Config& c, std::string_view v) -> std::string {
          double s = 0;
          if (!parse_duration_s(v, s) || s < 1)
            return "expected a duration of at least 1 s (e.g. 600, 10m, 2h)";
          c.max_duration_s = s;
          return "";
        },
        [](const Config& c) {
          char text[32];
          std::snprintf(text, sizeof text, "%.17g", c.max_duration_s);  // round-trips fractions too
          return std::string(text);
        }}},
      {"max_frequency_hz",
       {uint_setter(&Config::max_frequency_hz, 1, 100000), number_getter(&Config::max_frequency_hz)}},
      {"max_cfi_rows",
       {uint_setter(&Config::max_cfi_rows, 1, 1u << 25), number_getter(&Config::max_cfi_rows)}},
      {"max_session_memory_mb", mib_key(&Config::max_session_memory_mb)},
      {"max_user_memory_mb", mib_key(&Config::max_user_memory_mb)},
      {"max_jit_symbols_mb", mib_key(&Config::max_jit_symbols_mb)},
      {"max_symbol_cache_mb", mib_key(&Config::max_symbol_cache_mb)},
      {"max_kept_unwind_tables_mb", mib_key(&Config::max_kept_unwind_tables_mb)},
      {"max_stack_memory_kb",
       {[](Config& c, std::string_view v) -> std::string {
          uint64_t n = 0;
          if (!parse_uint(v, uint64_t{1} << 30, n)) return "expected a number of KiB from 0 to 1073741824";
          c.max_stack_memory_kb = n;
          return "";
        },
        number_getter(&Config::max_stack_memory_kb)}},
      {"max_connections_per_user",
       {uint_setter(&Config::max_connections_per_user, 1, 4096),
        number_getter(&Config::max_connections_per_user)}},
      {"max_sessions_per_user",
       {uint_setter(&Config::max_sessions_per_user, 1, 1024), number_getter(&Config::max_sessions_per_user)}},
      {"idle_timeout", duration_key(&Config::idle_timeout_s, 1, 86400)},
      {"client_timeout", duration_key(&Config::client_timeout_s, 1, 3600)},
      {"stop_timeout", duration_key(&Config::stop_timeout_s, 1, 3600)},
      {"continuous", {bool_setter(&Config::continuous), bool_getter(&Config::continuous)}},
      {"continuous_frequency",
       {uint_setter(&Config::continuous_frequency, 1, 1000), number_getter(&Config::continuous_frequency)}},
      {"continuous_cfi_rows",
       {uint_setter(&Config::continuous_cfi_rows, 1, 1u << 25), number_getter(&Config::continuous_cfi_rows)}},
      {"continuous_kernel",
       {bool_setter(&Config::continuous_kernel), bool_getter(&Config::continuous_kernel)}},
      {"continuous_off_cpu",
       {bool_setter(&Config::continuous_off_cpu), bool_getter(&Config::continuous_off_cpu)}},
      {"continuous_chunk_seconds",
       {uint_setter(&Config::continuous_chunk_seconds, 1, 86400),
        number_getter(&Config::continuous_chunk_seconds)}},
      {"continuous_max_age",
       {[](Config& c, std::string_view v) -> std::string {
          double s = 0;
          if (!parse_duration_s(v, s) || s < 1) return "expected a duration (e.g. 3600, 12h, 7d)";
          c.continuous_max_age_s = static_cast<uint64_t>(s);
          return "";
        },
        number_getter(&Config::continuous_max_age_s)}},
      {"continuous_max_bytes",
       {[](Config& c, std::string_view v) -> std::string {
          uint64_t n = 0;
          if (!parse_size_bytes(v, n) || n == 0) return "expected a size (e.g. 500M, 2G)";
          c.continuous_max_bytes = n;
          return "";
        },
        number_getter(&Config::continuous_max_bytes)}},
      {"otlp_endpoint",
       {[](Config& c, std::string_view v) -> std::string {
          if (!v.empty()) {
            try {
              session::otlp_profiles_url(std::string(v));
            } catch (const std::invalid_argument& e) {
              return e.what();
            }
          }
          c.otlp_endpoint = std::string(v);
          return "";
        },
        string_getter(&Config::otlp_endpoint)}},
      {"push_labels",
       {[](Config& c, std::string_view v) -> std::string {
          std::vector<std::pair<std::string, std::string>> labels;
          while (!v.empty()) {
            const size_t comma = v.find(',');
            const std::string_view item = trim(v.substr(0, comma));
            v = comma == std::string_view::npos ? std::string_view() : v.substr(comma + 1);
            const size_t eq = item.find('=');
            const std::string_view key = eq == std::string_view::npos ? item : trim(item.substr(0, eq));
            if (eq == std::string_view::npos || key.empty())
              return "expected KEY=VALUE pairs separated by commas (e.g. team=storage, region=eu-1)";
            for (const auto& [k, value] : labels) {
              if (k == key) return "the label '" + k + "' is given twice";
            }
            labels.emplace_back(std::string(key), std::string(trim(item.substr(eq + 1))));
          }
          c.push_labels = std::move(labels);
          return "";
        },
        [](const Config& c) {
          std::string text;
          for (const auto& [k, v] : c.push_labels) text += (text.empty() ? "" : ", ") + k + "=" + v;
          return text;
        }}},
      {"push_timeout", duration_key(&Config::push_timeout_s, 1, 3600)},
      {"push_compression",
       {[](Config& c, std::string_view v) -> std::string {
          return session::parse_push_compression(v, c.push_compression) ? "" : "expected gzip or none";
        },
        [](const Config& c) -> std::string { return session::to_string(c.push_compression); }}},
      {"push_retry_max", duration_key(&Config::push_retry_max_s, 1, 86400)},
      {"push_ca_file", pem_file_key(&Config::push_ca_file)},
      {"push_client_cert", pem_file_key(&Config::push_client_cert)},
      {"push_client_key",
       {[](Config& c, std::string_view v) -> std::string {
          if (!v.empty()) {
            if (v.front() != '/') return "expected an absolute path";
            try {
              session::check_private_key_file(std::string(v), 0);  // root's, readable by root only
            } catch (const std::runtime_error& e) {
              return e.what();
            }
          }
          c.push_client_key = std::string(v);
          return "";
        },
        string_getter(&Config::push_client_key)}},
      {"push_headers_file",
       {[](Config& c, std::string_view v) -> std::string {
          c.push_headers.clear();
          if (!v.empty()) {
            if (v.front() != '/') return "expected an absolute path";
            try {
              c.push_headers = session::read_push_headers_file(std::string(v), 0);  // root's only
            } catch (const std::runtime_error& e) {
              return e.what();
            }
          }
          c.push_headers_file = std::string(v);
          return "";
        },
        string_getter(&Config::push_headers_file)}},
      {"debuginfod_urls",
       {[](Config& c, std::string_view v) -> std::string {
          std::string urls;
          while (!(v = trim(v)).empty()) {
            const size_t space = v.find_first_of(" \t");
            const std::string_view url = v.substr(0, space);
            v = space == std::string_view::npos ? std::string_view() : v.substr(space);
            if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0)
              return "expected http:// or https:// URLs separated by spaces (got '" + std::string(url) + "')";
            urls += (urls.empty() ? "" : " ") + std::string(url);
          }
          c.debuginfod_urls = std::move(urls);
          return "";
        },
        string_getter(&Config::debuginfod_urls)}},
      {"state_directory",
       {string_setter(&Config::state_directory, true), string_getter(&Config::state_directory)}},
      {"max_unwind_cache_mb",
       {[](Config& c, std::string_view v) -> std::string {
          uint64_t n = 0;
          if (!parse_uint(v, 1u << 20, n)) return "expected a number of MiB from 0 (no cache) to 1048576";
          c.max_unwind_cache_mb = n;
          return "";
        },
        number_getter(&Config::max_unwind_cache_mb)}},
  };
  return table;
}

// The keys a further endpoint takes with a `.NAME` suffix: each parsed by the unsuffixed key's own
// parser (into a scratch Config, so the checks and messages are the same), then moved to the endpoint.
struct EndpointKey {
  const char* base;
  void (*take)(PushEndpoint&, const Config&);  // from the scratch Config into the endpoint
  void (*give)(Config&, const PushEndpoint&);  // the endpoint's value into a Config, to print it
  bool (*is_set)(const PushEndpoint&);
};

const std::vector<EndpointKey>& endpoint_keys() {
  static const std::vector<EndpointKey> table = {
      {"otlp_endpoint", [](PushEndpoint& e, const Config& c) { e.otlp_endpoint = c.otlp_endpoint; },
       [](Config& c, const PushEndpoint& e) { c.otlp_endpoint = e.otlp_endpoint; },
       [](const PushEndpoint&) { return true; }},
      {"push_timeout", [](PushEndpoint& e, const Config& c) { e.timeout_s = c.push_timeout_s; },
       [](Config& c, const PushEndpoint& e) { c.push_timeout_s = e.timeout_s; },
       [](const PushEndpoint& e) { return e.timeout_s > 0; }},
      {"push_compression", [](PushEndpoint& e, const Config& c) { e.compression = c.push_compression; },
       [](Config& c, const PushEndpoint& e) {
         c.push_compression = e.compression.value_or(c.push_compression);
       },
       [](const PushEndpoint& e) { return e.compression.has_value(); }},
      {"push_ca_file", [](PushEndpoint& e, const Config& c) { e.ca_file = c.push_ca_file; },
       [](Config& c, const PushEndpoint& e) { c.push_ca_file = e.ca_file; },
       [](const PushEndpoint& e) { return !e.ca_file.empty(); }},
      {"push_client_cert", [](PushEndpoint& e, const Config& c) { e.client_cert = c.push_client_cert; },
       [](Config& c, const PushEndpoint& e) { c.push_client_cert = e.client_cert; },
       [](const PushEndpoint& e) { return !e.client_cert.empty(); }},
      {"push_client_key", [](PushEndpoint& e, const Config& c) { e.client_key = c.push_client_key; },
       [](Config& c, const PushEndpoint& e) { c.push_client_key = e.client_key; },
       [](const PushEndpoint& e) { return !e.client_key.empty(); }},
      {"push_headers_file",
       [](PushEndpoint& e, const Config& c) {
         e.headers_file = c.push_headers_file;
         e.headers = c.push_headers;
       },
       [](Config& c, const PushEndpoint& e) { c.push_headers_file = e.headers_file; },
       [](const PushEndpoint& e) { return !e.headers_file.empty(); }},
  };
  return table;
}

std::string endpoint_key_list() {
  std::string list;
  for (const EndpointKey& k : endpoint_keys()) list += (list.empty() ? "" : ", ") + std::string(k.base);
  return list;
}

bool valid_endpoint_name(std::string_view name) {
  if (name.empty() || name.size() > 32) return false;
  for (const char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

// True when `key` is KEY.NAME, a further endpoint's key: set, or `why` says what is wrong.
bool set_endpoint_key(Config& config, std::string_view key, std::string_view value, std::string& why) {
  const size_t dot = key.find('.');
  if (dot == std::string_view::npos) return false;
  const std::string_view base = key.substr(0, dot);
  const std::string_view name = key.substr(dot + 1);
  const auto it = std::find_if(endpoint_keys().begin(), endpoint_keys().end(),
                               [&](const EndpointKey& k) { return base == k.base; });
  if (it == endpoint_keys().end()) {
    why = "unknown key '" + std::string(key) +
          "' (a further endpoint takes these keys with a .NAME suffix: " + endpoint_key_list() + ")";
    return true;
  }
  if (!valid_endpoint_name(name)) {
    why = "bad endpoint name '" + std::string(name) + "' in " + std::string(key) +
          ": expected 1 to 32 letters, digits, _ or -";
    return true;
  }
  Config scratch;
  if (std::string problem = keys().find(base)->second.set(scratch, value); !problem.empty()) {
    why = "bad value '" + std::string(value) + "' for " + std::string(key) + ": " + problem;
    return true;
  }
  auto endpoint = std::find_if(config.push_endpoints.begin(), config.push_endpoints.end(),
                               [&](const PushEndpoint& e) { return e.name == name; });
  if (endpoint == config.push_endpoints.end()) {
    config.push_endpoints.push_back(PushEndpoint{});
    endpoint = config.push_endpoints.end() - 1;
    endpoint->name = std::string(name);
  }
  it->take(*endpoint, scratch);
  return true;
}

}  // namespace

std::vector<PushEndpoint> push_endpoints_of(const Config& config) {
  std::vector<PushEndpoint> all;
  if (!config.otlp_endpoint.empty()) {
    PushEndpoint first;
    first.otlp_endpoint = config.otlp_endpoint;
    first.timeout_s = config.push_timeout_s;
    first.compression = config.push_compression;
    first.ca_file = config.push_ca_file;
    first.client_cert = config.push_client_cert;
    first.client_key = config.push_client_key;
    first.headers_file = config.push_headers_file;
    first.headers = config.push_headers;
    all.push_back(std::move(first));
  }
  for (const PushEndpoint& e : config.push_endpoints) {
    if (e.otlp_endpoint.empty()) continue;
    all.push_back(e);
    if (all.back().timeout_s <= 0) all.back().timeout_s = config.push_timeout_s;
    if (!all.back().compression) all.back().compression = config.push_compression;
  }
  return all;
}

const char* to_string(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "info";
}

static std::string join_lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) {
    if (!text.empty()) text += '\n';
    text += line;
  }
  return text;
}

ConfigError::ConfigError(const std::vector<std::string>& problems)
    : std::runtime_error(join_lines(problems)), problems_(problems) {}

bool parse_duration_s(std::string_view text, double& seconds) {
  double n = 0;
  std::string_view suffix;
  if (!split_number(trim(text), n, suffix)) return false;
  double scale = 0;
  if (suffix.empty() || suffix == "s")
    scale = 1;
  else if (suffix == "m" || suffix == "min")
    scale = 60;
  else if (suffix == "h")
    scale = 3600;
  else if (suffix == "d")
    scale = 86400;
  else
    return false;
  seconds = n * scale;
  return seconds < 1e12;
}

bool parse_size_bytes(std::string_view text, uint64_t& bytes) {
  double n = 0;
  std::string_view suffix;
  if (!split_number(trim(text), n, suffix)) return false;
  double scale = 0;
  if (suffix.empty() || suffix == "B")
    scale = 1;
  else if (suffix == "K" || suffix == "KiB" || suffix == "k")
    scale = 1024.0;
  else if (suffix == "M" || suffix == "MiB")
    scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "GiB")
    scale = 1024.0 * 1024 * 1024;
  else if (suffix == "T" || suffix == "TiB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    return false;
  const double value = n * scale;
  if (value >= 1.8e19) return false;
  bytes = static_cast<uint64_t>(value);
  return true;
}

Config parse_config(std::string_view text, const std::string& name) {
  Config config;
  std::vector<std::string> problems;
  size_t line_number = 0;
  std::map<std::string, size_t, std::less<>> key_lines;  // where each key was given last
  while (!text.empty()) {
    ++line_number;
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    const std::string where = name + ":" + std::to_string(line_number) + ": ";
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      problems.push_back(where + "expected `key = value`");
      continue;
    }
    const std::string_view key = trim(line.substr(0, eq));
    const std::string_view value = trim(line.substr(eq + 1));
    const auto& table = keys();
    const auto it = table.find(key);
    if (std::string why; it == table.end() && set_endpoint_key(config, key, value, why)) {
      if (!why.empty()) problems.push_back(where + why);
      key_lines.emplace(std::string(key), line_number);  // the first line: where an endpoint begins
      continue;
    }
    if (it == table.end()) {
      std::string known;
      for (const auto& [k, setter] : table) known += (known.empty() ? "" : ", ") + k;
      problems.push_back(where + "unknown key '" + std::string(key) + "' (known: " + known + ")");
      continue;
    }
    if (std::string why = it->second.set(config, value); !why.empty()) {
      problems.push_back(where + "bad value '" + std::string(value) + "' for " + std::string(key) + ": " +
                         why);
    }
    key_lines[std::string(key)] = line_number;
  }
  // A client certificate goes with its key.
  if (config.push_client_cert.empty() != config.push_client_key.empty()) {
    const char* given = config.push_client_cert.empty() ? "push_client_key" : "push_client_cert";
    const char* missing = config.push_client_cert.empty() ? "push_client_cert" : "push_client_key";
    problems.push_back(name + ":" + std::to_string(key_lines[given]) + ": " + given + " is given without " +
                       missing + ": a client certificate needs both");
  }
  // Each further endpoint: an URL of its own, a certificate with its key; no URL pushed to twice (one
  // cursor per URL), and a bounded number of them.
  std::map<std::string, std::string> urls;  // the profiles URL -> the key that named it
  if (!config.otlp_endpoint.empty()) {
    try {
      urls[session::otlp_profiles_url(config.otlp_endpoint)] = "otlp_endpoint";
    } catch (const std::invalid_argument&) {
    }
  }
  const auto first_line = [&](const std::string& endpoint_name) {
    size_t first = 0;
    for (const EndpointKey& k : endpoint_keys()) {
      const auto it = key_lines.find(std::string(k.base) + "." + endpoint_name);
      if (it != key_lines.end() && (first == 0 || it->second < first)) first = it->second;
    }
    return name + ":" + std::to_string(first) + ": ";
  };
  size_t endpoints = urls.size();
  for (const PushEndpoint& e : config.push_endpoints) {
    const std::string url_key = "otlp_endpoint." + e.name;
    if (!key_lines.count(url_key)) {
      problems.push_back(first_line(e.name) + "endpoint '" + e.name + "' has no " + url_key +
                         " (the URL to push to)");
      continue;
    }
    const std::string where = name + ":" + std::to_string(key_lines[url_key]) + ": ";
    if (e.client_cert.empty() != e.client_key.empty()) {
      problems.push_back(
          first_line(e.name) + (e.client_cert.empty() ? "push_client_key." : "push_client_cert.") + e.name +
          " is given without " + (e.client_cert.empty() ? "push_client_cert." : "push_client_key.") + e.name +
          ": a client certificate needs both");
    }
    if (e.otlp_endpoint.empty()) continue;
    std::string url;
    try {
      url = session::otlp_profiles_url(e.otlp_endpoint);
    } catch (const std::invalid_argument&) {
      continue;  // said by the key's parser
    }
    if (const auto [it, fresh] = urls.emplace(url, url_key); !fresh) {
      problems.push_back(where + url_key + " pushes to " + url + " as " + it->second +
                         " does: each endpoint is pushed to once (remove one)");
      continue;
    }
    if (++endpoints > kMaxPushEndpoints) {
      problems.push_back(where + url_key + ": at most " + std::to_string(kMaxPushEndpoints) +
                         " endpoints are pushed to");
    }
  }
  if (!problems.empty()) throw ConfigError(problems);
  return config;
}

std::string format_config(const Config& config) {
  std::string out;
  for (const auto& [key, entry] : keys()) out += key + " = " + entry.get(config) + "\n";
  for (const PushEndpoint& e : config.push_endpoints) {
    for (const EndpointKey& k : endpoint_keys()) {
      if (!k.is_set(e)) continue;
      Config scratch;
      k.give(scratch, e);
      out += std::string(k.base) + "." + e.name + " = " + keys().find(k.base)->second.get(scratch) + "\n";
    }
  }
  return out;
}

Config load_config(const std::string& path) {
  // A directory opens and reads as empty on some systems: it must not pass for a file of defaults.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw ConfigError({path + ": is a directory, not a configuration file"});
  }
  std::ifstream in(path);
  if (!in) throw ConfigError({path + ": cannot read: " + std::strerror(errno)});
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError({path + ": cannot read: " + std::strerror(errno)});
  return parse_config(text.str(), path);
}

}  // namespace hpd::service
