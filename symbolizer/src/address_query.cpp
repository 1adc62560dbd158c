// AddressQuery: hand-given addresses, in one ELF file or in a live process's mappings.
#include "hpd/symbolizer/address_query.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace hpd {
namespace {

std::string_view trim(std::string_view s) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Reads a hex number at the front of `s` and removes it; nullopt when there is none.
std::optional<uint64_t> take_hex(std::string_view& s) {
  uint64_t value = 0;
  size_t n = 0;
  while (n < s.size() && hex_digit(s[n]) >= 0) {
    if (value >> 60 != 0) return std::nullopt;  // would overflow
    value = value << 4 | static_cast<uint64_t>(hex_digit(s[n]));
    ++n;
  }
  if (n == 0) return std::nullopt;
  s.remove_prefix(n);
  return value;
}

std::string module_warning(const std::string& name, const ModuleInfo& info) {
  std::string out;
  if (!info.error.empty()) out = info.error;
  if (!info.has_debug_info) {
    if (!out.empty()) out += "; ";
    out += "no debug information found (names from the symbol table, no file:line)";
    if (!info.debuginfod_error.empty()) out += "; " + info.debuginfod_error;
  } else if (!info.debug_error.empty()) {
    if (!out.empty()) out += "; ";
    out += "debug information not usable: " + info.debug_error;
  }
  return out.empty() ? out : name + ": " + out;
}

}  // namespace

std::optional<uint64_t> parse_hex_address(std::string_view text) {
  text = trim(text);
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) text.remove_prefix(2);
  auto value = take_hex(text);
  if (!value || !text.empty()) return std::nullopt;
  return value;
}

std::vector<ProcessMapping> parse_proc_maps(std::string_view text) {
  std::vector<ProcessMapping> out;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    // start-end perms offset dev inode [path]
    ProcessMapping m;
    auto start = take_hex(line);
    if (!start || line.empty() || line.front() != '-') continue;
    line.remove_prefix(1);
    auto end = take_hex(line);
    line = trim(line);
    if (!end || *end <= *start || line.size() < 4) continue;
    m.start = *start;
    m.end = *end;
    m.executable = line[2] == 'x';
    line = trim(line.substr(4));
    auto offset = take_hex(line);
    if (!offset) continue;
    m.offset = *offset;
    // Skip dev and inode; what is left (after blanks) is the path, which may itself hold blanks.
    line = trim(line);
    for (int field = 0; field < 2; ++field) {
      const size_t blank = line.find_first_of(" \t");
      line = blank == std::string_view::npos ? std::string_view() : trim(line.substr(blank));
    }
    constexpr std::string_view kDeleted = " (deleted)";
    if (line.size() > kDeleted.size() && line.substr(line.size() - kDeleted.size()) == kDeleted) {
      line.remove_suffix(kDeleted.size());
      m.deleted = true;
    }
    m.path = std::string(line);
    out.push_back(std::move(m));
  }
  std::sort(out.begin(), out.end(),
            [](const ProcessMapping& a, const ProcessMapping& b) { return a.start < b.start; });
  return out;
}

AddressQuery AddressQuery::for_file(Symbolizer& symbolizer, const std::string& path) {
  AddressQuery q(symbolizer);
  q.file_ = path;
  ModuleRef ref;
  ref.path = path;
  const ModuleInfo& info = symbolizer.module_info(ref);
  if (!info.readable) throw std::runtime_error("cannot symbolize " + path + ": " + info.error);
  q.note_module(ref);
  return q;
}

AddressQuery AddressQuery::for_process(Symbolizer& symbolizer, int32_t pid) {
  AddressQuery q(symbolizer);
  q.pid_ = pid;
  const std::string maps = "/proc/" + std::to_string(pid) + "/maps";
  errno = 0;
  std::ifstream in(maps);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in || text.str().empty()) {
    throw std::runtime_error("cannot read " + maps + ": " +
                             (errno != 0 ? std::strerror(errno) : "no such process or no permission"));
  }
  q.mappings_ = parse_proc_maps(text.str());
  return q;
}

void AddressQuery::note_module(const ModuleRef& ref) {
  const std::string& name = ref.path;
  if (std::find(noted_.begin(), noted_.end(), name) != noted_.end()) return;
  noted_.push_back(name);
  const ModuleInfo& info = symbolizer_->module_info(ref);
  if (!info.readable) {
    warnings_.push_back(name + ": " + info.error);
  } else if (std::string w = module_warning(name, info); !w.empty()) {
    warnings_.push_back(std::move(w));
  }
}

std::vector<std::string> AddressQuery::take_warnings() {
  std::vector<std::string> out;
  out.swap(warnings_);
  return out;
}

AddressAnswer AddressQuery::lookup(std::string_view text) {
  AddressAnswer a;
  lookup(text, a);
  return a;
}

void AddressQuery::lookup(std::string_view text, AddressAnswer& a) {
  a.input.assign(trim(text));
  a.parsed = false;
  a.error.clear();
  a.address = a.file_offset = a.vaddr = 0;
  a.module.clear();
  a.in_module = false;
  const auto address = parse_hex_address(a.input);
  if (!address) {
    a.location = Location{};
    a.error = a.input.empty() ? "empty input" : "not a hexadecimal address: '" + a.input + "'";
    return;
  }
  a.parsed = true;
  a.address = *address;
  if (pid_ == 0) {
    if (file_ref_.path.empty()) file_ref_.path = file_;
    a.module.assign(file_);
    a.in_module = true;
    symbolizer_->resolve_vaddr(file_ref_, a.address, a.location);
    a.vaddr = a.address;
    return;
  }

  ModuleRef ref;
  auto it = std::upper_bound(mappings_.begin(), mappings_.end(), a.address,
                             [](uint64_t value, const ProcessMapping& m) { return value < m.start; });
  if (it == mappings_.begin() || a.address >= std::prev(it)->end) {
    a.location = Location{};
    a.error = "not in any mapping of process " + std::to_string(pid_);
    return;
  }
  const ProcessMapping& m = *std::prev(it);
  a.module = m.path;
  a.file_offset = a.address - m.start + m.offset;
  if (m.path.empty() || m.path.front() != '/') {
    a.location = Location{};
    a.error = "in " + (m.path.empty() ? std::string("anonymous memory") : m.path) + ", not a file mapping";
    return;
  }
  ref.path = m.path;
  ref.pid = pid_;
  ref.map_start = m.start;
  ref.map_end = m.end;
  note_module(ref);
  a.in_module = true;
  a.location = std::move(symbolizer_->resolve(ref, {&a.file_offset, 1}).front());
  a.vaddr = a.location.rel_address + symbolizer_->module_info(ref).image_base;
}

}  // namespace hpd
