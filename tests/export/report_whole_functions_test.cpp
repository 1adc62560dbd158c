// The report keeps one row per function where the profile keeps a function as several funcs, one per
// source file its lines come from (glibc #includes vfprintf-process-arg.c into the body of
// __vfprintf_internal); two functions of one name in two files stay two rows. The call trees join
// the parts too, and annotate shows the lines of one file and says where the others went.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "hpd/export/report.h"
#include "hpd/export/report_views.h"

namespace hpd {
namespace {

// libc.so.6 with __vfprintf_internal in two parts (vfprintf-internal.c line 10, vfprintf-process-arg.c
// line 20, one native symbol) and two static functions `cmp` (a.c, b.c: two native symbols).
// Samples: 3 x main->vf(internal), 2 x main->vf(process-arg), 1 x main->cmp(a.c),
// 4 x main->cmp(b.c), 1 x main->vf(process-arg)->vf(internal)->cmp(a.c) (recursion through both parts),
// 1 x main->vf(process-arg)->cmp(a.c).
// So: __vfprintf_internal self 5, total 7 (the recursive sample once); cmp(a.c) self 3; cmp(b.c) 4.
struct Parts {
  Profile p;
  uint32_t vf_internal = 0, vf_arg = 0;
};

Parts make_parts_profile() {
  Parts parts;
  Profile& p = parts.p;
  p.meta.recording.interval_ns = 1000000;
  Lib lib;
  lib.name = "libc.so.6";
  lib.path = "/usr/lib/x86_64-linux-gnu/libc.so.6";
  const uint32_t l = p.intern_lib(lib);
  const uint32_t vf = p.intern_native_symbol(l, 0x1000, 0x800, "__vfprintf_internal");
  const uint32_t cmp_a = p.intern_native_symbol(l, 0x2000, 0x40, "cmp");
  const uint32_t cmp_b = p.intern_native_symbol(l, 0x3000, 0x40, "cmp");
  const uint32_t main_symbol = p.intern_native_symbol(l, 0x4000, 0x100, "main");
  const auto frame = [&](const char* name, const char* file, uint32_t symbol, int64_t address,
                         uint32_t line) {
    Frame f;
    f.func = p.intern_func(name, file, l);
    f.native_symbol = symbol;
    f.lib = l;
    f.address = address;
    f.line = line;
    return p.intern_frame(f);
  };
  const uint32_t main_frame = frame("main", "main.c", main_symbol, 0x4010, 5);
  const uint32_t vf_internal = frame("__vfprintf_internal", "vfprintf-internal.c", vf, 0x1010, 10);
  const uint32_t vf_arg = frame("__vfprintf_internal", "vfprintf-process-arg.c", vf, 0x1400, 20);
  const uint32_t cmp_in_a = frame("cmp", "a.c", cmp_a, 0x2010, 3);
  const uint32_t cmp_in_b = frame("cmp", "b.c", cmp_b, 0x3010, 4);
  parts.vf_internal = p.frames[vf_internal].func;
  parts.vf_arg = p.frames[vf_arg].func;
  const uint32_t m = p.intern_stack(kNoIndex, main_frame);
  const uint32_t m_vi = p.intern_stack(m, vf_internal);
  const uint32_t m_va = p.intern_stack(m, vf_arg);
  const uint32_t m_ca = p.intern_stack(m, cmp_in_a);
  const uint32_t m_cb = p.intern_stack(m, cmp_in_b);
  const uint32_t m_va_vi_ca = p.intern_stack(p.intern_stack(m_va, vf_internal), cmp_in_a);
  const uint32_t m_va_ca = p.intern_stack(m_va, cmp_in_a);
  Thread t;
  t.pid = t.tid = 7;
  t.name = "app";
  uint64_t time = 0;
  const auto add = [&](uint32_t stack, int count) {
    for (int i = 0; i < count; ++i) {
      Sample s;
      s.time_ns = time += 1000000;
      s.stack = stack;
      s.cpu_delta_ns = 1000000;
      t.samples.push_back(s);
    }
  };
  add(m_vi, 3);
  add(m_va, 2);
  add(m_ca, 1);
  add(m_cb, 4);
  add(m_va_vi_ca, 1);
  add(m_va_ca, 1);
  p.threads.push_back(t);
  return parts;
}

TEST(ReportWholeFunctions, TheFunctionsPartsAreOneRowAndSameNamedFunctionsOfTwoFilesStayTwo) {
  const Parts parts = make_parts_profile();
  ASSERT_NE(parts.vf_internal, parts.vf_arg);  // the profile keeps two funcs, as symbolization makes them
  const Report r = compute_report(parts.p, ReportOptions{});
  std::vector<const ReportRow*> vf, cmp;
  for (const ReportRow& row : r.rows) {
    if (row.name == "__vfprintf_internal") vf.push_back(&row);
    if (row.name == "cmp") cmp.push_back(&row);
  }
  ASSERT_EQ(vf.size(), 1u);
  EXPECT_EQ(vf[0]->self_samples, 5u);
  EXPECT_EQ(vf[0]->total_samples, 7u);  // the sample through both parts counted once
  EXPECT_EQ(vf[0]->self_cpu_ns, 5000000u);
  ASSERT_EQ(cmp.size(), 2u);
  EXPECT_EQ(cmp[0]->self_samples + cmp[1]->self_samples, 7u);
  EXPECT_EQ(std::max(cmp[0]->self_samples, cmp[1]->self_samples), 4u);
  std::ostringstream text;
  print_report(r, text, ReportOptions{});
  size_t shown = 0;
  for (size_t at = text.str().find("__vfprintf_internal"); at != std::string::npos;
       at = text.str().find("__vfprintf_internal", at + 1))
    ++shown;
  EXPECT_EQ(shown, 1u) << text.str();  // one row (no wall-clock table: no off-CPU samples)
}

TEST(ReportWholeFunctions, CallTreesHaveOneNodeForTheFunction) {
  const Parts parts = make_parts_profile();
  ReportOptions options;
  const CallTreeView callers = compute_call_tree(parts.p, options, "cmp", CallTreeDirection::kCallers);
  // cmp's callers: main (5 samples directly) and __vfprintf_internal (2: one sample called from each
  // part), one node for the function.
  std::vector<const CallTreeNode*> vf_nodes;
  for (const CallTreeNode& child : callers.root.children) {
    if (child.name == "__vfprintf_internal") vf_nodes.push_back(&child);
  }
  ASSERT_EQ(vf_nodes.size(), 1u);
  EXPECT_EQ(vf_nodes[0]->samples, 2u);
  const CallTreeView callees =
      compute_call_tree(parts.p, options, "__vfprintf_internal", CallTreeDirection::kCallees);
  EXPECT_EQ(callees.root.samples, 7u);
  EXPECT_EQ(callees.root.self_samples, 5u);
}

TEST(ReportWholeFunctions, AnnotateShowsTheLinesOfOneFileAndNamesTheOther) {
  const Parts parts = make_parts_profile();
  const Annotation a = annotate_function(parts.p, ReportOptions{}, "__vfprintf_internal");
  EXPECT_EQ(a.file, "vfprintf-internal.c");
  EXPECT_EQ(a.self_samples, 5u);
  uint64_t line_self = 0;
  for (const AnnotatedLine& line : a.lines) {
    EXPECT_EQ(line.line, 10u);  // line 20 is vfprintf-process-arg.c's, not this file's
    line_self += line.self_samples;
  }
  EXPECT_EQ(line_self, 3u);
  ASSERT_EQ(a.other_files.size(), 1u);
  EXPECT_EQ(a.other_files[0].file, "vfprintf-process-arg.c");
  EXPECT_EQ(a.other_files[0].self_samples, 2u);
  EXPECT_EQ(a.other_files[0].total_samples, 3u);
  std::ostringstream text;
  print_annotation(a, text);
  EXPECT_NE(text.str().find("2 self, 3 total samples on lines of vfprintf-process-arg.c"), std::string::npos)
      << text.str();
}

}  // namespace
}  // namespace hpd
