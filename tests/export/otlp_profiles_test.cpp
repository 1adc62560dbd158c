// encode_otlp_profiles on the synthetic profile, read back with a protobuf decoder of the test's
// own: the tables' empty first entries, one profile per sample type with the right sums, stacks leaf
// first, inline levels innermost first, labels and build-ids. That a real collector accepts the
// request is tests/cli/otlp_push_test.cpp's part.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "hpd/export/otlp_profiles.h"
#include "synthetic_profile.h"

namespace hpd {
namespace {

// One message's fields: number -> values, varints as numbers, length-delimited as bytes.
struct Message {
  std::multimap<uint32_t, uint64_t> ints;
  std::multimap<uint32_t, std::string> bytes;

  std::vector<std::string> all(uint32_t field) const {
    std::vector<std::string> out;
    for (auto [it, end] = bytes.equal_range(field); it != end; ++it) out.push_back(it->second);
    return out;
  }
  uint64_t num(uint32_t field) const {
    const auto it = ints.find(field);
    return it != ints.end() ? it->second : 0;
  }
  std::string str(uint32_t field) const {
    const auto it = bytes.find(field);
    return it != bytes.end() ? it->second : "";
  }
};

uint64_t varint(std::string_view b, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0; pos < b.size(); shift += 7) {
    const auto byte = static_cast<uint8_t>(b[pos++]);
    v |= uint64_t{byte & 0x7fu} << shift;
    if ((byte & 0x80) == 0) return v;
  }
  ADD_FAILURE() << "truncated varint";
  return v;
}

Message decode(std::string_view b) {
  Message m;
  size_t pos = 0;
  while (pos < b.size()) {
    const uint64_t key = varint(b, pos);
    const auto field = static_cast<uint32_t>(key >> 3);
    switch (key & 7) {
      case 0: m.ints.emplace(field, varint(b, pos)); break;
      case 1: {
        uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<uint8_t>(b[pos + i])} << (8 * i);
        pos += 8;
        m.ints.emplace(field, v);
        break;
      }
      case 2: {
        const uint64_t len = varint(b, pos);
        m.bytes.emplace(field, std::string(b.substr(pos, len)));
        pos += len;
        break;
      }
      default: ADD_FAILURE() << "unexpected wire type " << (key & 7); return m;
    }
  }
  return m;
}

std::vector<uint64_t> packed(const std::string& b) {
  std::vector<uint64_t> out;
  size_t pos = 0;
  while (pos < b.size()) out.push_back(varint(b, pos));
  return out;
}

TEST(OtlpProfilesTest, SyntheticProfileReadsBack) {
  Profile profile = testing::make_synthetic_profile();
  for (Thread& t : profile.threads) t.process_cgroup = "/system.slice/myapp.service";
  OtlpProfilesOptions options;
  options.resource_labels.emplace_back("team", "perf");
  const Message request = decode(encode_otlp_profiles(profile, options));
  const Message dict = decode(request.str(2));
  const std::vector<std::string> strings = dict.all(5);
  ASSERT_FALSE(strings.empty());
  EXPECT_EQ(strings[0], "");
  // Index 0 of every table is the empty entry.
  for (const uint32_t table : {1u, 2u, 3u, 4u, 6u, 7u}) {
    const std::vector<std::string> rows = dict.all(table);
    ASSERT_FALSE(rows.empty()) << "table " << table;
    EXPECT_EQ(rows[0], "") << "table " << table;
  }
  const std::vector<std::string> mappings = dict.all(1), locations = dict.all(2), functions = dict.all(3),
                                 attributes = dict.all(6), stacks = dict.all(7);
  const auto attribute = [&](uint64_t i) {
    const Message kv = decode(attributes.at(i));
    const Message value = decode(kv.str(2));
    return std::make_pair(strings.at(kv.num(1)),
                          value.bytes.count(1) ? value.str(1) : std::to_string(value.num(3)));
  };
  const auto function_name = [&](uint64_t i) { return strings.at(decode(functions.at(i)).num(1)); };

  // One process, its resource labelled.
  const std::vector<std::string> resources = request.all(1);
  ASSERT_EQ(resources.size(), 1u);
  const Message rp = decode(resources[0]);
  std::map<std::string, std::string> labels;
  for (const std::string& kv : decode(rp.str(1)).all(1)) {
    const Message m = decode(kv);
    const Message value = decode(m.str(2));
    labels[m.str(1)] = value.bytes.count(1) ? value.str(1) : std::to_string(value.num(3));
  }
  EXPECT_EQ(labels["host.name"], "testhost");
  EXPECT_EQ(labels["process.pid"], "100");
  EXPECT_EQ(labels["process.executable.name"], "myapp");
  EXPECT_EQ(labels["process.executable.path"], "/usr/bin/myapp");
  EXPECT_EQ(labels["team"], "perf");
  EXPECT_EQ(labels["process.linux.cgroup"], "/system.slice/myapp.service");
  EXPECT_EQ(labels["systemd.unit"], "myapp.service");
  EXPECT_EQ(labels.count("container.id"), 0u);

  // One profile per sample type; the sums are the synthetic profile's.
  const std::vector<std::string> scopes = rp.all(2);
  ASSERT_EQ(scopes.size(), 1u);
  const Message scope = decode(scopes[0]);
  EXPECT_EQ(decode(scope.str(1)).str(1), "hpd");
  std::map<std::string, uint64_t> sums;
  std::map<std::string, uint64_t> cpu_by_leaf;
  std::set<std::string> sample_labels;
  for (const std::string& bytes : scope.all(2)) {
    const Message p = decode(bytes);
    const Message type = decode(p.str(1));
    const std::string name = strings.at(type.num(1)) + "/" + strings.at(type.num(2));
    EXPECT_EQ(p.num(3), profile.meta.recording.start_unix_ns) << name;
    EXPECT_EQ(p.num(4), 20000000u) << name;
    EXPECT_EQ(p.num(6), 1000000u) << name;
    EXPECT_EQ(p.str(7).size(), 16u) << name;
    for (const std::string& sb : p.all(2)) {
      const Message s = decode(sb);
      const std::vector<uint64_t> values = packed(s.str(4));
      ASSERT_EQ(values.size(), 1u);
      sums[name] += values[0];
      for (const uint64_t a : packed(s.str(2))) sample_labels.insert(attribute(a).first);
      const std::vector<uint64_t> locs = packed(decode(stacks.at(s.num(1))).str(1));
      if (name == "cpu/nanoseconds" && !locs.empty()) {
        const Message leaf = decode(locations.at(locs[0]));
        cpu_by_leaf[function_name(decode(leaf.all(3).at(0)).num(1))] += values[0];
      }
    }
  }
  EXPECT_EQ(sums["samples/count"], 12u);
  EXPECT_EQ(sums["cpu/nanoseconds"], 14500000u);
  EXPECT_EQ(sums["off_cpu_blocked/nanoseconds"], 5000000u);
  EXPECT_EQ(sums.count("off_cpu_waiting/nanoseconds"), 0u) << "no sample waited for a CPU";
  EXPECT_EQ(sample_labels, (std::set<std::string>{"thread.id", "thread.name"}));
  // Leaf first: the memcpy samples' leaf is memcpy, the system call's is the kernel function.
  EXPECT_EQ(cpu_by_leaf["__memcpy_avx_unaligned_erms"], 6000000u);
  EXPECT_EQ(cpu_by_leaf["ksys_read"], 500000u);

  // The inlined call: one location, two lines, the inlined callee first.
  bool inline_seen = false;
  for (size_t i = 1; i < locations.size(); ++i) {
    const std::vector<std::string> lines = decode(locations[i]).all(3);
    if (lines.size() != 2) continue;
    inline_seen = true;
    EXPECT_EQ(function_name(decode(lines[0]).num(1)), "std::vector<int>::push_back(int const&)");
    EXPECT_EQ(function_name(decode(lines[1]).num(1)), "compute(int)");
  }
  EXPECT_TRUE(inline_seen);

  // Build-ids on the mappings that have one.
  std::map<std::string, std::string> build_ids;
  for (size_t i = 1; i < mappings.size(); ++i) {
    const Message m = decode(mappings[i]);
    for (const uint64_t a : packed(m.str(5))) {
      const auto [key, value] = attribute(a);
      if (key == "process.executable.build_id.gnu") build_ids[strings.at(m.num(4))] = value;
    }
  }
  EXPECT_EQ(build_ids["/usr/bin/myapp"], testing::kSyntheticBuildId);
  EXPECT_EQ(build_ids["[kernel.kallsyms]"], "aabbccddeeff00112233445566778899aabbccdd");
  EXPECT_EQ(build_ids.count("/usr/lib/x86_64-linux-gnu/libc.so.6"), 0u);
}

// The CPU time the scheduler charged a thread for a wait after its wakeup (an off-CPU sample's
// cpu_delta_ns) is in the cpu profile, with the stack it waited in.
TEST(OtlpProfilesTest, AWaitsChargedCpuIsInTheCpuProfile) {
  Profile profile = testing::make_synthetic_profile();
  ASSERT_TRUE(testing::charge_first_off_cpu_sample(profile, 25'000));
  const Message request = decode(encode_otlp_profiles(profile, {}));
  const Message dict = decode(request.str(2));
  const std::vector<std::string> strings = dict.all(5), stacks = dict.all(7), locations = dict.all(2),
                                 functions = dict.all(3);
  const std::vector<std::string> resources = request.all(1);
  ASSERT_EQ(resources.size(), 1u);
  uint64_t cpu = 0, futex_cpu = 0;
  for (const std::string& scope_bytes : decode(resources[0]).all(2)) {
    for (const std::string& bytes : decode(scope_bytes).all(2)) {
      const Message p = decode(bytes);
      if (strings.at(decode(p.str(1)).num(1)) != "cpu") continue;
      for (const std::string& sb : p.all(2)) {
        const Message s = decode(sb);
        const uint64_t v = packed(s.str(4)).at(0);
        cpu += v;
        const std::vector<uint64_t> locs = packed(decode(stacks.at(s.num(1))).str(1));
        if (locs.empty()) continue;
        const Message leaf = decode(locations.at(locs[0]));
        if (strings.at(decode(functions.at(decode(leaf.all(3).at(0)).num(1))).num(1)) == "futex_wait")
          futex_cpu += v;
      }
    }
  }
  EXPECT_EQ(cpu, 14'525'000u);
  EXPECT_EQ(futex_cpu, 25'000u);
}

}  // namespace
}  // namespace hpd
