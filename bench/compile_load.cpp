// What bench/all_rate.sh's COMPILERS compile in a loop: a translation unit of the standard library's
// heavier headers (a few seconds of g++ -O2), for a machine that builds code.
#include <algorithm>
#include <iostream>
#include <map>
#include <regex>
#include <string>
#include <vector>
int main(int argc, char** argv) {
  std::map<std::string, std::vector<int>> m;
  std::regex re("([a-z]+)=([0-9]+)");
  for (int i = 1; i < argc; ++i) {
    std::smatch s;
    std::string a = argv[i];
    if (std::regex_match(a, s, re)) m[s[1]].push_back(std::stoi(s[2]));
  }
  for (auto& [k, v] : m) {
    std::sort(v.begin(), v.end());
    std::cout << k << v.size() << "\n";
  }
}
