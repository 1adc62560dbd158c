// The name `hpctl symbolize` gives the function of an address (issue 33): the DWARF name, as
// llvm-symbolizer gives it, whether the debug information is in the binary, in a separate file
// found by .gnu_debuglink, or in one found by build-id under a --debug-dir tree; an ELF symbol
// name only where no DWARF function covers the address.
//
// The fixtures are compiled here as users build them (-O2 -g, gcc 12 and clang 14): ELF aliases
// (strong and weak), static functions of one name in two units, gcc's .isra/.constprop/.part/.cold
// clones, inlined functions (names_a.c, names_b.c); constructors and destructors that gcc emits as
// aliases, templates, a lambda, an anonymous namespace (names.cpp).
//
// The reference is llvm-symbolizer 14 on the stripped binary with its separate debug file. It
// names the outermost function by the stripped binary's symbol table, .dynsym, where an exported
// function covers the address, else by DWARF (its DW_AT_linkage_name demangled, else its
// DW_AT_name); the fixtures here are executables that export no function, so every name is
// DWARF's. On a binary that keeps its .symtab, llvm-symbolizer 14 instead names the outermost
// function by .symtab (SymbolizableObjectFile::shouldOverrideWithSymbolTable, for
// --functions=linkage): a compiler clone (read_used.isra.0) or whichever alias it keeps. The test
// checks that this is the only way its answers on the full binary differ, and that hpd's answers
// do not differ from one layout to another.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dwarf_test_support.h"
#include "test_util.h"

namespace hpd {
namespace {

namespace fs = std::filesystem;

const std::string kHpctl = HPD_HPCTL;
const std::string kLlvmSymbolizer = HPD_LLVM_SYMBOLIZER;
const std::string kFixtures = HPD_NAMES_FIXTURE_DIR;

std::string quote(const std::string& s) {
  return "'" + s + "'";
}

std::string hex(uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

// Runs a shell command; its stdout, and its exit status in *status. stderr goes to `err_file`.
std::string sh(const std::string& command, int* status, const std::string& err_file = "/dev/null") {
  return dwarf_test::run_command(command + " 2> " + quote(err_file), status);
}

std::string sh_ok(const std::string& command) {
  int status = -1;
  std::string out = sh(command, &status);
  EXPECT_EQ(status, 0) << command;
  return out;
}

// One answer: the levels innermost first, as printed ("function", "file:line:column").
struct Level {
  std::string function;
  std::string where;
  bool operator==(const Level&) const = default;
};
using Answer = std::vector<Level>;

std::vector<Answer> parse_answers(const std::string& text) {
  std::vector<Answer> out(1);
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) {
      out.emplace_back();
      continue;
    }
    Level level;
    level.function = line;
    std::getline(in, level.where);
    out.back().push_back(level);
  }
  if (out.back().empty()) out.pop_back();
  return out;
}

std::string show(const Answer& a) {
  std::string s;
  for (const Level& l : a) s += "\n    " + l.function + " @ " + l.where;
  return s;
}

// The function symbols of a file with the addresses each covers ([address, address+size)).
struct Symbols {
  std::vector<test::NmSymbol> all;  // demangled
  // The names of the symbols covering `a` (aliases included).
  std::set<std::string> covering(uint64_t a) const {
    std::set<std::string> out;
    for (const auto& s : all) {
      if (a >= s.address && a < s.address + s.size) out.insert(s.name);
    }
    return out;
  }
};

// The addresses looked up: the first byte, a third, the middle and the last byte of every sized
// function symbol outside the PLT.
std::vector<uint64_t> addresses_of(const std::string& path) {
  std::vector<std::pair<uint64_t, uint64_t>> plt;
  for (const char* name : {".plt", ".plt.sec", ".plt.got"}) {
    if (auto r = test::section_range(path, name)) plt.push_back(*r);
  }
  std::set<uint64_t> out;
  for (const auto& s : test::nm_functions(path)) {
    if (s.size == 0) continue;
    bool in_plt = false;
    for (const auto& [lo, hi] : plt) in_plt = in_plt || (s.address >= lo && s.address < hi);
    if (in_plt) continue;
    for (uint64_t d : {uint64_t{0}, s.size / 3, s.size / 2, s.size - 1}) out.insert(s.address + d);
  }
  return {out.begin(), out.end()};
}

struct Layouts {
  std::string full;         // debug information in the binary
  std::string linked;       // stripped, its debug file beside it named by .gnu_debuglink
  std::string by_build_id;  // stripped, no debuglink; the debug file under debug_dir/.build-id/
  std::string debug_dir;
};

// Builds the three layouts of `full` (already compiled) under `dir`.
Layouts make_layouts(const std::string& full, const std::string& dir) {
  Layouts l;
  l.full = full;
  fs::create_directories(dir + "/linked");
  fs::create_directories(dir + "/by_build_id");
  l.linked = dir + "/linked/prog";
  sh_ok("objcopy --only-keep-debug " + quote(full) + " " + quote(l.linked + ".debug"));
  sh_ok("strip --strip-all -o " + quote(l.linked) + " " + quote(full));
  sh_ok("cd " + quote(dir + "/linked") + " && objcopy --add-gnu-debuglink=prog.debug prog");
  l.by_build_id = dir + "/by_build_id/prog";
  sh_ok("strip --strip-all -o " + quote(l.by_build_id) + " " + quote(full));
  std::string id = sh_ok("readelf -n " + quote(full) + " | sed -n 's/.*Build ID: *//p'");
  id.erase(id.find_last_not_of(" \n") + 1);
  EXPECT_GT(id.size(), 8u) << "no build-id in " << full;
  l.debug_dir = dir + "/debug";
  fs::create_directories(l.debug_dir + "/.build-id/" + id.substr(0, 2));
  fs::copy_file(l.linked + ".debug",
                l.debug_dir + "/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug");
  return l;
}

struct Runs {
  std::string llvm_text;
  std::vector<Answer> llvm, hpd;
};

Runs symbolize(const std::string& obj, const std::string& debug_dir, const std::string& list,
               const std::string& dir) {
  Runs r;
  int status = -1;
  const std::string llvm_dir = debug_dir.empty() ? "" : " --debug-file-directory=" + quote(debug_dir);
  r.llvm_text =
      sh(kLlvmSymbolizer + " --inlines --demangle --obj=" + quote(obj) + llvm_dir + " < " + list, &status);
  r.llvm = parse_answers(r.llvm_text);
  EXPECT_EQ(status, 0);
  const std::string hpd_dir = debug_dir.empty() ? "" : " --debug-dir " + quote(debug_dir);
  const std::string err = dir + "/hpctl.err";
  r.hpd = parse_answers(sh(kHpctl + " symbolize --exe " + quote(obj) + hpd_dir + " < " + list, &status, err));
  EXPECT_EQ(status, 0) << test::read_file(err);
  EXPECT_EQ(test::read_file(err).find("no debug information"), std::string::npos)
      << obj << ": hpctl found no debug file: " << test::read_file(err);
  return r;
}

// hpd's answers equal the expected ones level by level. Returns the number of answers compared.
size_t expect_answers(const std::vector<Answer>& want_all, const std::vector<Answer>& got_all,
                      const std::vector<uint64_t>& addresses, const std::string& layout) {
  SCOPED_TRACE(layout);
  EXPECT_EQ(want_all.size(), addresses.size());
  EXPECT_EQ(got_all.size(), addresses.size());
  const size_t n = std::min({want_all.size(), got_all.size(), addresses.size()});
  size_t failures = 0;
  for (size_t i = 0; i < n && failures < 15; ++i) {
    if (want_all[i] == got_all[i]) continue;
    ++failures;
    ADD_FAILURE() << layout << " " << hex(addresses[i]) << ": expected (llvm-symbolizer)" << show(want_all[i])
                  << "\n  hpctl" << show(got_all[i]);
  }
  return n;
}

struct FixtureBuild {
  const char* name;
  const char* compiler;
  const char* sources;  // under kFixtures
  bool gcc;
  bool cpp;
};

void PrintTo(const FixtureBuild& b, std::ostream* os) {
  *os << b.name;
}

class FunctionNamesTest : public ::testing::TestWithParam<FixtureBuild> {};

// The name hpd gives the answer at `a`, outermost level.
std::string outer_name(const std::vector<Answer>& answers, const std::vector<uint64_t>& addresses,
                       uint64_t a) {
  const auto it = std::find(addresses.begin(), addresses.end(), a);
  if (it == addresses.end() || static_cast<size_t>(it - addresses.begin()) >= answers.size()) return "<none>";
  const Answer& answer = answers[static_cast<size_t>(it - addresses.begin())];
  return answer.empty() ? "<empty>" : answer.back().function;
}

TEST_P(FunctionNamesTest, DwarfNamesWhereverTheDebugInformationIs) {
  const FixtureBuild& b = GetParam();
  dwarf_test::TempDir dir;
  const std::string full = dir.path() + "/prog";
  std::string sources;
  for (std::istringstream in(b.sources); in;) {
    std::string s;
    in >> s;
    if (!s.empty()) sources += " " + quote(kFixtures + "/" + s);
  }
  int status = -1;
  const std::string err = dir.path() + "/cc.err";
  sh(std::string(b.compiler) + " -O2 -g -Wl,--build-id -o " + quote(full) + sources, &status, err);
  ASSERT_EQ(status, 0) << test::read_file(err);

  // The fixture has the shapes it is meant to have (a compiler upgrade may lose some).
  const std::vector<test::NmSymbol> raw = test::nm_functions(full);
  const auto address_of = [&](const std::string& name) -> uint64_t {
    const auto s = test::nm_find(raw, name);
    return s ? s->address : 0;
  };
  const auto has_symbol_containing = [&](const std::string& part) {
    return std::any_of(raw.begin(), raw.end(),
                       [&](const auto& s) { return s.name.find(part) != std::string::npos; });
  };
  if (!b.cpp) {
    ASSERT_NE(address_of("names_target"), 0u);
    EXPECT_EQ(address_of("names_alias"), address_of("names_target"));
    EXPECT_EQ(address_of("names_weak"), address_of("names_target"));
    EXPECT_EQ(address_of("__names_internal"), address_of("names_target"));
    EXPECT_EQ(std::count_if(raw.begin(), raw.end(), [](const auto& s) { return s.name == "same_name"; }), 2);
    if (b.gcc) {
      for (const char* clone : {"read_used.isra.", "scaled.constprop.", "maybe_slow.part.", "with_cold.cold"})
        EXPECT_TRUE(has_symbol_containing(clone)) << "gcc made no " << clone;
    }
  } else if (b.gcc) {
    EXPECT_EQ(address_of("_ZN6shapes6SquareC1El"), address_of("_ZN6shapes6SquareC2El"));
    EXPECT_EQ(address_of("_ZN6shapes6SquareD1Ev"), address_of("_ZN6shapes6SquareD2Ev"));
    EXPECT_NE(address_of("_ZN6shapes6SquareD0Ev"), 0u);
    EXPECT_TRUE(has_symbol_containing("_GLOBAL__N_"));
    EXPECT_TRUE(has_symbol_containing("_clEl"));  // the lambda's operator()
    EXPECT_TRUE(has_symbol_containing(".cold"));
  }

  const Layouts layouts = make_layouts(full, dir.path());
  const std::vector<uint64_t> addresses = addresses_of(full);
  ASSERT_GT(addresses.size(), 40u);
  const std::string list = dir.path() + "/addresses";
  {
    std::string text;
    for (uint64_t a : addresses) text += hex(a) + "\n";
    test::write_file(list, text);
  }
  // The symbols demangled by LLVM's demangler, as llvm-symbolizer prints them.
  Symbols symbols;
  symbols.all = test::nm_functions(full);
  {
    std::string mangled;
    for (const auto& s : symbols.all) mangled += s.name + "\n";
    test::write_file(dir.path() + "/mangled", mangled);
    std::istringstream demangled(sh_ok("llvm-cxxfilt-14 < " + quote(dir.path() + "/mangled")));
    for (auto& s : symbols.all) ASSERT_TRUE(std::getline(demangled, s.name));
  }

  const Runs full_run = symbolize(layouts.full, "", list, dir.path());
  const Runs linked = symbolize(layouts.linked, "", list, dir.path());
  const Runs by_id = symbolize(layouts.by_build_id, layouts.debug_dir, list, dir.path());

  // llvm-symbolizer's reference is the same in both separate-file layouts: its DWARF names (the
  // fixtures export no function). Where no DWARF function covers an address (crt code such as
  // _start) it has no name there ("??"), and hpd, which also reads the debug file's .symtab, names
  // it as llvm-symbolizer does given the full binary.
  EXPECT_EQ(linked.llvm, by_id.llvm);
  const std::string expected_text = dwarf_test::merge_llvm_names(linked.llvm_text, full_run.llvm_text);
  ASSERT_FALSE(expected_text.empty());
  std::vector<Answer> expected = parse_answers(expected_text);
  // One exception to DWARF's names: a function whose DWARF name is only an unqualified DW_AT_name
  // (gcc: a lambda's operator(), a function of an anonymous namespace) is named as llvm-symbolizer
  // names it from the full binary, by the symbol that qualifies it, without the clone suffix.
  size_t qualified = 0;
  for (size_t i = 0; i < std::min(expected.size(), full_run.llvm.size()); ++i) {
    if (expected[i].empty() || full_run.llvm[i].empty()) continue;
    std::string& name = expected[i].back().function;
    const std::string& symbol = full_run.llvm[i].back().function;
    if (name.find("::") != std::string::npos || symbol.find("::" + name + "(") == std::string::npos) continue;
    name = std::regex_replace(symbol, std::regex("( \\[clone \\.[^\\]]*\\]| \\(\\.[^)]*\\))+$"), "");
    ++qualified;
  }
  if (b.gcc && b.cpp) {
    EXPECT_GT(qualified, 0u) << "no lambda or anonymous-namespace function met";
  }
  EXPECT_EQ(expect_answers(expected, linked.hpd, addresses, "stripped + .gnu_debuglink"), addresses.size());
  EXPECT_EQ(expect_answers(expected, by_id.hpd, addresses, "stripped + build-id under --debug-dir"),
            addresses.size());
  EXPECT_EQ(expect_answers(expected, full_run.hpd, addresses, "debug information in the binary"),
            addresses.size());

  // On the full binary llvm-symbolizer differs from its own DWARF names only where it took the
  // outermost name from the symbol table: a symbol that covers the address.
  size_t overridden = 0;
  for (size_t i = 0; i < std::min(full_run.llvm.size(), linked.llvm.size()); ++i) {
    const Answer& from_symtab = full_run.llvm[i];
    const Answer& from_dwarf = linked.llvm[i];
    if (from_symtab == from_dwarf) continue;
    ++overridden;
    ASSERT_EQ(from_symtab.size(), from_dwarf.size()) << hex(addresses[i]);
    EXPECT_TRUE(std::equal(from_symtab.begin(), from_symtab.end() - 1, from_dwarf.begin()))
        << hex(addresses[i]);
    EXPECT_EQ(from_symtab.back().where, from_dwarf.back().where) << hex(addresses[i]);
    EXPECT_EQ(symbols.covering(addresses[i]).count(from_symtab.back().function), 1u)
        << hex(addresses[i]) << ": llvm-symbolizer's '" << from_symtab.back().function
        << "' is no symbol there";
  }
  if (b.gcc) {
    EXPECT_GT(overridden, 0u) << "no clone or alias where the symbol table and DWARF disagree";
  }

  // What the names must be, by the fixture's own source.
  const std::vector<Answer>& hpd = full_run.hpd;
  if (!b.cpp) {
    EXPECT_EQ(outer_name(hpd, addresses, address_of("names_alias")), "names_target");
    if (b.gcc) {
      for (const auto& [clone, name] :
           std::vector<std::pair<std::string, std::string>>{{"read_used.isra.0", "read_used"},
                                                            {"scaled.constprop.0", "scaled"},
                                                            {"maybe_slow.part.0", "maybe_slow"},
                                                            {"with_cold.cold", "with_cold"}}) {
        EXPECT_EQ(outer_name(hpd, addresses, address_of(clone)), name) << clone;
      }
    }
    // An inline chain three levels deep: mix in mix_twice in inline_outer.
    bool chain = false;
    for (const Answer& a : hpd) {
      chain = chain || (a.size() >= 3 && a[0].function == "mix" && a[1].function == "mix_twice" &&
                        a[2].function == "inline_outer");
    }
    EXPECT_TRUE(chain) << "no answer with the inline chain mix < mix_twice < inline_outer";
  } else {
    if (b.gcc) {
      EXPECT_EQ(outer_name(hpd, addresses, address_of("_ZN6shapes6SquareC1El")),
                "shapes::Square::Square(long)");
      EXPECT_EQ(outer_name(hpd, addresses, address_of("_ZN6shapes6SquareD1Ev")), "shapes::Square::~Square()");
      EXPECT_EQ(outer_name(hpd, addresses, address_of("_ZN6shapes6SquareD0Ev")), "shapes::Square::~Square()");
      // Qualified, not DWARF's bare "helper" and "operator()": lambdas stay apart.
      for (const auto& sym : raw) {
        const std::string shown = outer_name(hpd, addresses, sym.address);
        if (sym.name.find("_GLOBAL__N_") != std::string::npos) {
          EXPECT_NE(shown.find("(anonymous namespace)::"), std::string::npos) << sym.name << ": " << shown;
        }
        if (sym.name.find("_clEl") != std::string::npos) {
          EXPECT_TRUE(shown.find("apply_lambda(long)::") == 0 &&
                      shown.find("lambda'(long)::operator()(") != std::string::npos)
              << sym.name << ": " << shown;
        }
      }
    }
    // "> >" as libstdc++'s demangler writes it, ">>" as LLVM's (which refuses some names) does.
    const std::string name =
        outer_name(hpd, addresses, address_of("_Z18accumulate_squaresIdET_RKSt6vectorIS0_SaIS0_EE"));
    EXPECT_EQ(std::regex_replace(name, std::regex("> >"), ">>"),
              "double accumulate_squares<double>(std::vector<double, std::allocator<double>> const&)");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Builds, FunctionNamesTest,
    ::testing::Values(FixtureBuild{"c_gcc12", "gcc-12", "names_a.c names_b.c", true, false},
                      FixtureBuild{"c_clang14", "clang-14", "names_a.c names_b.c", false, false},
                      FixtureBuild{"cpp_gcc12", "g++-12", "names.cpp", true, true},
                      FixtureBuild{"cpp_clang14", "clang++-14", "names.cpp", false, true}),
    [](const ::testing::TestParamInfo<FixtureBuild>& info) { return std::string(info.param.name); });

// The name DWARF gives the function (DW_TAG_subprogram) containing `address` of `debug`: its
// linkage name, else its abstract origin's name, else its DW_AT_name; as llvm-dwarfdump prints it.
std::string dwarf_function_name(const std::string& debug, uint64_t address) {
  std::istringstream dump(
      sh_ok("llvm-dwarfdump-14 --show-parents --lookup=" + hex(address) + " " + quote(debug)));
  bool in_subprogram = false;
  std::string linkage, origin, name;
  const auto quoted = [](const std::string& line) {
    const size_t a = line.find('"');
    const size_t b = line.rfind('"');
    return a != std::string::npos && b > a ? line.substr(a + 1, b - a - 1) : std::string();
  };
  for (std::string line; std::getline(dump, line);) {
    if (line.find("DW_TAG_") != std::string::npos) {
      if (in_subprogram) break;
      in_subprogram = line.find("DW_TAG_subprogram") != std::string::npos;
    } else if (in_subprogram && line.find("DW_AT_linkage_name") != std::string::npos) {
      linkage = quoted(line);
    } else if (in_subprogram && line.find("DW_AT_abstract_origin") != std::string::npos) {
      origin = quoted(line);
    } else if (in_subprogram && line.find("DW_AT_name") != std::string::npos) {
      name = quoted(line);
    }
  }
  return !linkage.empty() ? linkage : !origin.empty() ? origin : name;
}

// The libc.so.6 of this process (stripped, as Debian ships it) and its debug file (libc6-dbg),
// found by build-id under /usr/lib/debug; empty strings where either is missing.
struct DebianLibc {
  std::string path;   // the libc.so.6 this test runs on
  std::string debug;  // its debug file, by build-id under /usr/lib/debug
};

DebianLibc debian_libc() {
  DebianLibc out;
  std::string& libc = out.path;
  {
    std::istringstream maps(test::read_file("/proc/self/maps"));
    for (std::string line; std::getline(maps, line);) {
      const size_t slash = line.find('/');
      if (slash != std::string::npos && line.find("/libc.so") != std::string::npos) libc = line.substr(slash);
    }
  }
  if (libc.empty()) return out;
  std::string id = sh_ok("readelf -n " + quote(libc) + " | sed -n 's/.*Build ID: *//p'");
  id.erase(id.find_last_not_of(" \n") + 1);
  if (id.size() > 8)
    out.debug = "/usr/lib/debug/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug";
  return out;
}

// libc as Debian ships it: stripped, its debug file (libc6-dbg) found by build-id under
// /usr/lib/debug. 300 addresses inside its functions, spread at random. Its exported functions
// are named as it exports them (ftello, where DWARF says __GI___ftello), the others by DWARF
// (no .isra clone, no local alias of the debug file's .symtab).
TEST(FunctionNamesLibc, DwarfNamesFromTheBuildIdDebugFile) {
  const auto [libc, debug] = debian_libc();
  ASSERT_FALSE(libc.empty());
  ASSERT_FALSE(debug.empty()) << libc << " has no build-id";
  ASSERT_TRUE(fs::exists(debug)) << debug << ": install libc6-dbg (packaging/install-deps.sh)";

  std::vector<test::NmSymbol> functions;
  for (const auto& s : test::nm_functions(debug)) {
    if (s.size != 0) functions.push_back(s);
  }
  ASSERT_GT(functions.size(), 1000u);
  std::mt19937_64 rng(33);
  std::set<uint64_t> picked;
  while (picked.size() < 300) {
    const auto& s = functions[rng() % functions.size()];
    picked.insert(s.address + rng() % s.size);
  }
  const std::vector<uint64_t> addresses(picked.begin(), picked.end());
  dwarf_test::TempDir dir;
  const std::string list = dir.path() + "/addresses";
  {
    std::string text;
    for (uint64_t a : addresses) text += hex(a) + "\n";
    test::write_file(list, text);
  }
  const Runs r = symbolize(libc, "", list, dir.path());
  // Where neither an exported symbol nor a DWARF function covers an address, llvm-symbolizer on
  // the stripped libc has no name ("??"); hpd names it by the debug file's .symtab, as
  // llvm-symbolizer does given that file.
  int status = -1;
  const std::string symtab_text =
      sh(kLlvmSymbolizer + " --inlines --demangle --obj=" + quote(debug) + " < " + list, &status);
  ASSERT_EQ(status, 0);
  const std::string expected_text = dwarf_test::merge_llvm_names(r.llvm_text, symtab_text);
  ASSERT_FALSE(expected_text.empty());
  std::vector<Answer> expected = parse_answers(expected_text);
  // One difference, by design: an inline level of the outer function itself (glibc has many: a
  // call of __GI___mmap64 inlined into mmap's own code) is named as the outer frame is (by the
  // exported symbol), where llvm-symbolizer names it by DWARF. Where the answers differ, such
  // levels of llvm's answer take its outer name, the function's DWARF name read with llvm-dwarfdump.
  size_t self_inlined = 0;
  for (size_t i = 0; i < std::min(expected.size(), r.hpd.size()); ++i) {
    Answer& want = expected[i];
    if (want == r.hpd[i] || want.size() < 2) continue;
    const std::string dwarf_name = dwarf_function_name(debug, addresses[i]);
    for (size_t level = 0; level + 1 < want.size(); ++level) {
      if (!dwarf_name.empty() && want[level].function == dwarf_name && dwarf_name != want.back().function) {
        want[level].function = want.back().function;
        ++self_inlined;
      }
    }
  }
  EXPECT_EQ(expect_answers(expected, r.hpd, addresses, "libc"), addresses.size());
  std::cout << "libc: " << self_inlined
            << " inline levels of their own function named as their outer frame\n";
  size_t inline_chains = 0;
  for (const Answer& a : r.hpd) inline_chains += a.size() > 1 ? 1 : 0;
  EXPECT_GT(inline_chains, 10u) << "hpctl read no inline chains: was the debug file used?";
}

// One function, one name, at every inline level: glibc's _IO_default_xsputn has a recursive call
// to itself inlined, which DWARF names __GI__IO_default_xsputn (its linkage name) at both levels;
// the outer level is named by the exported symbol, so the inlined level must be too, else a
// profile shows the function as two rows (llvm-symbolizer 14 gives the two names).
TEST(FunctionNamesLibc, AFunctionInlinedIntoItselfHasOneName) {
  const auto [libc, debug] = debian_libc();
  ASSERT_FALSE(libc.empty());
  ASSERT_FALSE(debug.empty()) << libc << " has no build-id";
  ASSERT_TRUE(fs::exists(debug)) << debug << ": install libc6-dbg (packaging/install-deps.sh)";
  const auto xsputn = test::nm_find(test::nm_functions(debug), "_IO_default_xsputn");
  ASSERT_TRUE(xsputn.has_value());
  ASSERT_GT(xsputn->size, 0u);
  dwarf_test::TempDir dir;
  const std::string list = dir.path() + "/addresses";
  std::vector<uint64_t> addresses;
  {
    std::string text;
    for (uint64_t a = xsputn->address; a < xsputn->address + xsputn->size; ++a) {
      addresses.push_back(a);
      text += hex(a) + "\n";
    }
    test::write_file(list, text);
  }
  const Runs r = symbolize(libc, "", list, dir.path());
  ASSERT_EQ(r.hpd.size(), addresses.size());
  size_t self_inlined = 0, llvm_two_names = 0;
  for (size_t i = 0; i < addresses.size(); ++i) {
    const Answer& a = r.hpd[i];
    ASSERT_FALSE(a.empty()) << hex(addresses[i]);
    EXPECT_EQ(a.back().function, "_IO_default_xsputn") << hex(addresses[i]);
    for (const Level& level : a) EXPECT_NE(level.function, "__GI__IO_default_xsputn") << hex(addresses[i]);
    if (a.size() > 1 && a[a.size() - 2].function == "_IO_default_xsputn") ++self_inlined;
    if (i < r.llvm.size()) {
      for (const Level& level : r.llvm[i])
        llvm_two_names += level.function == "__GI__IO_default_xsputn" ? 1 : 0;
    }
  }
  // The case exists in this libc (else the test checks nothing): llvm-symbolizer names the inlined
  // level by DWARF, and hpd has the inline level under the same name as its outer frame.
  EXPECT_GT(llvm_two_names, 0u);
  EXPECT_GT(self_inlined, 0u);
}

}  // namespace
}  // namespace hpd
