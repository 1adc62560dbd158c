// Privileged tests: call graphs of the eBPF backend through the real kernel. fp mode puts back the
// caller of glibc's frameless memmove; dwarf mode unwinds a -fomit-frame-pointer chain from the stack
// copies the program takes.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "hpd/collect/recorder.h"
#include "record_checks.h"

namespace hpd {
namespace {

const std::string kFixtures = HPD_UNWIND_FIXTURE_DIR;

RecordResult record_fixture(const std::string& path, CallGraph mode) {
  RecordOptions options;
  options.backend = Backend::kBpf;
  options.call_graph = mode;
  options.off_cpu = Switch::kOff;
  options.target.command = {path, "1.5"};
  return record(options);
}

// The function of `path` an address of a process falls in ("" if none of `names`, or another module).
// Return addresses are looked up one byte back, inside their call instruction.
class FunctionLookup {
 public:
  FunctionLookup(const RawProfile& profile, std::string path, const std::vector<std::string>& names)
      : profile_(profile), path_(std::move(path)) {
    for (const std::string& name : names) {
      const auto range = function_file_range(path_, name);
      EXPECT_TRUE(range) << name;
      if (range) ranges_.emplace_back(name, *range);
    }
  }

  std::string at(const RawProcess& process, uint64_t address, uint64_t time_ns, bool return_address) const {
    if (return_address) --address;
    const RawMapping* m = process.find_mapping(address, time_ns);
    if (m == nullptr || profile_.modules[m->module].path != path_) return "";
    const uint64_t offset = address - m->start + m->file_offset;
    for (const auto& [name, range] : ranges_) {
      if (offset >= range.begin && offset < range.end) return name;
    }
    return "";
  }

  bool in_module(const RawProcess& process, uint64_t address, uint64_t time_ns,
                 const std::string& part) const {
    const RawMapping* m = process.find_mapping(address, time_ns);
    return m != nullptr && profile_.modules[m->module].path.find(part) != std::string::npos;
  }

 private:
  const RawProfile& profile_;
  std::string path_;
  std::vector<std::pair<std::string, FileRange>> ranges_;
};

TEST(BpfCallGraph, FpModePutsBackTheCallerOfAFramelessMemmove) {
  const std::string fixture = kFixtures + "/memcpy_fp";
  const RecordResult result = record_fixture(fixture, CallGraph::kFp);
  const RawProfile& profile = result.profile;
  EXPECT_EQ(profile.info.backend, "bpf");
  EXPECT_EQ(profile.info.call_graph, "fp");
  EXPECT_EQ(result.call_graph, CallGraph::kFp);
  ASSERT_EQ(profile.processes.size(), 1u);
  const RawProcess& process = profile.processes.front();
  const FunctionLookup lookup(profile, fixture, {"copy_block", "main"});
  size_t in_libc = 0, with_caller = 0;
  for (const RawSample& s : profile.samples) {
    if (s.kind != SampleKind::kOnCpu || s.stack == kNoIndex) continue;
    const auto user = profile.stacks.user_frames(s.stack);
    if (user.empty() || !lookup.in_module(process, user[0], s.time_ns, "libc")) continue;
    ++in_libc;
    with_caller += user.size() >= 3 && lookup.at(process, user[1], s.time_ns, true) == "copy_block" &&
                   lookup.at(process, user[2], s.time_ns, true) == "main";
  }
  std::printf("bpf fp: %zu samples in libc, %zu with copy_block <- main after the leaf; %llu callers added\n",
              in_libc, with_caller, static_cast<unsigned long long>(result.leaf_callers_added));
  ASSERT_GT(in_libc, 300u) << "about 1.5 s in memmove at 999 Hz expected";
  EXPECT_GE(with_caller, in_libc * 9 / 10);
  EXPECT_GT(result.leaf_callers_added, 0u);
  EXPECT_EQ(result.stack_copy_bytes, 128u);  // the fp leaf window (kLeafStackBytes in bpf_load.cpp)
}

TEST(BpfCallGraph, DwarfModeUnwindsAChainWithoutFramePointers) {
  const std::string fixture = kFixtures + "/chain_gcc";
  const RecordResult result = record_fixture(fixture, CallGraph::kDwarf);
  const RawProfile& profile = result.profile;
  EXPECT_EQ(profile.info.backend, "bpf");
  EXPECT_EQ(profile.info.call_graph, "dwarf");
  EXPECT_EQ(result.call_graph, CallGraph::kDwarf);
  EXPECT_EQ(result.stack_copy_bytes, kDefaultStackCopyBytes);
  ASSERT_EQ(profile.processes.size(), 1u);
  const RawProcess& process = profile.processes.front();
  const std::vector<std::string> chain = {"chain_d", "chain_c", "chain_b", "chain_a", "main"};
  const FunctionLookup lookup(profile, fixture, chain);
  size_t in_d = 0, whole = 0;
  for (const RawSample& s : profile.samples) {
    if (s.kind != SampleKind::kOnCpu || s.stack == kNoIndex) continue;
    const auto user = profile.stacks.user_frames(s.stack);
    if (user.empty() || lookup.at(process, user[0], s.time_ns, false) != "chain_d") continue;
    ++in_d;
    bool ok = user.size() >= chain.size() && s.stack_end == StackEnd::kComplete;
    for (size_t i = 1; ok && i < chain.size(); ++i)
      ok = lookup.at(process, user[i], s.time_ns, true) == chain[i];
    whole += ok;
  }
  std::printf(
      "bpf dwarf: %zu samples in chain_d, %zu (%.1f%%) whole and complete; %llu unwound in %.1f ms, "
      "%.0f bytes per sample\n",
      in_d, whole, in_d ? 100.0 * double(whole) / double(in_d) : 0.0,
      static_cast<unsigned long long>(result.unwound_samples), double(result.unwind_ns) / 1e6,
      result.unwound_samples ? double(result.sample_bytes) / double(result.unwound_samples) : 0.0);
  ASSERT_GT(in_d, 300u) << "about 1.5 s in chain_d at 999 Hz expected";
  EXPECT_GE(whole * 100, in_d * 95);
  EXPECT_GT(result.unwound_samples, 0u);
}

}  // namespace
}  // namespace hpd
