// Unit tests for Profile interning: strings, funcs, frames and the stack prefix tree.
#include "hpd/model/profile.h"

#include <gtest/gtest.h>

namespace hpd {
namespace {

TEST(StringTable, InternsOnce) {
  StringTable t;
  EXPECT_EQ(t.intern("main"), 0u);
  EXPECT_EQ(t.intern("work"), 1u);
  EXPECT_EQ(t.intern("main"), 0u);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1], "work");
}

TEST(Profile, FuncsAreKeyedByNameFileAndLib) {
  Profile p;
  const uint32_t lib = p.intern_lib(Lib{"a.out", "/tmp/a.out", "a.out", "/tmp/a.out", "", "x86_64", false});
  const uint32_t f1 = p.intern_func("work", "/src/a.c", lib);
  const uint32_t f2 = p.intern_func("work", "/src/a.c", lib);
  const uint32_t f3 = p.intern_func("work", "", lib);
  const uint32_t f4 = p.intern_func("work", "/src/a.c", kNoIndex);
  EXPECT_EQ(f1, f2);
  EXPECT_NE(f1, f3);
  EXPECT_NE(f1, f4);
  EXPECT_EQ(p.funcs[f3].file, kNoIndex);
  EXPECT_EQ(p.func_name(f1), "work");
  Lib same;
  same.name = "a.out";
  same.path = "/tmp/a.out";
  EXPECT_EQ(p.intern_lib(same), lib);  // keyed by path and build id
}

TEST(Profile, FramesDifferByInlineDepthAndCategory) {
  Profile p;
  const uint32_t f = p.intern_func("g", "", kNoIndex);
  Frame a;
  a.func = f;
  a.address = 0x10;
  Frame b = a;
  b.inline_depth = 1;
  Frame c = a;
  c.category = Category::kIdle;
  EXPECT_EQ(p.intern_frame(a), p.intern_frame(a));
  EXPECT_NE(p.intern_frame(a), p.intern_frame(b));
  EXPECT_NE(p.intern_frame(a), p.intern_frame(c));
  EXPECT_EQ(p.frames.size(), 3u);
}

TEST(Profile, StacksFormAPrefixTreeInTopologicalOrder) {
  Profile p;
  const uint32_t s0 = p.intern_stack(kNoIndex, 7);
  const uint32_t s1 = p.intern_stack(s0, 8);
  const uint32_t s2 = p.intern_stack(s1, 9);
  const uint32_t s1b = p.intern_stack(s0, 8);
  EXPECT_EQ(s1, s1b);
  EXPECT_LT(s0, s1);
  EXPECT_LT(s1, s2);
  EXPECT_EQ(p.stack_frames_root_first(s2), (std::vector<uint32_t>{7, 8, 9}));
  EXPECT_EQ(p.intern_stack(kNoIndex, 8), 3u);  // same frame at the root is another node
}

}  // namespace
}  // namespace hpd
