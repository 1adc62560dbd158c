// A one-line progress display on stderr that is shown only when stderr is a terminal.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

namespace hpd::cli {

class ProgressLine {
 public:
  explicit ProgressLine(bool wanted) : enabled_(wanted && isatty(STDERR_FILENO) == 1) {}
  ~ProgressLine() { clear(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void update(const std::string& text) {
    if (!enabled_) return;
    std::fprintf(stderr, "\r\033[K%s", text.c_str());
    std::fflush(stderr);
    shown_ = true;
  }
  void clear() {
    if (!enabled_ || !shown_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    shown_ = false;
  }

 private:
  bool enabled_;
  bool shown_ = false;
};

}  // namespace hpd::cli
