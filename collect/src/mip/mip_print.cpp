// Output of decoded MIP profiles for `hpctl mip show/merge`: an 80-column table and JSON.
//
// JSON schema (one module; a snapshot wraps modules as
// {"pid","time_ns","read_ns","modules":[...],"errors":[...]}):
// {"path","build_id","layout":"A"|"B","module_hash":"0x........","profile_type":N,
//  "mode":"call-count"|"coverage","raw_profiles":N,"addresses_known":bool,"raw_section_address":N,
//  "raw_section_size":N,"load_bias":N,
//  "functions":[{"name" (demangled),"mangled","address"
//  (link-time),"runtime_address","section_offset","size",
//                "calls","called","first_call" (mean timestamp; 0 =
//                never/untimed),"order_sum","profiles_called", "blocks_covered","blocks_total"}]   (map
//                order)
//  "call_order":[names by first call], "never_called":[names]}
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>

#include "hpd/mip/mip.h"

namespace hpd::mip {
namespace {

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

std::string fit(const std::string& s, size_t width) {
  if (s.size() <= width) return s;
  if (width <= 3) return s.substr(0, width);
  return s.substr(0, width - 3) + "...";
}

std::vector<const Function*> sorted(const Module& m, const PrintOptions& o) {
  std::vector<const Function*> fs;
  if (o.sort == SortOrder::kFirstCall) {
    fs = m.call_order();
    if (o.include_never_called) {
      for (const Function* f : m.never_called()) fs.push_back(f);
    }
    return fs;
  }
  for (const Function& f : m.functions) {
    if (o.include_never_called || f.called()) fs.push_back(&f);
  }
  std::stable_sort(fs.begin(), fs.end(), [&](const Function* a, const Function* b) {
    switch (o.sort) {
      case SortOrder::kCalls:
        if (a->call_count != b->call_count) return a->call_count > b->call_count;
        return a->demangled < b->demangled;
      case SortOrder::kAddress: return a->section_offset < b->section_offset;
      default: return a->demangled < b->demangled;
    }
  });
  return fs;
}

nlohmann::json module_json(const Module& m) {
  nlohmann::json j;
  j["path"] = m.path;
  j["build_id"] = m.build_id;
  j["layout"] = m.layout == Layout::kA ? "A" : "B";
  char h[16];
  std::snprintf(h, sizeof h, "0x%08x", m.module_hash);
  j["module_hash"] = h;
  j["profile_type"] = m.profile_type;
  j["mode"] = m.counts_calls() ? "call-count" : "coverage";
  j["raw_profiles"] = m.raw_profiles;
  j["addresses_known"] = m.addresses_known;
  j["raw_section_address"] = m.raw_section_address;
  j["raw_section_size"] = m.raw_section_size;
  j["load_bias"] = m.load_bias;
  nlohmann::json fs = nlohmann::json::array();
  for (const Function& f : m.functions) {
    fs.push_back({{"name", f.demangled},
                  {"mangled", f.name},
                  {"address", f.file_address},
                  {"runtime_address", f.runtime_address},
                  {"section_offset", f.section_offset},
                  {"size", f.size},
                  {"calls", f.call_count},
                  {"called", f.called()},
                  {"first_call", f.first_call()},
                  {"order_sum", f.order_sum},
                  {"profiles_called", f.profiles_called},
                  {"blocks_covered", f.blocks_covered()},
                  {"blocks_total", f.blocks_total()}});
  }
  j["functions"] = std::move(fs);
  nlohmann::json order = nlohmann::json::array(), never = nlohmann::json::array();
  for (const Function* f : m.call_order()) order.push_back(f->demangled);
  for (const Function* f : m.never_called()) never.push_back(f->demangled);
  j["call_order"] = std::move(order);
  j["never_called"] = std::move(never);
  return j;
}

}  // namespace

void print_table(const Module& m, std::ostream& out, const PrintOptions& o) {
  const auto never = m.never_called();
  out << "module " << (m.path.empty() ? "(unnamed)" : m.path) << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "  hash 0x%08x, layout %s, %s, %zu functions, %zu never called",
                m.module_hash, m.layout == Layout::kA ? "A" : "B",
                m.counts_calls() ? "call counts" : "coverage only", m.functions.size(), never.size());
  out << line;
  if (m.raw_profiles > 1) out << ", " << m.raw_profiles << " raw profiles";
  if (!m.build_id.empty()) out << "\n  build-id " << m.build_id;
  out << "\n";
  // order(7) calls(12) blocks(9) address(14) size(7) = 49 + spaces; the name takes the rest of the width.
  std::snprintf(line, sizeof line, "%7s %12s %9s %14s %7s  %s", "order", "calls", "blocks", "address", "size",
                "function");
  out << line << "\n";
  const size_t name_width = o.width > 55 ? o.width - 55 : 10;
  for (const Function* f : sorted(m, o)) {
    std::string order = "-";
    if (f->called() && f->order_sum) {
      char b[32];
      if (f->profiles_called > 1) {
        std::snprintf(b, sizeof b, "%.1f", f->first_call());
      } else {
        std::snprintf(b, sizeof b, "%" PRIu64, f->order_sum);
      }
      order = b;
    }
    std::string calls = f->called() ? std::to_string(f->call_count) : "never";
    if (f->called() && !m.counts_calls()) calls = "yes";
    std::string blocks = "-";
    if (f->blocks_total())
      blocks = std::to_string(f->blocks_covered()) + "/" + std::to_string(f->blocks_total());
    const uint64_t addr = f->runtime_address ? f->runtime_address : f->file_address;
    std::string address =
        m.addresses_known || f->runtime_address ? hex(addr) : "+" + std::to_string(f->section_offset);
    std::snprintf(line, sizeof line, "%7s %12s %9s %14s %7u  %s", order.c_str(), calls.c_str(),
                  blocks.c_str(), address.c_str(), f->size, fit(f->demangled, name_width).c_str());
    out << line << "\n";
  }
}

void print_table(const Snapshot& s, std::ostream& out, const PrintOptions& o) {
  out << "MIP snapshot of process " << s.pid << ": " << s.modules.size() << " module(s), read in "
      << (s.read_ns + 500) / 1000 << " us\n";
  for (const Module& m : s.modules) {
    out << "\n";
    print_table(m, out, o);
  }
  for (const ModuleError& e : s.errors) out << "\nerror: " << e.message << "\n";
}

std::string to_json(const Module& m, int indent) {
  return module_json(m).dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string to_json(const Snapshot& s, int indent) {
  nlohmann::json j;
  j["pid"] = s.pid;
  j["time_ns"] = s.time_ns;
  j["read_ns"] = s.read_ns;
  nlohmann::json ms = nlohmann::json::array();
  for (const Module& m : s.modules) ms.push_back(module_json(m));
  j["modules"] = std::move(ms);
  nlohmann::json es = nlohmann::json::array();
  for (const ModuleError& e : s.errors)
    es.push_back({{"path", e.path}, {"error", to_string(e.code)}, {"message", e.message}});
  j["errors"] = std::move(es);
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace hpd::mip
