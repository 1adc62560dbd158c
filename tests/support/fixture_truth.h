// The truth line a fixture prints about itself ("cpu_slices: seven_ns N three_ns N ..."): its
// keys and values, for the tests that check a profile against what the fixture measured.
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

}  // namespace hpd::test
