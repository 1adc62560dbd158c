// Unit tests of diff_profiles' matching on hand-built profiles: how modules are paired (file name,
// the program, the name without its .so version) and when it declines to guess, and how functions
// are matched (source path, then file name one to one) without merging two of one profile.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
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

// Sampled allocations added to a profile built by make_profile: `bytes` allocated by `fn` (called
// from main), `live` of them not freed. With a sampling mean of 1 byte and blocks of 1 MiB, every
// block weighs exactly its size, so the figures are exact.
void allocate(Profile& p, const Fn& fn, uint64_t blocks, uint64_t live_blocks) {
  p.meta.alloc.mean_bytes = 1;
  Lib lib;
  lib.name = fn.lib;
  lib.path = "/lib/" + fn.lib;
  Frame f;
  f.lib = p.intern_lib(lib);
  f.func = p.intern_func(fn.name, fn.file, f.lib);
  f.address = 0x2000;
  Frame m;
  m.lib = p.intern_lib(p.libs[p.frames[p.stacks[0].frame].lib]);
  m.func = p.frames[p.stacks[0].frame].func;
  m.address = 0x1000;
  const uint32_t stack = p.intern_stack(p.intern_stack(kNoIndex, p.intern_frame(m)), p.intern_frame(f));
  for (uint64_t i = 0; i < blocks; ++i) {
    Allocation a;
    a.pid = a.tid = 10;
    a.stack = stack;
    a.address = 0x10000000 + (p.allocations.size() << 20);
    a.size = uint64_t{1} << 20;
    a.freed = i >= live_blocks;
    p.allocations.push_back(a);
  }
}

const DiffAllocRow* find_alloc_row(const Diff& diff, const std::string& name) {
  for (const DiffAllocRow& r : diff.allocations)
    if (r.name == name) return &r;
  return nullptr;
}

// Both recorded with --alloc: per function the bytes allocated and live in A and B, paired as the
// CPU rows are (a function that only allocates, in a module with no CPU sample, too), first the
// largest change; in the text and the JSON.
TEST(ReportDiffTest, MemoryIsComparedPerFunctionWhenBothHaveAllocations) {
  Profile a = make_profile("app", "/a", {{"work", "/src/work.c", "app"}});
  Profile b = make_profile("app", "/a", {{"work", "/src/work.c", "app"}});
  allocate(a, {"work", "/src/work.c", "app"}, 4, 1);
  allocate(a, {"cache_fill", "/src/cache.c", "libcache.so"}, 2, 2);
  allocate(b, {"work", "/src/work.c", "app"}, 3, 3);
  allocate(b, {"cache_fill", "/src/cache.c", "libcache.so"}, 8, 2);
  const Diff diff = diff_profiles(a, b, whole());
  ASSERT_TRUE(diff.memory);
  const double mib = 1024.0 * 1024.0;
  EXPECT_EQ(diff.alloc_bytes[0], 6 * mib);
  EXPECT_EQ(diff.alloc_bytes[1], 11 * mib);
  EXPECT_EQ(diff.live_bytes[0], 3 * mib);
  EXPECT_EQ(diff.live_bytes[1], 5 * mib);
  const DiffAllocRow* work = find_alloc_row(diff, "work");
  const DiffAllocRow* cache = find_alloc_row(diff, "cache_fill");
  const DiffAllocRow* main_row = find_alloc_row(diff, "main");
  ASSERT_NE(work, nullptr);
  ASSERT_NE(cache, nullptr);
  ASSERT_NE(main_row, nullptr);
  EXPECT_EQ(work->total_bytes[0], 4 * mib);
  EXPECT_EQ(work->total_bytes[1], 3 * mib);
  EXPECT_EQ(work->self_bytes[1], 3 * mib);
  EXPECT_EQ(work->live_total_bytes[0], 1 * mib);
  EXPECT_EQ(work->live_total_bytes[1], 3 * mib);
  EXPECT_EQ(cache->total_bytes[0], 2 * mib);
  EXPECT_EQ(cache->total_bytes[1], 8 * mib);
  EXPECT_EQ(cache->live_total_bytes[0], 2 * mib);
  EXPECT_EQ(cache->live_total_bytes[1], 2 * mib);
  EXPECT_EQ(cache->library, "libcache.so");
  EXPECT_EQ(main_row->total_bytes[1], 11 * mib);  // callees included
  EXPECT_EQ(main_row->self_bytes[1], 0);
  // By the size of the change: cache_fill +6 MiB, main +5, work -1.
  ASSERT_EQ(diff.allocations.size(), 3u);
  EXPECT_EQ(diff.allocations[0].name, "cache_fill");
  EXPECT_EQ(diff.allocations[1].name, "main");
  EXPECT_EQ(diff.allocations[2].name, "work");

  std::ostringstream text;
  print_diff(diff, text, whole());
  EXPECT_NE(
      text.str().find("Memory (sampled allocations, estimates in MiB): A 6.00 allocated, 3.00 live at the "
                      "end;\n          B 11.00 allocated, 5.00 live at the end (+5.00 allocated, +2.00 "
                      "live)\n"),
      std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find(
                "     2.00      8.00     +6.00   +300%       2.00       2.00  cache_fill  [libcache.so]\n"),
            std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("     4.00      3.00     -1.00    -25%       1.00       3.00  work  [app]\n"),
            std::string::npos)
      << text.str();
  std::ostringstream json_text;
  print_diff_json(diff, json_text, whole());
  const nlohmann::json doc = nlohmann::json::parse(json_text.str());
  ASSERT_TRUE(doc.contains("allocations")) << json_text.str();
  EXPECT_EQ(doc["allocations"]["bytes"][1].get<double>(), 11 * mib);
  EXPECT_EQ(doc["allocations"]["live_bytes"][0].get<double>(), 3 * mib);
  EXPECT_EQ(doc["allocations"]["functions"], 3);
  const nlohmann::json& first = doc["allocations"]["rows"][0];
  EXPECT_EQ(first["name"], "cache_fill");
  EXPECT_EQ(first["total_bytes"][0].get<double>(), 2 * mib);
  EXPECT_EQ(first["total_bytes"][1].get<double>(), 8 * mib);
  EXPECT_EQ(first["live_total_bytes"][1].get<double>(), 2 * mib);
  EXPECT_EQ(first["total_bytes_change"].get<double>(), 6 * mib);
  EXPECT_EQ(first["live_total_bytes_change"].get<double>(), 0);
}

// Memory rows are paired as CPU rows are: a program rebuilt under another name and path from a moved
// source tree has its static functions of one name paired by their source file's name, one to one
// (before, each was two rows, A's and B's, every change the whole of each side).
TEST(ReportDiffTest, MemoryOfARebuiltProgramFromAMovedTreeFollowsTheFileNames) {
  Profile a = make_profile("app-v1", "/build1", {{"work", "/src1/work.c", "app-v1"}});
  Profile b = make_profile("app-v2", "/build2", {{"work", "/src2/work.c", "app-v2"}});
  allocate(a, {"helper", "/src1/a.c", "app-v1"}, 1, 1);
  allocate(a, {"helper", "/src1/b.c", "app-v1"}, 2, 0);
  allocate(b, {"helper", "/src2/a.c", "app-v2"}, 5, 2);
  allocate(b, {"helper", "/src2/b.c", "app-v2"}, 3, 3);
  const Diff diff = diff_profiles(a, b, whole());
  ASSERT_TRUE(diff.memory);
  const double mib = 1024.0 * 1024.0;
  std::map<std::string, const DiffAllocRow*> helpers;
  for (const DiffAllocRow& r : diff.allocations) {
    if (r.name != "helper") continue;
    EXPECT_EQ(helpers.count(r.file), 0u) << r.file << " is two rows";
    helpers[r.file] = &r;
  }
  ASSERT_EQ(helpers.size(), 2u);  // one row per file of A, B's figures in it
  const DiffAllocRow* in_a = helpers["/src1/a.c"];
  const DiffAllocRow* in_b = helpers["/src1/b.c"];
  ASSERT_TRUE(in_a && in_b);
  EXPECT_EQ(in_a->total_bytes[0], 1 * mib);
  EXPECT_EQ(in_a->total_bytes[1], 5 * mib);
  EXPECT_EQ(in_a->self_bytes[1], 5 * mib);
  EXPECT_EQ(in_a->live_total_bytes[0], 1 * mib);
  EXPECT_EQ(in_a->live_total_bytes[1], 2 * mib);
  EXPECT_EQ(in_a->library, "app-v1");
  EXPECT_EQ(in_a->library_b, "app-v2");
  EXPECT_EQ(in_b->total_bytes[0], 2 * mib);
  EXPECT_EQ(in_b->total_bytes[1], 3 * mib);
  EXPECT_EQ(in_b->live_total_bytes[0], 0);
  EXPECT_EQ(in_b->live_total_bytes[1], 3 * mib);
}

// Only one side recorded with --alloc: memory is not compared, and the text says so; the JSON has no
// allocations, as a diff of profiles without any.
TEST(ReportDiffTest, MemoryOfOneSideOnlyIsSaidNotCompared) {
  Profile a = make_profile("app", "/a", {{"work", "/src/work.c", "app"}});
  const Profile b = make_profile("app", "/a", {{"work", "/src/work.c", "app"}});
  allocate(a, {"work", "/src/work.c", "app"}, 1, 1);
  const Diff diff = diff_profiles(a, b, whole());
  EXPECT_FALSE(diff.memory);
  EXPECT_TRUE(diff.allocations.empty());
  std::ostringstream text, json_text;
  print_diff(diff, text, whole());
  EXPECT_NE(text.str().find("Memory not compared: only A was recorded with --alloc\n"), std::string::npos)
      << text.str();
  print_diff_json(diff, json_text, whole());
  EXPECT_FALSE(nlohmann::json::parse(json_text.str()).contains("allocations"));
}

}  // namespace
}  // namespace hpd
