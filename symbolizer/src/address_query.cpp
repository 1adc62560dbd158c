// AddressQuery: hand-given addresses, in one ELF file or in a live process's mappings.
#include "hpd/symbolizer/address_query.h"

#include <algorithm>
#include <array>
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

// The value of each hex digit, -1 for every other byte: a table, since hpctl symbolize parses each
// address it reads three times (batch preparation, answer cache, lookup).
constexpr std::array<int8_t, 256> kHexDigits = [] {
  std::array<int8_t, 256> table{};
  for (int c = 0; c < 256; ++c) {
    table[c] = c >= '0' && c <= '9'   ? static_cast<int8_t>(c - '0')
               : c >= 'a' && c <= 'f' ? static_cast<int8_t>(c - 'a' + 10)
               : c >= 'A' && c <= 'F' ? static_cast<int8_t>(c - 'A' + 10)
                                      : int8_t{-1};
  }
  return table;
}();

// Reads a hex number at the front of `s` and removes it; nullopt when there is none.
std::optional<uint64_t> take_hex(std::string_view& s) {
  uint64_t value = 0;
  size_t n = 0;
  for (int digit; n < s.size() && (digit = kHexDigits[static_cast<unsigned char>(s[n])]) >= 0; ++n) {
    if (value >> 60 != 0) return std::nullopt;  // would overflow
    value = value << 4 | static_cast<uint64_t>(digit);
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
  q.file_ref_ = ref;
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

bool AddressQuery::is_file_mapping(const ProcessMapping& m) {
  return !m.path.empty() && m.path.front() == '/';
}

const ProcessMapping* AddressQuery::mapping_of(uint64_t address) const {
  auto it = std::upper_bound(mappings_.begin(), mappings_.end(), address,
                             [](uint64_t value, const ProcessMapping& m) { return value < m.start; });
  if (it == mappings_.begin() || address >= std::prev(it)->end) return nullptr;
  return &*std::prev(it);
}

ModuleRef AddressQuery::module_of(const ProcessMapping& m) const {
  ModuleRef ref;
  ref.path = m.path;
  ref.pid = pid_;
  ref.map_start = m.start;
  ref.map_end = m.end;
  return ref;
}

void AddressQuery::prepare(std::span<const std::string> inputs) {
  prepare_inputs([&](auto fn) {
    for (const std::string& text : inputs) fn(text);
  });
}

void AddressQuery::prepare_lines(std::string_view lines) {
  prepare_inputs([&](auto fn) {
    while (!lines.empty()) {
      const size_t end = lines.find('\n');
      fn(lines.substr(0, end));
      lines.remove_prefix(end == std::string_view::npos ? lines.size() : end + 1);
    }
  });
}

template <class ForEachInput>
void AddressQuery::prepare_inputs(ForEachInput for_each_input) {
  if (pid_ == 0) {
    std::vector<uint64_t> vaddrs;
    for_each_input([&](std::string_view text) {
      if (auto address = parse_hex_address(text)) vaddrs.push_back(*address);
    });
    symbolizer_->prepare_vaddrs(file_ref_, vaddrs);
    return;
  }
  // File offsets by mapping; mappings of one file share the module and so its preparation.
  std::vector<std::pair<const ProcessMapping*, uint64_t>> found;
  for_each_input([&](std::string_view text) {
    const auto address = parse_hex_address(text);
    const ProcessMapping* m = address ? mapping_of(*address) : nullptr;
    if (m != nullptr && is_file_mapping(*m)) found.emplace_back(m, *address - m->start + m->offset);
  });
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& a, const auto& b) { return a.first->path < b.first->path; });
  std::vector<uint64_t> offsets;
  for (size_t i = 0; i < found.size();) {
    size_t j = i;
    offsets.clear();
    for (; j < found.size() && found[j].first->path == found[i].first->path; ++j)
      offsets.push_back(found[j].second);
    const ModuleRef ref = module_of(*found[i].first);
    note_module(ref);
    symbolizer_->prepare(ref, offsets);
    i = j;
  }
}

AddressAnswer AddressQuery::lookup(std::string_view text) {
  AddressAnswer a;
  lookup(text, a);
  return a;
}

void AddressQuery::lookup(std::string_view text, AddressAnswer& a) {
  if (const ProcessMapping* m = start_lookup(text, a)) {
    finish_in_process(*m, a);
  } else if (a.in_module) {
    symbolizer_->resolve_vaddr(file_ref_, a.address, a.location);
  } else {
    a.location = Location{};
  }
}

void AddressQuery::lookup(std::string_view text, AddressAnswer& a, LocationView& where) {
  const ProcessMapping* m = start_lookup(text, a);
  if (m == nullptr && a.in_module) {
    a.location = Location{};
    symbolizer_->resolve_vaddr(file_ref_, a.address, where);
    return;
  }
  // Process mode resolves through Symbolizer::resolve: the views point into a.location.
  if (m != nullptr) {
    finish_in_process(*m, a);
  } else {
    a.location = Location{};
  }
  const Location& l = a.location;
  where.found = l.found;
  where.symbol = l.symbol;
  where.symbol_address = l.symbol_address;
  where.symbol_size = l.symbol_size;
  where.rel_address = l.rel_address;
  where.frames.resize(l.frames.size());
  for (size_t i = 0; i < l.frames.size(); ++i) {
    where.frames[i] = {l.frames[i].function, l.frames[i].file, l.frames[i].line, l.frames[i].column};
  }
}

const ProcessMapping* AddressQuery::start_lookup(std::string_view text, AddressAnswer& a) {
  a.input.assign(trim(text));
  a.parsed = false;
  a.error.clear();
  a.address = a.file_offset = a.vaddr = 0;
  a.module.clear();
  a.in_module = false;
  const auto address = parse_hex_address(a.input);
  if (!address) {
    a.error = a.input.empty() ? "empty input" : "not a hexadecimal address: '" + a.input + "'";
    return nullptr;
  }
  a.parsed = true;
  a.address = *address;
  if (pid_ == 0) {
    a.module.assign(file_);
    a.in_module = true;
    a.vaddr = a.address;
    return nullptr;
  }
  const ProcessMapping* mapping = mapping_of(a.address);
  if (mapping == nullptr) {
    a.error = "not in any mapping of process " + std::to_string(pid_);
    return nullptr;
  }
  const ProcessMapping& m = *mapping;
  a.module = m.path;
  a.file_offset = a.address - m.start + m.offset;
  if (!is_file_mapping(m)) {
    a.error = "in " + (m.path.empty() ? std::string("anonymous memory") : m.path) + ", not a file mapping";
    return nullptr;
  }
  return mapping;
}

void AddressQuery::finish_in_process(const ProcessMapping& m, AddressAnswer& a) {
  const ModuleRef ref = module_of(m);
  note_module(ref);
  a.in_module = true;
  a.location = std::move(symbolizer_->resolve(ref, {&a.file_offset, 1}).front());
  a.vaddr = a.location.rel_address + symbolizer_->module_info(ref).image_base;
}

}  // namespace hpd
