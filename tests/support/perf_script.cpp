#include "perf_script.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace hpd::test {

std::string perf_script_path(const std::string& dir) {
  return dir + "/perf.txt";
}

std::string perf_dwarf_command(const std::string& perf, const std::string& dir, const std::string& command,
                               uint64_t period, uint32_t stack_bytes) {
  const std::string data = dir + "/perf.data";
  return perf + " record -q -e task-clock -c " + std::to_string(period) + " --call-graph dwarf," +
         std::to_string(stack_bytes) + " -o " + data + " -- " + command + " >/dev/null 2>&1 && " + perf +
         " script -i " + data + " -F comm,ip,sym > " + perf_script_path(dir) + " 2>/dev/null";
}

std::vector<PerfStack> read_perf_script(const std::string& path) {
  std::ifstream in(path);
  std::vector<PerfStack> stacks;
  bool open = false;  // a sample has begun and no blank line ended it
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) {
      open = false;
      continue;
    }
    const bool frame = line[0] == '\t' || line[0] == ' ';
    if (!frame || !open) {
      stacks.emplace_back();
      open = true;
    }
    if (!frame) continue;  // the sample's header line
    std::istringstream fields(line);
    std::string ip, sym;
    fields >> ip >> sym;
    stacks.back().push_back(sym.substr(0, sym.find('+')));
  }
  return stacks;
}

ChainShare chain_share(const std::vector<PerfStack>& stacks, const std::vector<std::string>& chain) {
  ChainShare c;
  for (const PerfStack& s : stacks) {
    if (chain.empty() || s.empty() || s.front() != chain.front()) continue;
    ++c.in_leaf;
    c.whole += s.size() >= chain.size() && std::equal(chain.begin(), chain.end(), s.begin());
  }
  return c;
}

}  // namespace hpd::test
