#!/usr/bin/env python3
"""Writes one C++ translation unit heavy in debug information, for symbolizer start-up benchmarks.

Usage: gen_big_dwarf.py TU_INDEX TYPES > tuN.cpp
Each of TYPES record types instantiates vector, sort with a lambda, map, unordered_map of
shared_ptr, std::function and ostringstream code, so g++ -O2 -g emits about 18 MB of DWARF (many
inlined template instances) per 40 types. symbolize_startup.sh links four such units (>50 MB).
"""
import sys

tu, types = int(sys.argv[1]), int(sys.argv[2])
print("#include <algorithm>\n#include <functional>\n#include <map>\n#include <memory>\n#include <numeric>\n"
      "#include <sstream>\n#include <string>\n#include <unordered_map>\n#include <vector>\n")
print(f"namespace tu{tu} {{")
print("template <class T, int K> inline T scaled(T v) { return v * K + static_cast<T>(K % 7); }")
for j in range(types):
    print(f"""
struct Rec{j} {{
  int id; double weight; std::string name; std::vector<int> values;
  bool operator<(const Rec{j}& o) const {{ return weight < o.weight || (weight == o.weight && id < o.id); }}
}};
template <int K> inline double score{j}(const Rec{j}& r) {{
  return std::accumulate(r.values.begin(), r.values.end(), scaled<double, K>(r.weight));
}}
int work{j}(int seed) {{
  std::vector<Rec{j}> recs;
  for (int i = 0; i < seed % 50 + 5; ++i) recs.push_back(Rec{j}{{i, (seed * 31 + i) % 17 * 0.5, std::to_string(i * {j}), std::vector<int>(i % 5, i)}});
  std::sort(recs.begin(), recs.end(), [](const Rec{j}& a, const Rec{j}& b) {{ return score{j}<{j % 5 + 2}>(a) < score{j}<{j % 5 + 2}>(b); }});
  std::map<std::string, Rec{j}> by_name;
  std::unordered_map<int, std::shared_ptr<Rec{j}>> by_id;
  for (const auto& r : recs) {{ by_name.emplace(r.name, r); by_id[r.id] = std::make_shared<Rec{j}>(r); }}
  std::function<int(const Rec{j}&)> f = [&](const Rec{j}& r) {{ return r.id + static_cast<int>(by_name.size()); }};
  std::ostringstream out;
  int total = 0;
  for (auto& [k, v] : by_name) {{ total += f(v); out << k << v.weight; }}
  std::stable_sort(recs.begin(), recs.end());
  return total + static_cast<int>(out.str().size() + by_id.size()) + recs.front().id;
}}""")
print("int run(int seed) { int t = 0;")
for j in range(types):
    print(f"  t += work{j}(seed + {j});")
print("  return t; }\n}")
