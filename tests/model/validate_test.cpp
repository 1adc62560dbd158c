// Unit tests for validate(Profile): a well-formed profile passes, and each broken invariant is named.
#include "hpd/model/validate.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace hpd {
namespace {

// Two libs, three funcs (one with a file), a native symbol, frames, a stack chain of three, a thread
// with samples, a call edge, a call latency and a MIP count: every table that holds an index.
Profile make_valid_profile() {
  Profile p;
  Lib lib;
  lib.name = "a.out";
  lib.path = "/tmp/a.out";
  const uint32_t l = p.intern_lib(lib);
  const uint32_t main_f = p.intern_func("main", "/src/a.c", l);
  const uint32_t work_f = p.intern_func("work", "", l);
  const uint32_t leaf_f = p.intern_func("leaf", "", kNoIndex);
  const uint32_t sym = p.intern_native_symbol(l, 0x1000, 0x40, "main");
  Frame f;
  f.func = main_f;
  f.native_symbol = sym;
  f.lib = l;
  f.address = 0x1010;
  const uint32_t fr0 = p.intern_frame(f);
  f.func = work_f;
  f.native_symbol = kNoIndex;
  const uint32_t fr1 = p.intern_frame(f);
  f.func = leaf_f;
  f.lib = kNoIndex;
  f.category = Category::kKernel;
  const uint32_t fr2 = p.intern_frame(f);
  const uint32_t s0 = p.intern_stack(kNoIndex, fr0);
  const uint32_t s1 = p.intern_stack(s0, fr1);
  const uint32_t s2 = p.intern_stack(s1, fr2);
  Thread t;
  t.pid = 10;
  t.tid = 11;
  t.samples.push_back(Sample{100, s2, 5, 0, SampleKind::kOnCpu, StackEnd::kComplete});
  t.samples.push_back(Sample{200, kNoIndex, 5, 0, SampleKind::kOnCpu, StackEnd::kUnknown});
  t.samples.push_back(Sample{300, s1, 0, 7, SampleKind::kOffCpu, StackEnd::kComplete});
  p.threads.push_back(t);
  p.call_edges.push_back(CallEdge{10, main_f, work_f, 3});
  p.call_edges.push_back(CallEdge{10, kNoIndex, main_f, 1});
  CallLatency latency;
  latency.func = work_f;
  latency.calls = 3;
  p.call_latency.push_back(latency);
  MipCount mip;
  mip.func = leaf_f;
  mip.calls = 2;
  p.mip_counts.push_back(mip);
  return p;
}

TEST(ValidateProfile, AWellFormedProfilePasses) {
  const Profile p = make_valid_profile();
  EXPECT_EQ(find_profile_violation(p), std::nullopt);
  EXPECT_NO_THROW(validate(p));
  EXPECT_NO_THROW(validate(Profile{}));
}

struct Case {
  const char* name;
  std::function<void(Profile&)> breaks;
  const char* message;  // the whole violation, as find_profile_violation says it
};

TEST(ValidateProfile, EachBrokenInvariantIsNamed) {
  const Case cases[] = {
      {"func name", [](Profile& p) { p.funcs[1].name = 50; }, "func 1's name refers to string 50 of 4"},
      {"func file", [](Profile& p) { p.funcs[0].file = 9; }, "func 0's file refers to string 9 of 4"},
      {"func lib", [](Profile& p) { p.funcs[2].lib = 3; }, "func 2 refers to lib 3 of 1"},
      {"native symbol name", [](Profile& p) { p.native_symbols[0].name = 4; },
       "native symbol 0's name refers to string 4 of 4"},
      {"native symbol lib", [](Profile& p) { p.native_symbols[0].lib = 1; },
       "native symbol 0 refers to lib 1 of 1"},
      {"frame func", [](Profile& p) { p.frames[2].func = 3; }, "frame 2 refers to func 3 of 3"},
      {"frame native symbol", [](Profile& p) { p.frames[1].native_symbol = 1; },
       "frame 1 refers to native symbol 1 of 1"},
      {"frame lib", [](Profile& p) { p.frames[0].lib = 7; }, "frame 0 refers to lib 7 of 1"},
      {"frame category", [](Profile& p) { p.frames[1].category = static_cast<Category>(kCategoryCount); },
       "frame 1 has the unknown category 5"},
      {"stack frame", [](Profile& p) { p.stacks[2].frame = 999; }, "stack 2 refers to frame 999 of 3"},
      {"stack prefix after it", [](Profile& p) { p.stacks[1].prefix = 2; },
       "stack 1 has prefix 2, which does not precede it"},
      {"stack its own prefix", [](Profile& p) { p.stacks[0].prefix = 0; },
       "stack 0 has prefix 0, which does not precede it"},
      {"sample stack", [](Profile& p) { p.threads[0].samples[2].stack = 3; },
       "sample 2 of thread 11 refers to stack 3 of 3"},
      {"sample kind",
       [](Profile& p) { p.threads[0].samples[1].kind = static_cast<SampleKind>(kSampleKindCount); },
       "sample 1 of thread 11 has the unknown kind 3"},
      {"call edge callee", [](Profile& p) { p.call_edges[0].callee_func = 5; },
       "call edge 0's callee refers to func 5 of 3"},
      {"call edge caller", [](Profile& p) { p.call_edges[1].caller_func = 3; },
       "call edge 1's caller refers to func 3 of 3"},
      {"call latency func", [](Profile& p) { p.call_latency[0].func = 3; },
       "call latency 0 refers to func 3 of 3"},
      {"MIP count func", [](Profile& p) { p.mip_counts[0].func = 8; }, "MIP count 0 refers to func 8 of 3"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Profile p = make_valid_profile();
    c.breaks(p);
    const auto violation = find_profile_violation(p);
    ASSERT_TRUE(violation.has_value());
    EXPECT_EQ(*violation, c.message);
    try {
      validate(p);
      ADD_FAILURE() << "validate() accepted a profile with a broken " << c.name;
    } catch (const InvalidProfileError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("invalid profile: ") + c.message);
    }
  }
}

// The first violation in table order is the one reported: funcs before frames before stacks.
TEST(ValidateProfile, TheFirstViolationIsReported) {
  Profile p = make_valid_profile();
  p.stacks[0].frame = 100;
  p.frames[0].func = 100;
  EXPECT_EQ(find_profile_violation(p), "frame 0 refers to func 100 of 3");
}

}  // namespace
}  // namespace hpd
