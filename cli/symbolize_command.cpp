// `hpctl symbolize`: addresses to functions and file:line:column, printed like llvm-symbolizer --inlining.
#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "hpd/symbolizer/address_query.h"

namespace hpd::cli {
namespace {

std::string hex(uint64_t value) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%" PRIx64, value);
  return buf;
}

// The text output, written through a raw pointer: one capacity check per inline level, where
// appending each piece to a std::string checked and called memcpy for every one of millions of
// short pieces (a fifteenth of hpctl symbolize's time on 100,000 C++ addresses).
class TextOut {
 public:
  // Room for n more bytes: write them from the returned pointer, then commit() the new end.
  char* room(size_t n) {
    if (capacity_ - size_ < n) grow(n);
    return data_.get() + size_;
  }
  void commit(const char* end) { size_ = static_cast<size_t>(end - data_.get()); }
  void append(std::string_view s) { commit(put(room(s.size()), s)); }
  static char* put(char* p, std::string_view s) {
    std::memcpy(p, s.data(), s.size());
    return p + s.size();
  }
  std::string_view view() const { return {data_.get(), size_}; }
  size_t size() const { return size_; }
  void clear() { size_ = 0; }

 private:
  void grow(size_t n) {
    const size_t capacity = std::max({capacity_ * 2, size_ + n, size_t{1} << 16});
    auto data = std::make_unique_for_overwrite<char[]>(capacity);
    if (size_ != 0) std::memcpy(data.get(), data_.get(), size_);
    data_ = std::move(data);
    capacity_ = capacity;
  }
  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// llvm-symbolizer's LLVM output style: per level the function, then file:line:column, innermost
// level first; "??" for what is unknown. Appended to a buffer rather than streamed: this runs
// once per address and iostream formatting was a fifth of hpctl symbolize's instructions.
void append_text(const AddressAnswer& a, const LocationView& where, bool inlines, bool process_mode,
                 TextOut& out) {
  if (!a.parsed) {
    out.append(a.input);  // llvm-symbolizer echoes what it cannot parse, with no blank line
    out.append("\n");
    return;
  }
  if (process_mode) {
    out.append(a.module.empty() ? std::string_view("??") : std::string_view(a.module));
    out.append("+");
    out.append(hex(a.module.empty() ? a.address : a.file_offset));
    out.append("\n");
  }
  const auto& frames = where.frames;
  const auto line = [&](std::string_view function, const SourceFrameView& at) {
    if (function.empty()) function = "??";
    const std::string_view file = at.file.empty() ? std::string_view("??") : at.file;
    constexpr size_t kNumbers = 2 * 10 + 4;  // two 32-bit numbers and four separators
    char* p = out.room(function.size() + file.size() + kNumbers);
    p = TextOut::put(p, function);
    *p++ = '\n';
    p = TextOut::put(p, file);
    *p++ = ':';
    p = std::to_chars(p, p + 10, at.line).ptr;
    *p++ = ':';
    p = std::to_chars(p, p + 10, at.column).ptr;
    *p++ = '\n';
    out.commit(p);
  };
  if (frames.empty()) {
    line({}, SourceFrameView{});
  } else if (!inlines) {
    // As llvm-symbolizer --no-inlines: the real function, at the innermost level's line.
    line(frames.front().function, frames.back());
  } else {
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) line(it->function, *it);
  }
  out.append("\n");
}

// Text answers by address: profiles repeat addresses, and an answer depends on nothing else
// (process mode reads the maps once), so a repeated address is answered from here.
//
// Storing an answer costs far more than it saves unless the address comes back soon and often:
// a Rust answer runs to a kilobyte, fresh heap costs a page fault per 4 KiB on a virtual machine,
// and a lookup is about a microsecond. Keeping every answer whose address came twice (an
// unordered_map of strings beside an unordered_set of every address seen) made hpctl symbolize
// 2.2 times slower on 100,000 uniformly spread addresses. So the cache is a fixed direct-mapped
// table: a slot first remembers an address, and keeps its answer only when that same address
// comes again before another one lands in the slot. Hot addresses get cached within a few
// sightings; a list of mostly distinct addresses caches almost nothing and touches no new memory.
class AnswerCache {
 public:
  const std::string* find(uint64_t address) const {
    const Slot& s = slot(address);
    return s.cached == address && s.has_answer ? &s.answer : nullptr;
  }
  void add(uint64_t address, std::string_view text) {
    Slot& s = slot(address);
    if (s.has_answer && s.cached == address) return;
    if (s.candidate != address || text.size() > kMaxAnswer) {
      s.candidate = address;
      return;
    }
    s.cached = address;
    s.has_answer = true;
    s.answer.assign(text);  // reuses the slot's storage when it is large enough
  }

 private:
  static constexpr unsigned kSlotBits = 11;   // 2,048 slots
  static constexpr size_t kMaxAnswer = 4096;  // at most 8 MiB of answers in all
  struct Slot {
    uint64_t candidate = 0;
    uint64_t cached = 0;
    bool has_answer = false;
    std::string answer;
  };
  Slot& slot(uint64_t address) { return slots_[index(address)]; }
  const Slot& slot(uint64_t address) const { return slots_[index(address)]; }
  static size_t index(uint64_t address) {
    return static_cast<size_t>((address * 0x9E3779B97F4A7C15ull) >> (64 - kSlotBits));
  }
  std::vector<Slot> slots_ = std::vector<Slot>(size_t{1} << kSlotBits);
};

void print_json(const AddressAnswer& a, const LocationView& where, bool inlines, bool process_mode,
                std::ostream& out) {
  using nlohmann::ordered_json;
  ordered_json doc;
  doc["input"] = a.input;
  if (!a.parsed) {
    doc["error"] = a.error;
    out << doc.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << '\n';
    return;
  }
  doc["address"] = hex(a.address);
  if (process_mode) {
    doc["module"] = a.module;
    if (a.in_module) doc["file_offset"] = hex(a.file_offset);
  } else {
    doc["module"] = a.module;
  }
  if (!a.error.empty()) doc["error"] = a.error;
  if (a.in_module) doc["vaddr"] = hex(a.vaddr);
  doc["found"] = where.found;
  if (where.found) {
    doc["symbol"] = where.symbol;
    doc["symbol_vaddr"] = hex(a.vaddr - (where.rel_address - where.symbol_address));
    if (where.symbol_size != 0) doc["symbol_size"] = where.symbol_size;
  }
  ordered_json frames = ordered_json::array();
  const auto& chain = where.frames;
  const auto add = [&](std::string_view function, const SourceFrameView& at, bool inlined) {
    frames.push_back({{"function", function},
                      {"file", at.file},
                      {"line", at.line},
                      {"column", at.column},
                      {"inlined", inlined}});
  };
  if (!chain.empty() && !inlines) {
    add(chain.front().function, chain.back(), false);
  } else {
    for (size_t i = chain.size(); i-- > 0;) add(chain[i].function, chain[i], i != 0);
  }
  doc["frames"] = std::move(frames);  // innermost first, as in the text output
  out << doc.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << '\n';
}

}  // namespace

int run_symbolize(const SymbolizeArgs& args) {
  if (args.exe.empty() == (args.pid == 0)) {
    std::fprintf(stderr, "hpctl symbolize: give exactly one of --exe FILE and --pid PID\n");
    return 2;
  }
  SymbolizerOptions options;
  if (!args.debug_dir.empty()) options.debug_root = args.debug_dir;
  Symbolizer symbolizer(options);
  AddressQuery query = args.pid != 0 ? AddressQuery::for_process(symbolizer, args.pid)
                                     : AddressQuery::for_file(symbolizer, args.exe);
  const bool process_mode = args.pid != 0;
  bool all_parsed = true;
  AddressAnswer a;  // reused: its strings keep their storage from one address to the next
  LocationView where;
  AnswerCache cache;
  TextOut text_out;
  const auto flush_text = [&] {
    std::cout.write(text_out.view().data(), static_cast<std::streamsize>(text_out.size()));
    text_out.clear();
  };

  const auto answer = [&](std::string_view text) {
    if (!args.json) {
      if (auto address = parse_hex_address(text)) {
        if (const std::string* known = cache.find(*address)) {
          text_out.append(*known);
          return;
        }
      }
    }
    query.lookup(text, a, where);
    for (const std::string& w : query.take_warnings())
      std::fprintf(stderr, "hpctl symbolize: warning: %s\n", w.c_str());
    if (!a.parsed) {
      all_parsed = false;
      std::fprintf(stderr, "hpctl symbolize: %s\n", a.error.c_str());
    }
    if (args.json) {
      print_json(a, where, !args.no_inlines, process_mode, std::cout);
    } else {
      const size_t start = text_out.size();
      append_text(a, where, !args.no_inlines, process_mode, text_out);
      if (a.parsed) cache.add(a.address, text_out.view().substr(start));
    }
  };

  for (const std::string& w : query.take_warnings())
    std::fprintf(stderr, "hpctl symbolize: warning: %s\n", w.c_str());
  if (!args.addresses.empty()) {
    if (args.addresses.size() > 1) query.prepare(args.addresses);
    for (const std::string& text : args.addresses) answer(text);
  } else {
    // Input is read in batches of what is already buffered (up to kBatch lines), the batch is
    // searched in address order (AddressQuery::prepare), and its answers are printed in input
    // order. A script talking to hpctl through a pipe, one address at a time, has a batch of one
    // and gets each answer at once. A file of addresses is searched in order (1.5 times faster
    // in all on 100,000 random addresses of libpython) and not written one system call per address.
    std::ios::sync_with_stdio(false);
    constexpr size_t kBatch = size_t{1} << 17;
    constexpr size_t kFlushBytes = size_t{1} << 16;
    std::string batch;  // the batch's lines, each ended by '\n': one buffer, not a string each
    size_t used = 0;
    std::string line;
    bool more = true;
    while (more) {
      used = 0;
      batch.clear();
      while (used < kBatch && (more = static_cast<bool>(std::getline(std::cin, line)))) {
        if (line.find_first_not_of(" \t\r") != std::string::npos) {
          batch += line;
          batch += '\n';
          ++used;
        }
        if (std::cin.rdbuf()->in_avail() <= 0) break;
      }
      if (used > 1) query.prepare_lines(batch);
      for (std::string_view rest = batch; !rest.empty();) {
        const size_t end = rest.find('\n');
        answer(rest.substr(0, end));
        rest.remove_prefix(end + 1);
        if (text_out.size() >= kFlushBytes) flush_text();
      }
      flush_text();
      std::cout.flush();
    }
  }
  flush_text();
  std::cout.flush();
  return all_parsed ? 0 : 1;
}

}  // namespace hpd::cli
