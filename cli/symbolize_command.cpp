// `hpctl symbolize`: addresses to functions and file:line:column, printed like llvm-symbolizer --inlining.
#include <cinttypes>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "hpd/symbolizer/address_query.h"

namespace hpd::cli {
namespace {

std::string hex(uint64_t value) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%" PRIx64, value);
  return buf;
}

// llvm-symbolizer's LLVM output style: per level the function, then file:line:column, innermost
// level first; "??" for what is unknown.
void print_text(const AddressAnswer& a, bool inlines, bool process_mode, std::ostream& out) {
  if (!a.parsed) {
    out << a.input << '\n';  // llvm-symbolizer echoes what it cannot parse, with no blank line
    return;
  }
  if (process_mode) {
    out << (a.module.empty() ? std::string("??") : a.module) << '+'
        << hex(a.module.empty() ? a.address : a.file_offset) << '\n';
  }
  const auto& frames = a.location.frames;
  const auto line = [&](const std::string& function, const SourceFrame& where) {
    out << (function.empty() ? "??" : function) << '\n'
        << (where.file.empty() ? "??" : where.file) << ':' << where.line << ':' << where.column << '\n';
  };
  if (frames.empty()) {
    line("", SourceFrame{});
  } else if (!inlines) {
    // As llvm-symbolizer --no-inlines: the real function, at the innermost level's line.
    line(frames.front().function, frames.back());
  } else {
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) line(it->function, *it);
  }
  out << '\n';
}

void print_json(const AddressAnswer& a, bool inlines, bool process_mode, std::ostream& out) {
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
  doc["found"] = a.location.found;
  if (a.location.found) {
    doc["symbol"] = a.location.symbol;
    doc["symbol_vaddr"] = hex(a.vaddr - (a.location.rel_address - a.location.symbol_address));
    if (a.location.symbol_size != 0) doc["symbol_size"] = a.location.symbol_size;
  }
  ordered_json frames = ordered_json::array();
  const auto& chain = a.location.frames;
  const auto add = [&](const std::string& function, const SourceFrame& where, bool inlined) {
    frames.push_back({{"function", function},
                      {"file", where.file},
                      {"line", where.line},
                      {"column", where.column},
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
  Symbolizer symbolizer(options);
  AddressQuery query = args.pid != 0 ? AddressQuery::for_process(symbolizer, args.pid)
                                     : AddressQuery::for_file(symbolizer, args.exe);
  const bool process_mode = args.pid != 0;
  bool all_parsed = true;

  const auto answer = [&](const std::string& text) {
    AddressAnswer a = query.lookup(text);
    for (const std::string& w : query.take_warnings())
      std::fprintf(stderr, "hpctl symbolize: warning: %s\n", w.c_str());
    if (!a.parsed) {
      all_parsed = false;
      std::fprintf(stderr, "hpctl symbolize: %s\n", a.error.c_str());
    }
    if (args.json) {
      print_json(a, !args.no_inlines, process_mode, std::cout);
    } else {
      print_text(a, !args.no_inlines, process_mode, std::cout);
    }
  };

  for (const std::string& w : query.take_warnings())
    std::fprintf(stderr, "hpctl symbolize: warning: %s\n", w.c_str());
  if (!args.addresses.empty()) {
    for (const std::string& text : args.addresses) answer(text);
  } else {
    // One answer per line, flushed whenever no more input is buffered, so that a script talking
    // to hpctl through a pipe gets each answer at once while a file of addresses is not written
    // one system call per address.
    std::ios::sync_with_stdio(false);
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.find_first_not_of(" \t\r") != std::string::npos) answer(line);
      if (std::cin.rdbuf()->in_avail() <= 0) std::cout.flush();
    }
  }
  std::cout.flush();
  return all_parsed ? 0 : 1;
}

}  // namespace hpd::cli
