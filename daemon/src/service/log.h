// hpd's log: one line per event on stderr with a syslog priority prefix that journald understands.
#pragma once

#include <string>

#include "hpd/service/config.h"

namespace hpd::service {

void set_log_level(LogLevel level);
void log(LogLevel level, const std::string& message);

inline void log_error(const std::string& m) {
  log(LogLevel::kError, m);
}
inline void log_warning(const std::string& m) {
  log(LogLevel::kWarning, m);
}
inline void log_info(const std::string& m) {
  log(LogLevel::kInfo, m);
}
inline void log_debug(const std::string& m) {
  log(LogLevel::kDebug, m);
}

}  // namespace hpd::service
