// Points in time for `hpctl export --since/--until`: durations before now, Unix times, ISO 8601 UTC.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <stdexcept>
#include <string>

#include "hpd/continuous/continuous.h"

namespace hpd::continuous {
namespace {

constexpr uint64_t kSecond = 1'000'000'000ULL;

[[noreturn]] void bad(std::string_view text) {
  throw std::invalid_argument("cannot read the time '" + std::string(text) +
                              "': give a duration before now (30s, 10m, 2h, 1d, 1h30m), 'now', "
                              "@UNIX_SECONDS, or a UTC time such as 2025-03-14T09:26:53Z");
}

bool digit(char c) {
  return c >= '0' && c <= '9';
}

// "1h30m" -> nanoseconds; nullopt when `text` is not a duration.
std::optional<uint64_t> parse_duration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  uint64_t total = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (!digit(text[i])) return std::nullopt;
    uint64_t value = 0;
    while (i < text.size() && digit(text[i])) {
      if (value > 1'000'000'000ULL) return std::nullopt;  // far beyond any retention
      value = value * 10 + static_cast<uint64_t>(text[i++] - '0');
    }
    if (i == text.size()) return std::nullopt;  // a bare number is ambiguous: say the unit
    uint64_t unit = 0;
    switch (text[i++]) {
      case 's': unit = kSecond; break;
      case 'm': unit = 60 * kSecond; break;
      case 'h': unit = 3600 * kSecond; break;
      case 'd': unit = 86400 * kSecond; break;
      case 'w': unit = 7 * 86400 * kSecond; break;
      default: return std::nullopt;
    }
    total += value * unit;
  }
  return total;
}

}  // namespace

uint64_t unix_now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

uint64_t parse_time_spec(std::string_view text, uint64_t now_unix_ns) {
  if (text == "now") return now_unix_ns;
  if (auto d = parse_duration(text)) return *d >= now_unix_ns ? 0 : now_unix_ns - *d;
  if (!text.empty() && text[0] == '@') {
    const std::string_view digits = text.substr(1);
    if (digits.empty() || digits.size() > 11) bad(text);
    uint64_t seconds = 0;
    for (char c : digits) {
      if (!digit(c)) bad(text);
      seconds = seconds * 10 + static_cast<uint64_t>(c - '0');
    }
    return seconds * kSecond;
  }
  // YYYY-MM-DD[T ]HH:MM[:SS][Z]
  std::string s(text);
  if (!s.empty() && (s.back() == 'Z' || s.back() == 'z')) s.pop_back();
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  char sep = 0;
  int consumed = 0;
  const int fields = std::sscanf(s.c_str(), "%4d-%2d-%2d%c%2d:%2d%n:%2d%n", &year, &month, &day, &sep, &hour,
                                 &minute, &consumed, &second, &consumed);
  if (fields < 6 || (sep != 'T' && sep != ' ') || static_cast<size_t>(consumed) != s.size()) bad(text);
  if (year < 1970 || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 ||
      second > 60)
    bad(text);
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  const time_t t = timegm(&tm);
  if (t < 0) bad(text);
  return static_cast<uint64_t>(t) * kSecond;
}

std::string format_unix_time(uint64_t unix_ns) {
  const time_t seconds = static_cast<time_t>(unix_ns / kSecond);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%04d-%02d-%02d %02d:%02d:%02d UTC", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return out;
}

}  // namespace hpd::continuous
