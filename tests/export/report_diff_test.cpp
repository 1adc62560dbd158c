// Unit tests of diff_profiles' matching on hand-built profiles: how modules are paired (file name,
// the program, the name without its .so version) and when it declines to guess, and how functions
// are matched (source path, then file name one to one) without merging two of one profile.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hpd/export/report_views.h"

namespace hpd {
namespace {

// A function of the profile under construction: its name, source file and module.
struct Fn {
  std::string name, file, lib;
};

// One process (`command`) whose modules are file names under `dir`; each function gets one sample
// of `cpu_ms` ms per entry of `fns`, on a stack main -> function.
Profile make_profile(const std::string& command, const std::string& dir, const std::vector<Fn>& fns,
                     uint64_t cpu_ms = 1) {
  Profile p;
  RecordingInfo& info = p.meta.recording;
  info.start_mono_ns = 1000000000ull;
  info.end_mono_ns = info.start_mono_ns + 1000000000ull;
  info.interval_ns = 1000000;
  Thread t;
  t.pid = t.tid = 10;
  t.name = t.process_name = command;
  t.is_main = true;
  const auto frame_of = [&](const Fn& fn) {
    Lib lib;
    lib.name = fn.lib;
    lib.path = dir + "/" + fn.lib;
    Frame f;
    f.lib = p.intern_lib(lib);
    f.func = p.intern_func(fn.name, fn.file, f.lib);
    f.address = 0x1000;
    return p.intern_frame(f);
  };
  const uint32_t root = p.intern_stack(kNoIndex, frame_of({"main", "/src/main.c", command}));
  uint64_t time = info.start_mono_ns;
  for (const Fn& fn : fns) {
    Sample s;
    s.time_ns = time += 1000000;
    s.stack = p.intern_stack(root, frame_of(fn));
    s.cpu_delta_ns = cpu_ms * 1000000;
    t.samples.push_back(s);
  }
  p.threads.push_back(t);
  return p;
}

const DiffRow* find_row(const Diff& diff, const std::string& name, const std::string& file) {
  const DiffRow* found = nullptr;
  for (const DiffRow& r : diff.rows) {
    if (r.name != name || r.file != file) continue;
    EXPECT_EQ(found, nullptr) << name << " in " << file << " is two rows";
    found = &r;
  }
  return found;
}

ReportOptions whole() {
  ReportOptions o;
  o.width = 0;
  return o;
}

TEST(ReportDiffTest, TheProgramIsPairedWhateverItsNameAndLibrariesWithoutTheirVersion) {
  const Profile a = make_profile(
      "app-v1", "/build1", {{"work", "/src/work.c", "app-v1"}, {"lib_fn", "/src/lib.c", "libfoo.so.1.2"}});
  const Profile b = make_profile("app-v2", "/opt/b",
                                 {{"work", "/src/work.c", "app-v2"},
                                  {"work", "/src/work.c", "app-v2"},
                                  {"lib_fn", "/src/lib.c", "libfoo.so.1.3"}});
  const Diff diff = diff_profiles(a, b, whole());
  const DiffRow* work = find_row(diff, "work", "/src/work.c");
  ASSERT_NE(work, nullptr);
  EXPECT_EQ(work->self_cpu_ns[0], 1000000u);
  EXPECT_EQ(work->self_cpu_ns[1], 2000000u);
  EXPECT_EQ(work->library, "app-v1");
  EXPECT_EQ(work->library_b, "app-v2");
  const DiffRow* lib = find_row(diff, "lib_fn", "/src/lib.c");
  ASSERT_NE(lib, nullptr);
  EXPECT_EQ(lib->self_cpu_ns[0], 1000000u);
  EXPECT_EQ(lib->self_cpu_ns[1], 1000000u);
  ASSERT_EQ(diff.modules.size(), 2u);
  EXPECT_EQ(diff.modules[0].by, "program");
  EXPECT_EQ(diff.modules[0].a_path, "/build1/app-v1");
  EXPECT_EQ(diff.modules[0].b_path, "/opt/b/app-v2");
  EXPECT_EQ(diff.modules[1].by, "unversioned_name");
}

TEST(ReportDiffTest, SameNamesAreListedOnlyWhenTheirPathsDiffer) {
  const Profile a = make_profile("app", "/same", {{"work", "/src/work.c", "app"}});
  const Profile b = make_profile("app", "/same", {{"work", "/src/work.c", "app"}});
  EXPECT_TRUE(diff_profiles(a, b, whole()).modules.empty());
  const Profile moved = make_profile("app", "/elsewhere", {{"work", "/src/work.c", "app"}});
  const Diff diff = diff_profiles(a, moved, whole());
  ASSERT_EQ(diff.modules.size(), 1u);
  EXPECT_EQ(diff.modules[0].by, "name");
  ASSERT_NE(find_row(diff, "work", "/src/work.c"), nullptr);
}

TEST(ReportDiffTest, TwoProgramsLeftInAProfileAreNotGuessedBetween) {
  // A ran two programs (the command's and a child's); B one, of another name: which of A's it is
  // cannot be told, so none is paired and their functions stay one side's.
  Profile a = make_profile("app-v1", "/a", {{"work", "/src/work.c", "app-v1"}});
  const Profile child = make_profile("tool", "/a", {{"work", "/src/work.c", "tool"}});
  Thread t = child.threads[0];
  t.pid = t.tid = 11;
  // The child's frames re-interned into A.
  for (Sample& s : t.samples) {
    std::vector<uint32_t> frames = child.stack_frames_root_first(s.stack);
    uint32_t stack = kNoIndex;
    for (uint32_t f : frames) {
      Frame frame = child.frames[f];
      frame.lib = a.intern_lib(child.libs[frame.lib]);
      frame.func = a.intern_func(child.func_name(child.frames[f].func),
                                 child.strings[child.funcs[child.frames[f].func].file], frame.lib);
      stack = a.intern_stack(stack, a.intern_frame(frame));
    }
    s.stack = stack;
  }
  a.threads.push_back(t);
  const Profile b = make_profile("app-v2", "/b", {{"work", "/src/work.c", "app-v2"}});
  const Diff diff = diff_profiles(a, b, whole());
  for (const DiffModulePair& m : diff.modules) EXPECT_NE(m.by, "program") << m.a << " = " << m.b;
  size_t work_rows = 0;
  for (const DiffRow& r : diff.rows) work_rows += r.name == "work" ? 1 : 0;
  EXPECT_EQ(work_rows, 3u);
}

TEST(ReportDiffTest, StaticFunctionsOfOneNameStayApartAndFollowTheirFiles) {
  // Two static helpers in A; B built from a moved source tree: matched by file name, one to one.
  const Profile a = make_profile(
      "app", "/a",
      {{"helper", "/src1/a.c", "app"}, {"helper", "/src1/b.c", "app"}, {"helper", "/src1/b.c", "app"}});
  const Profile b = make_profile(
      "app", "/a",
      {{"helper", "/src2/a.c", "app"}, {"helper", "/src2/a.c", "app"}, {"helper", "/src2/b.c", "app"}});
  const Diff diff = diff_profiles(a, b, whole());
  ASSERT_EQ(diff.rows.size(), 3u);  // main and the two helpers
  const DiffRow* in_a = find_row(diff, "helper", "/src1/a.c");
  const DiffRow* in_b = find_row(diff, "helper", "/src1/b.c");
  ASSERT_TRUE(in_a && in_b);
  EXPECT_EQ(in_a->self_cpu_ns[0], 1000000u);
  EXPECT_EQ(in_a->self_cpu_ns[1], 2000000u);
  EXPECT_EQ(in_b->self_cpu_ns[0], 2000000u);
  EXPECT_EQ(in_b->self_cpu_ns[1], 1000000u);
}

TEST(ReportDiffTest, AFileNameThatPairsNothingOneToOneMatchesNothing) {
  // Two util.c in A, one elsewhere in B: which one B's is cannot be told.
  const Profile a =
      make_profile("app", "/a", {{"helper", "/x/util.c", "app"}, {"helper", "/y/util.c", "app"}});
  const Profile b = make_profile("app", "/a", {{"helper", "/z/util.c", "app"}});
  const Diff diff = diff_profiles(a, b, whole());
  for (const char* file : {"/x/util.c", "/y/util.c"}) {
    const DiffRow* r = find_row(diff, "helper", file);
    ASSERT_NE(r, nullptr) << file;
    EXPECT_EQ(r->self_cpu_ns[1], 0u) << file;
  }
  const DiffRow* z = find_row(diff, "helper", "/z/util.c");
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->self_cpu_ns[0], 0u);
}

}  // namespace
}  // namespace hpd
