// What every part of the service uses: its clocks, and reply messages as JSON text.
#pragma once

#include <time.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "hpd/service/protocol.h"

namespace hpd::service {

// Nanoseconds on `clock` (CLOCK_MONOTONIC for durations, CLOCK_REALTIME for the time of day).
inline uint64_t now_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The text of a reply; bytes that are not UTF-8 (a file name) become U+FFFD rather than an exception.
inline std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A reply of `type`, with the protocol version every message carries.
inline nlohmann::json reply_message(const char* type) {
  return nlohmann::json{{"version", kProtocolVersion}, {"type", type}};
}

}  // namespace hpd::service
