// Tests of the report's section on Rust -Zannotate-moves (compiler_move / compiler_copy frames).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "hpd/export/report.h"

namespace hpd {
namespace {

using nlohmann::json;

// On-CPU samples, 1 ms CPU each unless said otherwise (root first; "dN" = inline depth N):
//   5 x main -> churn d0 -> ptr::write d1 -> compiler_move<app::Big, 128> d2     (in the move's code)
//   3 x main -> other d0 -> compiler_copy<app::Big, 128> d1 -> memmove (libc)   (2 ms each; in memmove)
//   2 x main -> churn d0 -> compiler_move<(u8, [u32; 4]), 4096> d1
//   4 x main -> churn d0                                                       (no move)
//   1 x main -> churn d0 -> compiler_move<app::Big, 128> d1 -> helper d0 -> compiler_copy<app::Small, 72> d1
//   1 x main -> legacy d0 -> core::profiling::compiler_move d1                  (legacy mangling)
//   1 x main -> churn d0 -> my::compiler_move_helper d1                         (not a marker)
// plus 1 off-CPU sample in a move, which the section must ignore.
Profile make_moves_profile() {
  Profile p;
  p.meta.recording.interval_ns = 1000000;
  Lib app;
  app.name = "app";
  const uint32_t l = p.intern_lib(app);
  Lib libc;
  libc.name = "libc.so.6";
  libc.path = "/usr/lib/libc.so.6";
  const uint32_t lc = p.intern_lib(libc);
  const auto frame = [&](const char* name, int64_t address, uint8_t depth, uint32_t lib) {
    Frame f;
    f.func = p.intern_func(name, "", lib);
    f.lib = lib;
    f.address = address;
    f.inline_depth = depth;
    return p.intern_frame(f);
  };
  const auto push = [&](uint32_t prefix, const char* name, int64_t address, uint8_t depth, uint32_t lib = 0) {
    return p.intern_stack(prefix, frame(name, address, depth, lib == 0 ? l : lib));
  };
  const char* kMoveBig = "core::profiling::compiler_move::<app::Big, 128>";
  const uint32_t main = push(kNoIndex, "main", 0x10, 0);
  const uint32_t a =
      push(push(push(main, "churn", 0x200, 0), "core::ptr::write::<app::Big>", 0x200, 1), kMoveBig, 0x200, 2);
  const uint32_t b = push(push(push(main, "other", 0x300, 0), "compiler_copy<app::Big, 128>", 0x300, 1),
                          "__memmove_avx_unaligned_erms", 0x50, 0, lc);
  const uint32_t c =
      push(push(main, "churn", 0x210, 0), "core::profiling::compiler_move::<(u8, [u32; 4]), 4096>", 0x210, 1);
  const uint32_t d = push(main, "churn", 0x220, 0);
  const uint32_t f = push(push(push(push(main, "churn", 0x240, 0), kMoveBig, 0x240, 1), "helper", 0x400, 0),
                          "core::profiling::compiler_copy::<app::Small, 72>", 0x400, 1);
  const uint32_t g = push(push(main, "legacy", 0x500, 0), "core::profiling::compiler_move", 0x500, 1);
  const uint32_t h = push(push(main, "churn", 0x250, 0), "my::compiler_move_helper", 0x250, 1);
  Thread t;
  t.pid = 7;
  t.tid = 7;
  uint64_t time = 0;
  const auto add = [&](uint32_t stack, int count, uint64_t cpu, SampleKind kind = SampleKind::kOnCpu) {
    for (int i = 0; i < count; ++i) {
      Sample s;
      s.time_ns = time += 1000000;
      s.stack = stack;
      s.kind = kind;
      if (kind == SampleKind::kOnCpu)
        s.cpu_delta_ns = cpu;
      else
        s.off_cpu_ns = 5000000;
      t.samples.push_back(s);
    }
  };
  add(a, 5, 1000000);
  add(b, 3, 2000000);
  add(c, 2, 1000000);
  add(d, 4, 1000000);
  add(f, 1, 1000000);
  add(g, 1, 1000000);
  add(h, 1, 1000000);
  add(a, 1, 0, SampleKind::kOffCpu);
  p.threads.push_back(t);
  return p;
}

const MoveRow* find_move(const Report& r, bool copy, const std::string& type, uint64_t size) {
  for (const MoveRow& m : r.moves) {
    if (m.move.copy == copy && m.move.type == type && m.move.size == size) return &m;
  }
  return nullptr;
}

TEST(ReportMoves, ParsesMarkerNamesInEverySpelling) {
  auto m = parse_compiler_move("core::profiling::compiler_move::<moves::Huge, 16384>");
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->copy);
  EXPECT_EQ(m->type, "moves::Huge");
  EXPECT_EQ(m->size, 16384u);
  m = parse_compiler_move("compiler_copy<moves::Huge, 16388>");  // DW_AT_name
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->copy);
  EXPECT_EQ(m->size, 16388u);
  m = parse_compiler_move(
      "core::profiling::compiler_copy::<std::collections::HashMap<u32, (u8, u16)>, 48usize>");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->type, "std::collections::HashMap<u32, (u8, u16)>");
  EXPECT_EQ(m->size, 48u);
  m = parse_compiler_move("core::profiling::compiler_move");  // legacy mangling: no generics
  ASSERT_TRUE(m);
  EXPECT_EQ(m->type, "?");
  EXPECT_EQ(m->size, 0u);
  EXPECT_FALSE(parse_compiler_move("my::compiler_move_helper"));
  EXPECT_FALSE(parse_compiler_move("mine::profiling::compiler_move::<T, 8>"));
  EXPECT_FALSE(parse_compiler_move("core::profiling::compiler_moves"));
  EXPECT_FALSE(parse_compiler_move("main"));
}

TEST(ReportMoves, SamplesGoToTheInnermostMoveAndItsRealFunction) {
  const Report r = compute_report(make_moves_profile(), ReportOptions{});
  EXPECT_EQ(r.totals.samples, 17u);
  EXPECT_EQ(r.move_samples, 12u);
  EXPECT_EQ(r.move_cpu_ns, 15000000u);
  ASSERT_EQ(r.moves.size(), 5u);

  const MoveRow* big = find_move(r, false, "app::Big", 128);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->samples, 5u);  // the nested sample counts for the inner copy, not here
  EXPECT_NEAR(big->percent, 100.0 * 5 / 17, 1e-9);
  ASSERT_EQ(big->callers.size(), 1u);
  EXPECT_EQ(big->callers[0].name, "churn");  // the real function, not ptr::write
  EXPECT_EQ(&r.moves[0], big) << "most samples first";

  const MoveRow* copy = find_move(r, true, "app::Big", 128);
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->samples, 3u);  // leaf in memmove, move frame one level up
  EXPECT_EQ(copy->cpu_ns, 6000000u);
  ASSERT_EQ(copy->callers.size(), 1u);
  EXPECT_EQ(copy->callers[0].name, "other");

  const MoveRow* tuple = find_move(r, false, "(u8, [u32; 4])", 4096);
  ASSERT_NE(tuple, nullptr);
  EXPECT_EQ(tuple->samples, 2u);

  const MoveRow* small = find_move(r, true, "app::Small", 72);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->samples, 1u);
  ASSERT_EQ(small->callers.size(), 1u);
  EXPECT_EQ(small->callers[0].name, "helper");

  const MoveRow* legacy = find_move(r, false, "?", 0);
  ASSERT_NE(legacy, nullptr);
  EXPECT_EQ(legacy->callers[0].name, "legacy");
}

TEST(ReportMoves, FiltersApplyToo) {
  ReportOptions other;
  other.pid = 8;
  const Report r = compute_report(make_moves_profile(), other);
  EXPECT_EQ(r.move_samples, 0u);
  EXPECT_TRUE(r.moves.empty());
}

TEST(ReportMoves, TextSectionFitsEightyColumnsAndOnlyAppearsWithMoves) {
  ReportOptions options;
  options.limit = 3;
  std::ostringstream out;
  print_report(compute_report(make_moves_profile(), options), out, options);
  const std::string text = out.str();
  EXPECT_NE(text.find("Compiler moves and copies (Rust -Zannotate-moves): 70.6% of samples, top 3 of 5"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(" 29.4%        5       5.0  move     128  app::Big\n"), std::string::npos) << text;
  EXPECT_NE(text.find(" 29.4%        5       5.0" + std::string(18, ' ') + "churn\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("copy     128  app::Big\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("app::Small"), std::string::npos) << "beyond the limit of 3";
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    size_t width = 0;
    for (char c : line) width += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    EXPECT_LE(width, 80u) << line;
  }

  // A profile without markers has no such section, in text or JSON.
  Profile plain;
  Lib lib;
  lib.name = "app";
  const uint32_t l = plain.intern_lib(lib);
  Frame f;
  f.func = plain.intern_func("main", "", l);
  f.lib = l;
  const uint32_t s = plain.intern_stack(kNoIndex, plain.intern_frame(f));
  Thread t;
  t.samples.push_back(Sample{1, s, 1000, 0, SampleKind::kOnCpu, StackEnd::kUnknown});
  plain.threads.push_back(t);
  std::ostringstream plain_text, plain_json;
  const Report pr = compute_report(plain, options);
  print_report(pr, plain_text, options);
  print_report_json(pr, plain_json, options);
  EXPECT_EQ(plain_text.str().find("Compiler moves"), std::string::npos);
  EXPECT_FALSE(json::parse(plain_json.str()).contains("compiler_moves"));
}

TEST(ReportMoves, JsonCarriesEveryCaller) {
  ReportOptions options;
  options.limit = 0;
  std::ostringstream out;
  const Report r = compute_report(make_moves_profile(), options);
  print_report_json(r, out, options);
  const json doc = json::parse(out.str());
  const json& moves = doc.at("compiler_moves");
  EXPECT_EQ(moves.at("samples").get<uint64_t>(), 12u);
  EXPECT_EQ(moves.at("cpu_ns").get<uint64_t>(), 15000000u);
  EXPECT_EQ(moves.at("types").get<size_t>(), 5u);
  ASSERT_EQ(moves.at("moves").size(), 5u);
  const json& first = moves.at("moves")[0];
  EXPECT_EQ(first.at("kind"), "move");
  EXPECT_EQ(first.at("type"), "app::Big");
  EXPECT_EQ(first.at("size").get<uint64_t>(), 128u);
  EXPECT_EQ(first.at("samples").get<uint64_t>(), 5u);
  EXPECT_EQ(first.at("callers")[0].at("name"), "churn");
  EXPECT_EQ(first.at("callers")[0].at("samples").get<uint64_t>(), 5u);
}

}  // namespace
}  // namespace hpd
