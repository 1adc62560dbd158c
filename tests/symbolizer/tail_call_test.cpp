// Tail-call edges (Stack::tail_call): tests/fixtures/tail_calls.c compiled -O2 -g by gcc 12 and
// clang 14, mapped at a fake address in a synthetic RawProfile whose stacks are the ones its calls
// make (the return addresses read from objdump's disassembly). main -> via_tail -(jmp)-> spin is
// marked on spin's frame; main -> direct -> spin, main -> via_tail (the jump not taken yet) and the
// tail call behind main's indirect call are not: nothing names what main called there. A Firefox file
// keeps the marks (HpdTailCall markers) and reads them back exactly.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "firefox_lint.h"
#include "hpd/export/firefox.h"
#include "hpd/export/firefox_reader.h"
#include "hpd/export/report_views.h"
#include "hpd/symbolizer/convert.h"
#include "test_util.h"

namespace hpd {
namespace {

constexpr uint64_t kLoadBase = 0x555500000000ull;
constexpr int32_t kPid = 4343;

struct Disassembly {
  std::map<std::string, uint64_t> start;  // function -> vaddr
  // "caller>callee" (or "caller>*" for an indirect call) -> the return address (vaddr)
  std::map<std::string, uint64_t> return_address;
};

Disassembly disassemble(const std::string& binary) {
  Disassembly d;
  std::istringstream in(test::run("objdump -d --no-show-raw-insn '" + binary + "'"));
  std::string line, function, pending;
  while (std::getline(in, line)) {
    const size_t open = line.find(" <");
    if (line.size() > 2 && line.compare(line.size() - 2, 2, ">:") == 0 && open != std::string::npos) {
      function = line.substr(open + 2, line.size() - open - 4);
      d.start[function] = std::stoull(line.substr(0, open), nullptr, 16);
      pending.clear();
      continue;
    }
    const size_t colon = line.find(':');
    if (line.empty() || line[0] != ' ' || colon == std::string::npos) continue;
    const uint64_t address = std::stoull(line.substr(0, colon), nullptr, 16);
    if (!pending.empty()) {
      d.return_address.emplace(pending, address);  // the first call of the kind only
      pending.clear();
    }
    if (line.find("\tcall ") == std::string::npos && line.find("\tcall\t") == std::string::npos) continue;
    const size_t lt = line.find('<', colon);
    if (line.find('*', colon) != std::string::npos) {
      pending = function + ">*";
    } else if (lt != std::string::npos) {
      pending = function + ">" + line.substr(lt + 1, line.find('>', lt) - lt - 1);
    }
  }
  return d;
}

class TailCallTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    binary_ = dir_.file("tail_calls");
    const std::string compiler = GetParam() == "gcc" ? HPD_GCC12 : HPD_CLANG14;
    test::run(compiler + " -O2 -g -fPIE -pie '" HPD_TAIL_CALLS_SOURCE "' -o '" + binary_ + "' 2>&1");
    ASSERT_TRUE(std::filesystem::exists(binary_)) << compiler;
    dis_ = disassemble(binary_);
    for (const char* f : {"main", "spin", "via_tail", "direct"}) ASSERT_TRUE(dis_.start.count(f)) << f;
    for (const char* c : {"main>via_tail", "main>direct", "main>*", "direct>spin"})
      ASSERT_TRUE(dis_.return_address.count(c)) << c << " not found in the disassembly";
    // The fixture tail-calls as the test assumes: via_tail has no call of spin, it jumps there.
    ASSERT_FALSE(dis_.return_address.count("via_tail>spin"));

    raw_.info.target = "tail_calls";
    raw_.info.call_graph = "cfi";
    const uint32_t module = raw_.intern_module(binary_, "");
    RawProcess& p = raw_.process(kPid);
    p.name = "tail_calls";
    p.end_ns = 1;
    for (const auto& s : test::load_segments(binary_)) {
      if (!s.exec) continue;
      p.mappings.push_back(RawMapping{kLoadBase + (s.vaddr & ~0xfffull),
                                      kLoadBase + ((s.vaddr + s.memsz + 0xfff) & ~0xfffull),
                                      s.offset & ~0xfffull, module, 0});
    }
    raw_.thread(kPid, kPid).name = "tail_calls";
    const uint64_t in_spin = at("spin") + 4;                       // interrupted inside spin
    add_stack({in_spin, ret("main>via_tail")});                    // 0: main -> via_tail -(jmp)-> spin
    add_stack({in_spin, ret("direct>spin"), ret("main>direct")});  // 1: ordinary calls
    add_stack({in_spin, ret("main>*")});                           // 2: indirect, then a tail call
    add_stack({at("via_tail"), ret("main>via_tail")});             // 3: via_tail itself
  }

  uint64_t at(const std::string& function) const { return kLoadBase + dis_.start.at(function); }
  uint64_t ret(const std::string& call) const { return kLoadBase + dis_.return_address.at(call); }
  void add_stack(std::vector<uint64_t> user_leaf_first) {
    RawSample s;
    s.time_ns = 10 + raw_.samples.size();
    s.pid = s.tid = kPid;
    s.stack = raw_.stacks.intern({}, user_leaf_first, UserLeaf::kInterrupted);
    s.cpu_delta_ns = 1000;
    raw_.samples.push_back(s);
  }

  // The outer frames of sample i's stack, root first, each "name" or "[tail call] name".
  static std::vector<std::string> edges(const Profile& p, size_t i) {
    std::vector<uint32_t> nodes;
    for (uint32_t n = p.threads.at(0).samples.at(i).stack; n != kNoIndex; n = p.stacks[n].prefix)
      nodes.push_back(n);
    std::vector<std::string> out;
    for (size_t k = nodes.size(); k-- > 0;) {
      const Stack& s = p.stacks[nodes[k]];
      if (p.frames[s.frame].inline_depth != 0) {
        EXPECT_FALSE(s.tail_call) << "an inlined frame is never entered by a call";
        continue;
      }
      out.push_back((s.tail_call ? "[tail call] " : "") + p.func_name(p.frames[s.frame].func));
    }
    return out;
  }

  static std::string firefox_json(const Profile& p) {
    std::ostringstream out;
    write_firefox_json(p, out);
    return out.str();
  }

  test::TempDir dir_;
  std::string binary_;
  Disassembly dis_;
  RawProfile raw_;
};

using Edges = std::vector<std::string>;

TEST_P(TailCallTest, TheEdgeACallSiteDoesNotExplainIsMarked) {
  Symbolizer symbolizer;
  ASSERT_TRUE(symbolizer.module_info(test::module_ref(binary_)).dwarf_index);
  const Profile p = symbolize_profile(raw_, symbolizer);
  EXPECT_EQ(edges(p, 0), (Edges{"main", "[tail call] spin"}));
  EXPECT_EQ(edges(p, 1), (Edges{"main", "direct", "spin"}));
  EXPECT_EQ(edges(p, 2), (Edges{"main", "spin"}));
  EXPECT_EQ(edges(p, 3), (Edges{"main", "via_tail"}));
}

TEST_P(TailCallTest, CallSitesNameTheirCalleesCode) {
  Symbolizer symbolizer;
  const ModuleRef ref = test::module_ref(binary_);
  const std::vector<test::Segment> segments = test::load_segments(binary_);
  std::vector<uint64_t> offsets;
  for (const char* c : {"main>via_tail", "main>direct", "main>*", "direct>spin"})
    offsets.push_back(test::file_offset_of(segments, dis_.return_address.at(c)) - 1);
  const auto code = symbolizer.call_site_callees(ref, offsets);
  ASSERT_EQ(code.size(), 4u);
  auto covers = [&](const std::vector<std::pair<uint64_t, uint64_t>>& ranges, const std::string& f) {
    for (const auto& [low, high] : ranges)
      if (dis_.start.at(f) >= low && dis_.start.at(f) < high) return true;
    return false;
  };
  EXPECT_TRUE(covers(code[0], "via_tail"));
  EXPECT_FALSE(covers(code[0], "spin"));
  EXPECT_TRUE(covers(code[1], "direct"));
  EXPECT_TRUE(code[2].empty()) << "an indirect call names no callee";
  EXPECT_TRUE(covers(code[3], "spin"));
}

// A frame-pointer walk loses the caller of a function that keeps no frame pointer, which looks like
// a tail call: such stacks are not judged.
TEST_P(TailCallTest, FramePointerStacksAreNotJudged) {
  raw_.info.call_graph = "fp";
  Symbolizer symbolizer;
  const Profile p = symbolize_profile(raw_, symbolizer);
  EXPECT_EQ(edges(p, 0), (Edges{"main", "spin"}));
  for (const Stack& s : p.stacks) EXPECT_FALSE(s.tail_call);
}

// The Firefox file keeps the marks without touching the call tree: one HpdTailCall marker for the
// one marked edge (main -> spin), listing exactly that stack, read back into the same Stack::tail_call
// flags, so that the callers tree of the file is the profile's, [tail call] marks included, while
// the ordinary main -> spin edge behind the indirect call (the same two functions) stays unmarked.
TEST_P(TailCallTest, TheFirefoxFileKeepsExactlyTheMarkedEdges) {
  Symbolizer symbolizer;
  const Profile p = symbolize_profile(raw_, symbolizer);
  const std::string text = firefox_json(p);
  const nlohmann::json file = nlohmann::json::parse(text);
  EXPECT_EQ(testing::lint_firefox_profile(file), std::vector<std::string>{});

  const auto& strings = file.at("shared").at("stringArray");
  const auto& markers = file.at("threads").at(0).at("markers");
  std::vector<nlohmann::json> tail_calls;
  for (size_t i = 0; i < markers.at("length").get<size_t>(); ++i) {
    const nlohmann::json& d = markers.at("data").at(i);
    if (!d.is_object() || d.value("type", "") != "HpdTailCall") continue;
    tail_calls.push_back(d);
    EXPECT_EQ(strings.at(markers.at("name").at(i).get<size_t>()), "main \xE2\x86\x92 spin (tail call)");
    EXPECT_EQ(markers.at("phase").at(i), 1) << "an interval over the thread's life";
  }
  ASSERT_EQ(tail_calls.size(), 1u) << markers.dump(1);
  const nlohmann::json& m = tail_calls[0];
  EXPECT_EQ(strings.at(m.at("caller").get<size_t>()), "main");
  EXPECT_EQ(strings.at(m.at("callee").get<size_t>()), "spin");
  // Sample 0 is the only one through the tail call, of 4 on-CPU samples.
  EXPECT_EQ(m.at("samples"), 1);
  EXPECT_DOUBLE_EQ(m.at("share").get<double>(), 0.25);
  // The stack of spin's outer frame in sample 0 (the stack table's rows are the profile's).
  uint32_t marked = p.threads[0].samples[0].stack;
  while (p.frames[p.stacks[marked].frame].inline_depth != 0 || !p.stacks[marked].tail_call)
    marked = p.stacks[marked].prefix;
  EXPECT_EQ(m.at("stacks"), std::to_string(marked));
  // No stack, frame or function is added for it: the call tree is the profile's.
  EXPECT_EQ(file.at("shared").at("stackTable").at("length"), p.stacks.size());
  EXPECT_EQ(file.at("shared").at("funcTable").at("length"), p.funcs.size());

  const Profile back = parse_firefox_json(text);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(edges(back, i), edges(p, i)) << "sample " << i;
  ASSERT_EQ(back.stacks.size(), p.stacks.size());
  for (size_t s = 0; s < p.stacks.size(); ++s)
    EXPECT_EQ(back.stacks[s].tail_call, p.stacks[s].tail_call) << s;
  for (const auto& [function, direction] :
       {std::pair{"spin", CallTreeDirection::kCallers}, std::pair{"main", CallTreeDirection::kCallees}}) {
    std::ostringstream before, after;
    print_call_tree_json(compute_call_tree(p, ReportOptions{}, function, direction), before);
    print_call_tree_json(compute_call_tree(back, ReportOptions{}, function, direction), after);
    EXPECT_EQ(after.str(), before.str());
    EXPECT_NE(before.str().find("\"tail_call\": true"), std::string::npos) << before.str();
  }
}

// A damaged marker is an error that says which marker and why, not a crash or a silent mark.
TEST_P(TailCallTest, ADamagedTailCallMarkerIsAClearError) {
  Symbolizer symbolizer;
  const Profile p = symbolize_profile(raw_, symbolizer);
  const std::string text = firefox_json(p);
  const nlohmann::json file = nlohmann::json::parse(text);
  size_t k = 0;
  const auto& data = file.at("threads").at(0).at("markers").at("data");
  while (k < data.size() && !(data[k].is_object() && data[k].value("type", "") == "HpdTailCall")) ++k;
  ASSERT_LT(k, data.size());
  // direct -> spin (sample 1's leaf stack) is an edge, but not from main.
  uint32_t direct_spin = p.threads[0].samples[1].stack;
  while (p.frames[p.stacks[direct_spin].frame].inline_depth != 0) direct_spin = p.stacks[direct_spin].prefix;
  for (const auto& [stacks, message] :
       {std::pair{std::string("999999"), std::string("malformed or out-of-range stack list")},
        std::pair{std::string("1,x"), std::string("malformed or out-of-range stack list")},
        std::pair{std::to_string(direct_spin), std::string("is no edge from main to spin")}}) {
    nlohmann::json damaged = file;
    damaged["threads"][0]["markers"]["data"][k]["stacks"] = stacks;
    try {
      parse_firefox_json(damaged.dump(), "damaged.json");
      ADD_FAILURE() << stacks << " was read";
    } catch (const ExportError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_NE(
          std::string(e.what()).find("damaged.json: threads[0].markers.data[" + std::to_string(k) + "]"),
          std::string::npos)
          << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Compilers, TailCallTest, ::testing::Values("gcc", "clang"));

// An inline function compiled into two units in two sizes: the linker keeps one copy and points the
// other unit's DWARF for its copy at address 0. A call site there names code that is not there, and
// the frame below, in the copy kept, must not pass for another function.
TEST(TailCallComdat, ADiscardedCopyOfTheCalleeTellsNothing) {
  test::TempDir dir;
  const std::string binary = dir.file("comdat");
  const std::string fixtures = HPD_SYMBOLIZER_FIXTURES;
  test::run(std::string(HPD_GXX12) + " -O2 -g -c '" + fixtures + "/comdat_a.cpp' -o '" + dir.file("a.o") +
            "'");
  test::run(std::string(HPD_GXX12) + " -O1 -fno-inline -g -c '" + fixtures + "/comdat_b.cpp' -o '" +
            dir.file("b.o") + "'");
  test::run(std::string(HPD_GXX12) + " '" + dir.file("a.o") + "' '" + dir.file("b.o") + "' -o '" + binary +
            "'");
  ASSERT_TRUE(std::filesystem::exists(binary));
  const Disassembly d = disassemble(binary);
  ASSERT_TRUE(d.return_address.count("_Z6from_bl>_Z11spin_sharedl")) << "from_b calls spin_shared";
  // The fixture is what the test assumes: comdat_b's copy of spin_shared is described at address 0.
  const std::string info = test::run("readelf --debug-dump=info '" + binary + "'");
  ASSERT_NE(info.find("DW_AT_low_pc      : 0\n"), std::string::npos) << "no discarded copy in the DWARF";

  const std::vector<test::Segment> segments = test::load_segments(binary);
  const uint64_t ret = d.return_address.at("_Z6from_bl>_Z11spin_sharedl");
  Symbolizer symbolizer;
  const std::vector<uint64_t> offsets{test::file_offset_of(segments, ret) - 1};
  EXPECT_TRUE(symbolizer.call_site_callees(test::module_ref(binary), offsets).at(0).empty());

  RawProfile raw;
  raw.info.call_graph = "cfi";
  const uint32_t module = raw.intern_module(binary, "");
  RawProcess& p = raw.process(kPid);
  p.end_ns = 1;
  for (const auto& s : segments) {
    if (s.exec)
      p.mappings.push_back(RawMapping{kLoadBase + (s.vaddr & ~0xfffull),
                                      kLoadBase + ((s.vaddr + s.memsz + 0xfff) & ~0xfffull),
                                      s.offset & ~0xfffull, module, 0});
  }
  RawSample sample;
  sample.time_ns = 10;
  sample.pid = sample.tid = kPid;
  sample.stack = raw.stacks.intern(
      {}, std::vector<uint64_t>{kLoadBase + d.start.at("_Z11spin_sharedl") + 4, kLoadBase + ret},
      UserLeaf::kInterrupted);
  raw.samples.push_back(sample);
  const Profile profile = symbolize_profile(raw, symbolizer);
  ASSERT_GE(profile.stacks.size(), 2u);
  for (const Stack& s : profile.stacks)
    EXPECT_FALSE(s.tail_call) << profile.func_name(profile.frames[s.frame].func);
}

}  // namespace
}  // namespace hpd
