// /proc/PID/maps parsing.
#include "hpd/base/proc_maps.h"

#include <charconv>
#include <filesystem>

#include "hpd/base/proc_files.h"

namespace hpd {

namespace {

// Consumes a hex number from the front of `s`.
bool take_hex(std::string_view& s, uint64_t& value) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value, 16);
  if (ec != std::errc() || ptr == s.data()) return false;
  s.remove_prefix(static_cast<size_t>(ptr - s.data()));
  return true;
}

bool take_dec(std::string_view& s, uint64_t& value) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value, 10);
  if (ec != std::errc() || ptr == s.data()) return false;
  s.remove_prefix(static_cast<size_t>(ptr - s.data()));
  return true;
}

bool take_char(std::string_view& s, char c) {
  if (s.empty() || s.front() != c) return false;
  s.remove_prefix(1);
  return true;
}

void skip_spaces(std::string_view& s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
}

}  // namespace

std::optional<MapsEntry> parse_maps_line(std::string_view s) {
  MapsEntry e;
  uint64_t major = 0, minor = 0;
  if (!take_hex(s, e.start) || !take_char(s, '-') || !take_hex(s, e.end) || e.end < e.start)
    return std::nullopt;
  if (!take_char(s, ' ') || s.size() < 4) return std::nullopt;
  const std::string_view perms = s.substr(0, 4);
  e.readable = perms[0] == 'r';
  e.writable = perms[1] == 'w';
  e.executable = perms[2] == 'x';
  e.shared = perms[3] == 's';
  s.remove_prefix(4);
  if (!take_char(s, ' ') || !take_hex(s, e.offset)) return std::nullopt;
  if (!take_char(s, ' ') || !take_hex(s, major) || !take_char(s, ':') || !take_hex(s, minor))
    return std::nullopt;
  if (!take_char(s, ' ') || !take_dec(s, e.inode)) return std::nullopt;
  e.dev_major = static_cast<uint32_t>(major);
  e.dev_minor = static_cast<uint32_t>(minor);
  // The path is everything after the padding, spaces included; only trailing blanks are noise.
  skip_spaces(s);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r')) s.remove_suffix(1);
  constexpr std::string_view kDeleted = " (deleted)";
  if (s.size() > kDeleted.size() && s.ends_with(kDeleted) && s.front() == '/') {
    s.remove_suffix(kDeleted.size());
    e.deleted = true;
  }
  e.path = std::string(s);
  return e;
}

std::vector<MapsEntry> parse_maps(std::string_view text) {
  std::vector<MapsEntry> entries;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    if (auto e = parse_maps_line(line)) entries.push_back(std::move(*e));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return entries;
}

std::vector<MapsEntry> read_proc_maps(int32_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  auto text = read_small_file(dir + "/maps");
  if (text && text->empty()) {
    // Empty once the main thread has exited (pthread_exit) while others run on: the memory is
    // theirs to show.
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir + "/task", ec)) {
      auto other = read_small_file(entry.path().string() + "/maps");
      if (other && !other->empty()) {
        text = std::move(other);
        break;
      }
    }
  }
  if (!text) return {};
  return parse_maps(*text);
}

}  // namespace hpd
