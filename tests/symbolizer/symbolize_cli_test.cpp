// `hpctl symbolize` end to end: the real hpctl against fixtures, compared line by line with
// llvm-symbolizer; stdin and argument modes, bad input, --pid on live processes, debuginfod.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "debuginfod_server.h"
#include "dwarf_test_support.h"
#include "hpd/symbolizer/address_query.h"
#include "subprocess.h"
#include "test_util.h"

namespace hpd {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kHpctl = HPD_HPCTL;
const std::string kLlvmSymbolizer = HPD_LLVM_SYMBOLIZER;

std::string dwarf_fixture(const std::string& name) {
  return std::string(HPD_DWARF_FIXTURE_DIR) + "/" + name;
}

std::string quote(const std::string& s) {
  return "'" + s + "'";
}

struct Output {
  int status = -1;
  std::string out;
  std::string err;
};

// Runs a shell command line with stdout and stderr captured; killed after 120 s.
Output shell(const std::string& command) {
  dwarf_test::TempDir dir;
  const std::string out = dir.path() + "/out", err = dir.path() + "/err";
  const int rc = std::system(("timeout 120 sh -c " + quote(command) + " > " + out + " 2> " + err).c_str());
  Output o;
  o.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  o.out = test::read_file(out);
  o.err = test::read_file(err);
  return o;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string hex(uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

// Addresses inside the sized function symbols, minus the PLT (where llvm-symbolizer names the
// nearest preceding symbol, usually _init, and hpd synthesizes "func@plt" on purpose).
std::vector<uint64_t> code_addresses(const std::string& path, uint64_t stride) {
  std::vector<uint64_t> all = dwarf_test::function_addresses(path, stride);
  std::vector<std::pair<uint64_t, uint64_t>> plt;
  for (const char* name : {".plt", ".plt.sec", ".plt.got"}) {
    if (auto r = test::section_range(path, name)) plt.push_back(*r);
  }
  std::vector<uint64_t> out;
  for (uint64_t a : all) {
    bool in_plt = false;
    for (const auto& [lo, hi] : plt) in_plt = in_plt || (a >= lo && a < hi);
    if (!in_plt) out.push_back(a);
  }
  return out;
}

std::string write_addresses(const dwarf_test::TempDir& dir, const std::vector<uint64_t>& addresses) {
  const std::string list = dir.path() + "/addresses";
  std::ofstream f(list);
  for (uint64_t a : addresses) f << hex(a) << '\n';
  return list;
}

// Legacy Rust names keep their hash in llvm-symbolizer and lose it in hpd (the fixtures use v0
// mangling, which has none); nothing else may differ.
std::string normalize_llvm_line(const std::string& line) {
  static const std::regex kLegacyHash("::h[0-9a-f]{16}$");
  return std::regex_replace(line, kLegacyHash, "");
}

// c++filt's reading of each mangled name among `lines` (those LLVM's demangler refused, which hpd
// shows demangled by libstdc++'s demangler, as c++filt does).
std::map<std::string, std::string> cxxfilt_names(const std::vector<std::string>& lines) {
  std::set<std::string> mangled;
  for (const std::string& line : lines) {
    if (line.rfind("_Z", 0) == 0) mangled.insert(line);
  }
  std::map<std::string, std::string> out;
  if (mangled.empty()) return out;
  dwarf_test::TempDir dir;
  std::string text;
  for (const std::string& name : mangled) text += name + "\n";
  test::write_file(dir.path() + "/names", text);
  std::istringstream demangled(shell("c++filt < " + dir.path() + "/names").out);
  for (const std::string& name : mangled) {
    std::string line;
    if (!std::getline(demangled, line)) break;
    out.emplace(name, line);
  }
  return out;
}

// Both runs succeeded and printed the same lines (up to llvm's legacy Rust hashes, and names llvm
// leaves mangled that hpd demangles as c++filt does); the first ten differences are reported.
void expect_same_lines(const Output& llvm, const Output& hpd) {
  ASSERT_EQ(llvm.status, 0) << llvm.err;
  ASSERT_EQ(hpd.status, 0) << hpd.err;
  auto expected = lines_of(llvm.out);
  const auto actual = lines_of(hpd.out);
  ASSERT_EQ(actual.size(), expected.size());
  const std::map<std::string, std::string> cxxfilt = cxxfilt_names(expected);
  for (std::string& line : expected) {
    if (auto it = cxxfilt.find(line); it != cxxfilt.end()) line = it->second;
  }
  size_t mismatches = 0;
  for (size_t i = 0; i < expected.size() && mismatches < 10; ++i) {
    if (normalize_llvm_line(expected[i]) != actual[i]) {
      ++mismatches;
      ADD_FAILURE() << "line " << i + 1 << ": llvm-symbolizer '" << expected[i] << "', hpctl '" << actual[i]
                    << "'";
    }
  }
}

// What hpctl symbolize must answer (function_names_test.cpp): llvm-symbolizer --inlining on a copy
// of `path` without its .symtab, where it names the outer function by an exported symbol or by
// DWARF, completed by its answers on `path` where neither covers an address.
Output llvm_names(const dwarf_test::TempDir& dir, const std::string& path, const std::string& list) {
  const std::string no_symtab = dir.path() + "/no_symtab";
  Output o;
  if (!dwarf_test::copy_without_symbol_table(path, no_symtab)) return o;
  const Output with_symtab = shell(kLlvmSymbolizer + " --inlining --obj=" + quote(path) + " < " + list);
  o = shell(kLlvmSymbolizer + " --inlining --obj=" + quote(no_symtab) + " < " + list);
  if (with_symtab.status != 0) o.status = with_symtab.status;
  o.out = dwarf_test::merge_llvm_names(o.out, with_symtab.out);
  return o;
}

struct GoldenCase {
  const char* fixture;
  uint64_t stride;
  const char* must_contain;  // a line that the output must hold somewhere (an inline level)
};

class SymbolizeGoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(SymbolizeGoldenTest, MatchesLlvmSymbolizerLineByLine) {
  const GoldenCase& c = GetParam();
  const std::string path = dwarf_fixture(c.fixture);
  const std::vector<uint64_t> addresses = code_addresses(path, c.stride);
  ASSERT_GT(addresses.size(), 100u);
  dwarf_test::TempDir dir;
  const std::string list = write_addresses(dir, addresses);
  const Output inlining = llvm_names(dir, path, list);

  for (const bool inlines : {true, false}) {
    SCOPED_TRACE(inlines ? "--inlining" : "--no-inlines");
    Output llvm = inlining;
    if (!inlines) llvm.out = dwarf_test::no_inlines_of(inlining.out);
    const Output hpd = shell(kHpctl + " symbolize" + (inlines ? "" : " --no-inlines") + " --exe " +
                             quote(path) + " < " + list);
    expect_same_lines(llvm, hpd);
    if (inlines && c.must_contain[0] != '\0') {
      EXPECT_NE(hpd.out.find(std::string("\n") + c.must_contain + "\n"), std::string::npos)
          << "no '" << c.must_contain << "' level: the fixture lost its inline chains";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, SymbolizeGoldenTest,
    ::testing::Values(GoldenCase{"c_gcc", 3, "hash_bytes"}, GoldenCase{"c_gcc_dwarf4", 3, "hash_bytes"},
                      GoldenCase{"c_clang_dwarf5", 3, "mix"}, GoldenCase{"c_gcc_zlib", 5, "hash_bytes"},
                      GoldenCase{"c_nodebug", 5, ""}, GoldenCase{"cpp_gcc", 3, ""},
                      GoldenCase{"cpp_clang_dwarf5", 3, ""},
                      GoldenCase{"rust_moves", 11, "core::profiling::compiler_move::<moves::Huge, 16384>"}),
    [](const ::testing::TestParamInfo<GoldenCase>& info) { return std::string(info.param.fixture); });

// hpctl symbolize answers an address that comes back from a cache of formatted answers: the
// repeats must read exactly as the first answer did (and as llvm-symbolizer's, which caches
// nothing). The list mixes a few hot addresses, repeated back to back and far apart, with many
// that come once, so that answers are both cached and evicted.
// Every answer the symbolizer gives for hpctl's own functions (a large C++ binary with libstdc++
// templates that LLVM 14's demangler refuses), compared with c++filt: no name may stay mangled
// where c++filt demangles it.
TEST(SymbolizeHpctlBinary, NoAnswerStaysMangledThatCxxfiltDemangles) {
  ASSERT_TRUE(test::have_tool("c++filt"));
  const std::vector<test::NmSymbol> functions = test::nm_functions(kHpctl);
  ASSERT_GT(functions.size(), 2000u);
  std::vector<uint64_t> vaddrs;
  size_t mangled_symbols = 0;
  for (const auto& f : functions) {
    vaddrs.push_back(f.address);
    if (f.name.rfind("_Z", 0) == 0) ++mangled_symbols;
  }
  ASSERT_GT(mangled_symbols, 1500u);
  Symbolizer symbolizer;
  const std::vector<Location> locs = symbolizer.resolve_vaddrs(test::module_ref(kHpctl), vaddrs);
  std::set<std::string> still_mangled;  // answers that look mangled: the outer symbol and every inline level
  size_t answers = 0, found = 0;
  for (const Location& loc : locs) {
    found += loc.found ? 1 : 0;
    for (const SourceFrame& f : loc.frames) {
      ++answers;
      if (f.function.rfind("_Z", 0) == 0) still_mangled.insert(f.function);
    }
  }
  EXPECT_GT(found, functions.size() * 9 / 10);
  ASSERT_GT(answers, functions.size());
  dwarf_test::TempDir dir;
  const std::string list = dir.path() + "/names";
  std::string text;
  for (const std::string& name : still_mangled) text += name + "\n";
  test::write_file(list, text);
  const Output filtered = shell("c++filt < " + list);
  ASSERT_EQ(filtered.status, 0) << filtered.err;
  std::istringstream lines(filtered.out);
  size_t demangled_by_cxxfilt = 0;
  std::string examples;
  for (const std::string& name : still_mangled) {
    std::string line;
    ASSERT_TRUE(std::getline(lines, line));
    if (line != name) {
      ++demangled_by_cxxfilt;
      if (demangled_by_cxxfilt <= 3) examples += "\n  " + name + " -> " + line;
    }
  }
  EXPECT_EQ(demangled_by_cxxfilt, 0u) << "of " << answers << " answers, " << still_mangled.size()
                                      << " distinct ones stay mangled; c++filt demangles:" << examples;
}

TEST(SymbolizeCli, RepeatedAddressesReadAsTheirFirstAnswer) {
  const std::string path = dwarf_fixture("rust_moves");
  const std::vector<uint64_t> all = code_addresses(path, 7);
  ASSERT_GT(all.size(), 1000u);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> addresses;
  for (int i = 0; i < 6000; ++i) {
    const uint64_t hot = all[rng() % 40];
    addresses.push_back(i % 3 == 0 ? all[rng() % all.size()] : hot);
    if (i % 5 == 0) addresses.push_back(hot);
  }
  dwarf_test::TempDir dir;
  const std::string list = write_addresses(dir, addresses);
  expect_same_lines(llvm_names(dir, path, list),
                    shell(kHpctl + " symbolize --exe " + quote(path) + " < " + list));
}

// Input is read in batches of what is already there: a script that writes one address and waits
// for its answer (a coprocess) must get each answer before it writes the next address.
TEST(SymbolizeCli, OneAddressAtATimeIsAnsweredAtOnce) {
  const std::string path = dwarf_fixture("c_gcc");
  std::vector<uint64_t> addresses = code_addresses(path, 97);
  ASSERT_GE(addresses.size(), 3u);
  addresses.resize(3);
  dwarf_test::TempDir dir;
  test::BackgroundOptions options;
  options.stdin_pipe = true;
  options.stdout_path = dir.file("answers");
  test::Background hpctl({kHpctl, "symbolize", "--exe", path}, options);
  std::string answers;
  for (size_t i = 0; i < addresses.size(); ++i) {
    ASSERT_TRUE(hpctl.send(hex(addresses[i]) + "\n"));
    // Each answer ends with a blank line; wait for the i-th, with the pipe left open.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    size_t complete = 0;
    while (complete <= i && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::ifstream in(dir.file("answers"));
      answers.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      complete = 0;
      for (size_t at = answers.find("\n\n"); at != std::string::npos; at = answers.find("\n\n", at + 2))
        ++complete;
    }
    ASSERT_EQ(complete, i + 1) << "no answer to " << hex(addresses[i]) << " while the input stays open";
  }
  EXPECT_EQ(hpctl.wait(), 0);
  const std::string list = write_addresses(dir, addresses);
  EXPECT_EQ(answers, llvm_names(dir, path, list).out);
}

TEST(SymbolizeCli, ArgumentsAndStdinGiveTheSameAnswers) {
  const std::string path = dwarf_fixture("c_gcc");
  std::vector<uint64_t> addresses = code_addresses(path, 17);
  addresses.resize(std::min<size_t>(addresses.size(), 40));
  dwarf_test::TempDir dir;
  const std::string list = write_addresses(dir, addresses);
  std::string args;
  // Half of them without the 0x prefix: both spellings are hexadecimal.
  for (size_t i = 0; i < addresses.size(); ++i) {
    std::string h = hex(addresses[i]);
    args += " " + (i % 2 == 0 ? h : h.substr(2));
  }
  const Output from_stdin = shell(kHpctl + " symbolize --exe " + quote(path) + " < " + list);
  const Output from_args = shell(kHpctl + " symbolize --exe " + quote(path) + args + " < /dev/null");
  ASSERT_EQ(from_stdin.status, 0) << from_stdin.err;
  ASSERT_EQ(from_args.status, 0) << from_args.err;
  EXPECT_EQ(from_stdin.out, from_args.out);
  EXPECT_EQ(lines_of(from_stdin.out).size() >= 3 * addresses.size(), true);
}

TEST(SymbolizeCli, BadAddressesAreEchoedReportedAndFailTheExitStatus) {
  const std::string path = dwarf_fixture("c_gcc");
  const auto main_sym = test::nm_find(test::nm_functions(path), "main");
  ASSERT_TRUE(main_sym);
  const Output o = shell(kHpctl + " symbolize --exe " + quote(path) + " zzz " + hex(main_sym->address) +
                         " 0x 12345678901234567 0x1g");
  EXPECT_EQ(o.status, 1);
  const auto lines = lines_of(o.out);
  // As llvm-symbolizer: the unparsable input echoed on its own line, the good address answered.
  ASSERT_GE(lines.size(), 7u) << o.out;
  EXPECT_EQ(lines[0], "zzz");
  EXPECT_EQ(lines[1], "main");
  EXPECT_NE(lines[2].find("inline_c.c:"), std::string::npos);
  EXPECT_EQ(lines[3], "");
  EXPECT_EQ(lines[4], "0x");
  EXPECT_EQ(lines[5], "12345678901234567");  // 17 hex digits: over 64 bits
  EXPECT_EQ(lines[6], "0x1g");
  EXPECT_NE(o.err.find("not a hexadecimal address: 'zzz'"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("'0x1g'"), std::string::npos) << o.err;
}

TEST(SymbolizeCli, AddressOutsideEverythingIsUnknownNotAnError) {
  const Output o = shell(kHpctl + " symbolize --exe " + quote(dwarf_fixture("c_gcc")) + " 0xfffffff0");
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(o.out, "??\n??:0:0\n\n");
}

// Past the sized symbol sized_entry lie instructions with line rows but no symbol and no function
// DIE: the answer is "??" with the line table's file:line, as llvm-symbolizer prints it (it used to
// be ??:0:0), and one past the last row nothing at all.
TEST(SymbolizeCli, LineTableAnswersWhereNoSymbolOrFunctionEntryDoes) {
  const std::string bin = FIXTURE_LINE_ONLY;
  const Output nm = shell("nm -S " + quote(bin));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(nm.out, m, std::regex("([0-9a-f]+) ([0-9a-f]+) T sized_entry"))) << nm.out;
  const uint64_t end = std::stoull(m[1], nullptr, 16) + std::stoull(m[2], nullptr, 16);
  std::string list;
  for (uint64_t a = end; a < end + 5; ++a) list += " " + hex(a);
  const Output ours = shell(kHpctl + " symbolize --exe " + bin + list);
  const Output llvm = shell(kLlvmSymbolizer + " --inlining --demangle --obj=" + bin + list);
  ASSERT_EQ(ours.status, 0) << ours.err;
  ASSERT_EQ(llvm.status, 0) << llvm.err;
  EXPECT_EQ(ours.out, llvm.out);
  const std::vector<std::string> lines = lines_of(ours.out);
  ASSERT_EQ(lines.size(), 15u) << ours.out;
  const std::vector<std::string> want_lines = {":20:0", ":21:0", ":21:0", ":22:0"};
  for (size_t i = 0; i < want_lines.size(); ++i) {
    EXPECT_EQ(lines[3 * i], "??");
    EXPECT_TRUE(lines[3 * i + 1].ends_with("/line_only.s" + want_lines[i])) << lines[3 * i + 1];
  }
  EXPECT_EQ(lines[13], "??:0:0");  // past the last row (the end of the sequence)
}

TEST(SymbolizeCli, MissingOrNonElfFileIsAClearErrorAndNonZeroExit) {
  const Output missing = shell(kHpctl + " symbolize --exe /nonexistent/hpd-binary 0x1000");
  EXPECT_NE(missing.status, 0);
  EXPECT_TRUE(missing.out.empty()) << missing.out;
  EXPECT_NE(missing.err.find("/nonexistent/hpd-binary"), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("No such file"), std::string::npos) << missing.err;

  dwarf_test::TempDir dir;
  const std::string text = dir.path() + "/text";
  test::write_file(text, "not an ELF file\n");
  const Output not_elf = shell(kHpctl + " symbolize --exe " + text + " 0x1000");
  EXPECT_NE(not_elf.status, 0);
  EXPECT_NE(not_elf.err.find("not an ELF file"), std::string::npos) << not_elf.err;

  const Output neither = shell(kHpctl + " symbolize 0x1000");
  EXPECT_NE(neither.status, 0);
  EXPECT_NE(neither.err.find("--exe"), std::string::npos) << neither.err;
}

TEST(SymbolizeCli, JsonLinesCarryTheSameFrames) {
  const std::string path = dwarf_fixture("c_gcc");
  std::vector<uint64_t> addresses = code_addresses(path, 29);
  addresses.resize(std::min<size_t>(addresses.size(), 30));
  dwarf_test::TempDir dir;
  const std::string list = write_addresses(dir, addresses);
  const Output text = shell(kHpctl + " symbolize --exe " + quote(path) + " < " + list);
  const Output js = shell(kHpctl + " symbolize --json --exe " + quote(path) + " < " + list);
  ASSERT_EQ(js.status, 0) << js.err;
  const auto json_lines = lines_of(js.out);
  ASSERT_EQ(json_lines.size(), addresses.size());
  std::string rebuilt;
  for (size_t i = 0; i < json_lines.size(); ++i) {
    const json doc = json::parse(json_lines[i]);
    EXPECT_EQ(doc.at("address").get<std::string>(), hex(addresses[i]));
    EXPECT_EQ(doc.at("vaddr").get<std::string>(), hex(addresses[i]));
    EXPECT_TRUE(doc.at("found").get<bool>());
    const auto& frames = doc.at("frames");
    ASSERT_FALSE(frames.empty());
    EXPECT_FALSE(frames.back().at("inlined").get<bool>());
    for (const auto& f : frames) {
      const std::string file = f.at("file").get<std::string>();
      rebuilt += f.at("function").get<std::string>() + "\n" + (file.empty() ? "??" : file) + ":" +
                 std::to_string(f.at("line").get<uint32_t>()) + ":" +
                 std::to_string(f.at("column").get<uint32_t>()) + "\n";
    }
    rebuilt += "\n";
  }
  EXPECT_EQ(rebuilt, text.out);
  const Output bad = shell(kHpctl + " symbolize --json --exe " + quote(path) + " nope");
  EXPECT_EQ(json::parse(bad.out).at("error").get<std::string>(), "not a hexadecimal address: 'nope'");
}

// A fixture process that prints "ready" once running; killed on destruction.
test::Background live_process(const std::string& path) {
  test::BackgroundOptions options;
  options.ready_line = "ready";
  return test::Background({path}, options);
}

// The runtime address of ELF vaddr `vaddr` of `file` in process `pid`, computed from the process's
// maps and the file's program headers (independently of the code under test's mapping logic).
std::optional<uint64_t> runtime_address(pid_t pid, const std::string& mapped_path, const std::string& file,
                                        uint64_t vaddr) {
  const uint64_t offset = test::file_offset_of(test::load_segments(file), vaddr);
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    uint64_t start = 0, end = 0, off = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %lx", &start, &end, perms, &off) != 4) continue;
    if (line.find(mapped_path) == std::string::npos || perms[2] != 'x') continue;
    if (offset >= off && offset < off + (end - start)) return start + (offset - off);
  }
  return std::nullopt;
}

void expect_pid_answer_matches_llvm(pid_t pid, const std::string& mapped_path, const std::string& file,
                                    uint64_t vaddr) {
  const auto runtime = runtime_address(pid, mapped_path, file, vaddr);
  ASSERT_TRUE(runtime) << file << " " << hex(vaddr) << " not mapped in " << pid;
  const Output hpd = shell(kHpctl + " symbolize --pid " + std::to_string(pid) + " " + hex(*runtime));
  ASSERT_EQ(hpd.status, 0) << hpd.err;
  const Output llvm = shell(kLlvmSymbolizer + " --inlining --obj=" + quote(file) + " " + hex(vaddr));
  const auto lines = lines_of(hpd.out);
  ASSERT_FALSE(lines.empty());
  // First the module and the file offset, then exactly what llvm-symbolizer says of the vaddr.
  const uint64_t offset = test::file_offset_of(test::load_segments(file), vaddr);
  EXPECT_EQ(lines[0], mapped_path + "+" + hex(offset));
  EXPECT_EQ(hpd.out.substr(hpd.out.find('\n') + 1), llvm.out);
}

TEST(SymbolizeCliPid, ResolvesRuntimeAddressesOfTheExecutableAndLibc) {
  test::Background proc = live_process(FIXTURE_WAITER);
  ASSERT_TRUE(proc.ready());
  const auto work = test::nm_find(test::nm_functions(FIXTURE_WAITER), "hpd_waiter_work");
  ASSERT_TRUE(work);
  for (uint64_t delta : {uint64_t{0}, work->size / 2, work->size - 1}) {
    SCOPED_TRACE(delta);
    expect_pid_answer_matches_llvm(proc.pid(), fs::canonical(FIXTURE_WAITER).string(), FIXTURE_WAITER,
                                   work->address + delta);
  }
  // libc, as the process maps it.
  std::string libc;
  std::ifstream maps("/proc/" + std::to_string(proc.pid()) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.find('/');
    if (slash != std::string::npos && line.find("libc.so") != std::string::npos) libc = line.substr(slash);
  }
  ASSERT_FALSE(libc.empty());
  // nm -D prints versioned names (pause@@GLIBC_2.2.5).
  std::optional<test::NmSymbol> pause_sym;
  for (const auto& sym : test::nm_functions(libc, false, true)) {
    if (sym.name == "pause" || sym.name.rfind("pause@", 0) == 0) pause_sym = sym;
  }
  ASSERT_TRUE(pause_sym);
  expect_pid_answer_matches_llvm(proc.pid(), libc, libc, pause_sym->address + 1);

  // Outside every mapping: unknown, with no module.
  const Output o = shell(kHpctl + " symbolize --pid " + std::to_string(proc.pid()) + " 0x10");
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(o.out, "??+0x10\n??\n??:0:0\n\n");
}

// A batch read from stdin is prepared module by module in address order (AddressQuery::prepare),
// then answered in input order: it must read exactly as the same addresses asked one per run.
// The batch mixes the executable and libc, repeats, an unmapped address and a bad line.
TEST(SymbolizeCliPid, BatchFromStdinAnswersAsSingleAddresses) {
  test::Background proc = live_process(FIXTURE_WAITER);
  ASSERT_TRUE(proc.ready());
  std::vector<std::pair<uint64_t, uint64_t>> executable;  // runtime ranges of r-x file mappings
  std::ifstream maps("/proc/" + std::to_string(proc.pid()) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    uint64_t start = 0, end = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &start, &end, perms) != 3) continue;
    if (perms[2] == 'x' && line.find('/') != std::string::npos) executable.emplace_back(start, end);
  }
  ASSERT_GE(executable.size(), 2u) << "the executable and libc";
  std::mt19937_64 rng(5);
  std::vector<std::string> inputs;
  for (int i = 0; i < 60; ++i) {
    const auto& [start, end] = executable[i % executable.size()];
    inputs.push_back(hex(start + rng() % (end - start)));
    if (i % 9 == 0) inputs.push_back(inputs[rng() % inputs.size()]);
  }
  const auto work = test::nm_find(test::nm_functions(FIXTURE_WAITER), "hpd_waiter_work");
  ASSERT_TRUE(work);
  const auto work_at = runtime_address(proc.pid(), fs::canonical(FIXTURE_WAITER).string(), FIXTURE_WAITER,
                                       work->address + work->size / 2);
  ASSERT_TRUE(work_at);
  inputs.insert(inputs.end(), 3, hex(*work_at));
  inputs.push_back("0x10");
  inputs.push_back("nope");
  std::shuffle(inputs.begin(), inputs.end(), rng);

  dwarf_test::TempDir dir;
  std::string list;
  for (const std::string& in : inputs) list += in + "\n";
  std::ofstream(dir.file("list")) << list;
  const std::string pid = std::to_string(proc.pid());
  const Output batch = shell(kHpctl + " symbolize --pid " + pid + " < " + quote(dir.file("list")));
  EXPECT_EQ(batch.status, 1) << "one bad line";
  std::string singles;
  for (const std::string& in : inputs) singles += shell(kHpctl + " symbolize --pid " + pid + " " + in).out;
  EXPECT_EQ(batch.out, singles);
  EXPECT_NE(batch.out.find("\nhpd_waiter_work\n"), std::string::npos) << batch.out;
}

TEST(SymbolizeCliPid, DeletedExecutableStillResolvesThroughMapFiles) {
  dwarf_test::TempDir dir;
  const std::string copy = dir.path() + "/waiter-copy";
  fs::copy_file(FIXTURE_WAITER, copy);
  fs::permissions(copy, fs::perms::owner_all);
  test::Background proc = live_process(copy);
  ASSERT_TRUE(proc.ready());
  const auto work = test::nm_find(test::nm_functions(copy), "hpd_waiter_work");
  ASSERT_TRUE(work);
  const auto runtime = runtime_address(proc.pid(), copy, copy, work->address + 4);
  ASSERT_TRUE(runtime);
  fs::remove(copy);
  const Output o = shell(kHpctl + " symbolize --pid " + std::to_string(proc.pid()) + " " + hex(*runtime));
  ASSERT_EQ(o.status, 0) << o.err;
  const auto lines = lines_of(o.out);
  ASSERT_GE(lines.size(), 3u) << o.out;
  EXPECT_EQ(lines[1], "hpd_waiter_work") << o.out;
  EXPECT_NE(lines[2].find("waiter.c:"), std::string::npos) << o.out;
}

TEST(SymbolizeCliPid, MissingProcessIsAClearError) {
  const Output o = shell(kHpctl + " symbolize --pid 999999999 0x1000");
  EXPECT_NE(o.status, 0);
  EXPECT_NE(o.err.find("/proc/999999999/maps"), std::string::npos) << o.err;
}

TEST(AddressQuery, ParsesHexAndMaps) {
  EXPECT_EQ(parse_hex_address("0x1f"), 0x1fu);
  EXPECT_EQ(parse_hex_address(" 1F \n"), 0x1fu);
  EXPECT_EQ(parse_hex_address("ffffffffffffffff"), UINT64_MAX);
  EXPECT_FALSE(parse_hex_address("10000000000000000"));
  EXPECT_FALSE(parse_hex_address("0x"));
  EXPECT_FALSE(parse_hex_address(""));
  EXPECT_FALSE(parse_hex_address("12 34"));
  const auto maps = parse_proc_maps(
      "7f00-7f80 r-xp 00001000 08:01 1234     /usr/lib/with space.so\n"
      "garbage line\n"
      "1000-2000 rw-p 00000000 00:00 0 \n"
      "3000-4000 r-xp 00002000 08:01 99 /tmp/gone (deleted)\n");
  ASSERT_EQ(maps.size(), 3u);
  EXPECT_EQ(maps[0].start, 0x1000u);
  EXPECT_EQ(maps[0].path, "");
  EXPECT_FALSE(maps[0].executable);
  EXPECT_EQ(maps[1].path, "/tmp/gone");
  EXPECT_TRUE(maps[1].deleted);
  EXPECT_EQ(maps[1].offset, 0x2000u);
  EXPECT_EQ(maps[2].path, "/usr/lib/with space.so");
  EXPECT_TRUE(maps[2].executable);
}

// debuginfod: a real server (Debian's `debuginfod`) serves a fixture's separate debug file, in a
// private network namespace that has nothing but loopback, so nothing leaves the machine. The
// fixture is stripped of its DWARF; symbolization must get file:line and inline levels back.
TEST(SymbolizeCliDebuginfod, FetchesDebugInfoByBuildIdFromALoopbackServer) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for a private network namespace (unshare --net)";
  if (!test::have_tool("objcopy")) GTEST_SKIP() << "objcopy is not installed (packaging/install-deps.sh)";
  if (const std::string tool = testing::debuginfod_session_missing_tool(); !tool.empty())
    GTEST_SKIP() << tool << " is not installed (packaging/install-deps.sh)";
  dwarf_test::TempDir dir;
  const std::string d = dir.path();
  fs::create_directories(d + "/srv");
  const std::string full = dwarf_fixture("c_gcc");
  ASSERT_EQ(shell("objcopy --only-keep-debug " + quote(full) + " " + d + "/srv/c_gcc.debug").status, 0);
  ASSERT_EQ(shell("objcopy --strip-debug " + quote(full) + " " + d + "/stripped").status, 0);
  const auto sort_and_hash = test::nm_find(test::nm_functions(full), "sort_and_hash");
  ASSERT_TRUE(sort_and_hash);
  std::vector<uint64_t> addresses;
  for (uint64_t a = sort_and_hash->address; a < sort_and_hash->address + sort_and_hash->size; a += 3) {
    addresses.push_back(a);
  }
  const std::string list = write_addresses(dir, addresses);

  // Without a server: no DWARF, and hpctl says so.
  const Output before = shell(kHpctl + " symbolize --exe " + d + "/stripped < " + list);
  ASSERT_EQ(before.status, 0) << before.err;
  EXPECT_EQ(before.out.find("inline_c.c"), std::string::npos);
  EXPECT_NE(before.err.find("no debug information"), std::string::npos) << before.err;

  const Output served = shell(testing::debuginfod_session(
      d, d + "/srv", d + "/stripped", "debuginfo", kHpctl + " symbolize --exe " + d + "/stripped < " + list));
  ASSERT_EQ(served.status, 0) << served.err << test::read_file(d + "/server.log");

  const Output llvm = shell(kLlvmSymbolizer + " --inlining --obj=" + quote(full) + " < " + list);
  EXPECT_EQ(served.out, llvm.out) << served.err;
  EXPECT_NE(served.out.find("hash_bytes\n"), std::string::npos);  // an inline level: from DWARF only
  EXPECT_TRUE(fs::exists(d + "/cache")) << "libdebuginfod's cache was not used";
}

}  // namespace
}  // namespace hpd
