// Log lines: "<6>text" under journald (it strips the prefix into the priority), "hpd: info: text" else.
#include "log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace hpd::service {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mutex;

}  // namespace

void set_log_level(LogLevel level) {
  g_level.store(static_cast<int>(level));
}

void log(LogLevel level, const std::string& message) {
  if (static_cast<int>(level) > g_level.load()) return;
  // JOURNAL_STREAM is set when stderr is connected to the journal (systemd.exec(5)).
  static const bool journal = std::getenv("JOURNAL_STREAM") != nullptr;
  std::lock_guard lock(g_mutex);
  if (journal) {
    std::fprintf(stderr, "<%d>%s\n", static_cast<int>(level), message.c_str());
  } else {
    std::fprintf(stderr, "hpd: %s: %s\n", to_string(level), message.c_str());
  }
  std::fflush(stderr);
}

}  // namespace hpd::service
