// The truth line a fixture prints about itself ("cpu_slices: seven_ns N three_ns N ..."): its
// keys and values, for the tests that check a profile against what the fixture measured.
// (tests/support/cpu_wait_truth.h reads cpu_wait's lines, one per thread.)
#pragma once

#include <map>
#include <sstream>
#include <string>

namespace hpd::test {

// The "KEY VALUE" pairs after the first "NAME:" in `out`; empty when the line is missing.
inline std::map<std::string, double> fixture_truth(const std::string& out, const std::string& name) {
  std::map<std::string, double> values;
  const auto at = out.find(name + ":");
  if (at == std::string::npos) return values;
  std::istringstream in(out.substr(at + name.size() + 1));
  std::string key;
  double value = 0;
  while (in >> key >> value) values[key] = value;
  return values;
}

// The value after `key` in the first line of `out` that starts with `prefix`; -1 when absent.
inline double fixture_field(const std::string& out, const std::string& prefix, const std::string& key) {
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::istringstream in(line.substr(prefix.size()));
    std::string k;
    while (in >> k) {
      if (k != key) continue;
      double v = -1;
      in >> v;
      return v;
    }
  }
  return -1;
}

}  // namespace hpd::test
