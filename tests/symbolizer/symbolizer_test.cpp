// Symbolizer: ELF symbol tables of real fixture binaries (PIE, non-PIE, C++), PLT names, debug-file
// discovery, build-id checks, /proc/PID/map_files, bad files, and the LRU cache.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

#include "dwarf_test_support.h"
#include "elf_file.h"
#include "hpd/symbolizer/symbolizer.h"
#include "symbol_table.h"
#include "test_util.h"

extern "C" __attribute__((noinline, used)) int hpd_test_probe_function(int x) {
  asm volatile("" ::: "memory");
  return x * 5 + 1;
}

namespace hpd {
namespace {

const char* const kCFunctions[] = {"hpd_leaf", "hpd_static_helper", "hpd_middle", "hpd_outer", "main"};

std::string readelf_build_id(const std::string& path) {
  const std::string out = test::run("readelf -n '" + path + "'");
  const size_t at = out.find("Build ID: ");
  if (at == std::string::npos) return {};
  return out.substr(at + 10, out.find('\n', at) - at - 10);
}

Location resolve_one(Symbolizer& s, const ModuleRef& ref, uint64_t offset) {
  auto locs = s.resolve(ref, std::span<const uint64_t>(&offset, 1));
  return locs.at(0);
}

void check_functions_match_nm(const std::string& path, uint64_t expected_base) {
  Symbolizer symbolizer;
  const ModuleRef ref = test::module_ref(path);
  const ModuleInfo& info = symbolizer.module_info(ref);
  ASSERT_TRUE(info.readable) << info.error;
  EXPECT_EQ(info.opened_path, path);
  EXPECT_EQ(info.image_base, expected_base);
  EXPECT_EQ(info.build_id, readelf_build_id(path));
  EXPECT_FALSE(info.build_id.empty());
  EXPECT_TRUE(info.has_debug_info);                            // built with -g
  EXPECT_TRUE(info.dwarf_index || !info.debug_error.empty());  // used, or a reason why not
  EXPECT_EQ(info.debug_path, path);

  const auto nm = test::nm_functions(path);
  const auto segments = test::load_segments(path);
  for (const char* name : kCFunctions) {
    SCOPED_TRACE(name);
    const auto sym = test::nm_find(nm, name);
    ASSERT_TRUE(sym.has_value());
    ASSERT_GT(sym->size, 1u);
    for (uint64_t delta : {uint64_t{0}, sym->size / 2, sym->size - 1}) {
      const uint64_t vaddr = sym->address + delta;
      const Location loc = resolve_one(symbolizer, ref, test::file_offset_of(segments, vaddr));
      ASSERT_TRUE(loc.found);
      EXPECT_EQ(loc.symbol, name);
      EXPECT_EQ(loc.symbol_address, sym->address - expected_base);
      EXPECT_EQ(loc.symbol_size, sym->size);
      EXPECT_EQ(loc.rel_address, vaddr - expected_base);
      ASSERT_FALSE(loc.frames.empty());
      EXPECT_EQ(loc.frames.front().function, name);  // the outer frame is named by the symbol table
    }
  }
}

TEST(Symbolizer, PieFunctionsMatchNm) {
  check_functions_match_nm(FIXTURE_C_PIE, 0);
}

TEST(Symbolizer, NonPieFunctionsMatchNm) {
  check_functions_match_nm(FIXTURE_C_NOPIE, 0x400000);
}

// Every 3rd byte of .text, compared with llvm-symbolizer reading the same symbol table.
void check_against_llvm_symbolizer(const std::string& original) {
  if (!test::have_tool("llvm-symbolizer")) GTEST_SKIP() << "no llvm-symbolizer";
  test::TempDir dir;
  const std::string path = dir.file("copy");
  // Without DWARF both tools name addresses from the ELF symbol table alone.
  ASSERT_EQ(std::system(("strip --strip-debug -o '" + path + "' '" + original + "'").c_str()), 0);
  const auto text = test::section_range(path, ".text");
  ASSERT_TRUE(text.has_value());
  const auto segments = test::load_segments(path);
  std::vector<uint64_t> vaddrs, offsets;
  std::ostringstream input;
  for (uint64_t a = text->first; a < text->second; a += 3) {
    vaddrs.push_back(a);
    offsets.push_back(test::file_offset_of(segments, a));
    input << "0x" << std::hex << a << "\n";
  }
  test::write_file(dir.file("addresses"), input.str());
  std::istringstream out(test::run("llvm-symbolizer --obj='" + path +
                                   "' --functions=linkage --demangle --no-inlines < '" +
                                   dir.file("addresses") + "'"));
  Symbolizer symbolizer;
  const auto locs = symbolizer.resolve(test::module_ref(path), offsets);
  ASSERT_EQ(locs.size(), vaddrs.size());
  size_t equal = 0;
  for (size_t i = 0; i < vaddrs.size(); ++i) {
    std::string name, file_line, blank;
    ASSERT_TRUE(std::getline(out, name));
    std::getline(out, file_line);
    std::getline(out, blank);
    const std::string ours = locs[i].found ? locs[i].symbol : "??";
    if (ours == name)
      ++equal;
    else if (i - equal < 5)
      ADD_FAILURE() << std::hex << vaddrs[i] << ": ours " << ours << ", llvm " << name;
  }
  EXPECT_EQ(equal, vaddrs.size());
  EXPECT_GT(vaddrs.size(), 50u);
}

TEST(Symbolizer, PieMatchesLlvmSymbolizer) {
  check_against_llvm_symbolizer(FIXTURE_C_PIE);
}
TEST(Symbolizer, NonPieMatchesLlvmSymbolizer) {
  check_against_llvm_symbolizer(FIXTURE_C_NOPIE);
}
TEST(Symbolizer, CppMatchesLlvmSymbolizer) {
  check_against_llvm_symbolizer(FIXTURE_CPP);
}

// With the DWARF index built in: inline chains (names and file:line per level) agree with
// llvm-symbolizer --inlining on the -g fixtures. The outermost name is compared with llvm's on a
// copy without .symtab (an exported symbol's name, else DWARF's: linkers fold identical template
// or generic instances, and DWARF names the one whose code was kept where .symtab lists another),
// completed by llvm's .symtab names where neither covers the address (function_names_test.cpp).
void check_inline_chains_against_llvm(const std::string& path, uint64_t step = 5) {
  if (!test::have_tool("llvm-symbolizer")) GTEST_SKIP() << "no llvm-symbolizer";
  Symbolizer symbolizer;
  if (!symbolizer.module_info(test::module_ref(path)).dwarf_index) GTEST_SKIP() << "no DWARF index built in";
  test::TempDir dir;
  const auto text = test::section_range(path, ".text");
  ASSERT_TRUE(text.has_value());
  const auto segments = test::load_segments(path);
  std::vector<uint64_t> vaddrs, offsets;
  std::ostringstream input;
  for (uint64_t a = text->first; a < text->second; a += step) {
    vaddrs.push_back(a);
    offsets.push_back(test::file_offset_of(segments, a));
    input << "0x" << std::hex << a << "\n";
  }
  test::write_file(dir.file("addresses"), input.str());
  const std::string no_symtab = dir.file("no_symtab");
  ASSERT_TRUE(dwarf_test::copy_without_symbol_table(path, no_symtab));
  const auto llvm_on = [&](const std::string& obj) {
    return test::run("llvm-symbolizer --obj='" + obj + "' --functions=linkage --demangle --inlining < '" +
                     dir.file("addresses") + "'");
  };
  std::istringstream out(dwarf_test::merge_llvm_names(llvm_on(no_symtab), llvm_on(path)));
  const auto locs = symbolizer.resolve(test::module_ref(path), offsets);
  size_t equal = 0, with_inlines = 0;
  for (size_t i = 0; i < vaddrs.size(); ++i) {
    // llvm prints innermost first: name, file:line:column pairs, then a blank line.
    std::vector<std::string> llvm;
    std::string name, where;
    while (std::getline(out, name) && !name.empty()) {
      std::getline(out, where);
      llvm.push_back(name + " @ " + where.substr(0, where.rfind(':')));  // drop the column
    }
    std::vector<std::string> ours;
    for (auto it = locs[i].frames.rbegin(); it != locs[i].frames.rend(); ++it) {
      ours.push_back((it->function.empty() ? "??" : it->function) + " @ " +
                     (it->file.empty() ? "??" : it->file) + ":" + std::to_string(it->line));
    }
    if (ours.empty()) ours.push_back("?? @ ??:0");
    // No DWARF for this code (crt files): llvm adds the STT_FILE symbol's name with line 0.
    if (ours.size() == 1 && llvm.size() == 1 && ours[0].size() > 7 &&
        ours[0].substr(ours[0].size() - 7) == " @ ??:0" && llvm[0].size() > 2 &&
        llvm[0].substr(llvm[0].size() - 2) == ":0") {
      ours[0] = llvm[0];
    }
    // Padding between functions: like llvm, "??" with the line row's position, and not found
    // (there is no function to attribute it to).
    if (!ours.empty() && ours[0].rfind("?? @ ", 0) == 0) {
      EXPECT_FALSE(locs[i].found) << std::hex << vaddrs[i];
    }
    if (ours.size() > 1) ++with_inlines;
    if (ours == llvm)
      ++equal;
    else if (i - equal < 3)
      ADD_FAILURE() << std::hex << vaddrs[i] << ": ours " << ours.front() << " (" << ours.size()
                    << " levels), llvm " << llvm.front() << " (" << llvm.size() << " levels)";
  }
  EXPECT_EQ(equal, vaddrs.size());
  EXPECT_GT(with_inlines, 0u);
}

TEST(Symbolizer, InlineChainsMatchLlvmSymbolizerC) {
  check_inline_chains_against_llvm(FIXTURE_C_PIE);
}
TEST(Symbolizer, InlineChainsMatchLlvmSymbolizerCpp) {
  check_inline_chains_against_llvm(FIXTURE_CPP);
}
#ifdef FIXTURE_RUST_V0
// v0 names demangle identically in both tools (legacy ones differ on purpose: we drop the hash).
TEST(Symbolizer, InlineChainsMatchLlvmSymbolizerRustV0) {
  check_inline_chains_against_llvm(FIXTURE_RUST_V0, 17);
}
#endif

#ifdef FIXTURE_RUST_LEGACY
// Legacy Rust: inlined levels (named from DWARF) are spelled like symbol-table names, with the
// $-escapes decoded and no hash, so one function never appears under two names.
// Everything a caller can see of a Location, on one line.
// A Location or a LocationView as one line of text.
template <class AnyLocation>
std::string describe(const AnyLocation& loc) {
  std::ostringstream out;
  out << loc.found << ' ' << loc.symbol << " @" << std::hex << loc.symbol_address << '+' << loc.symbol_size
      << " rel " << loc.rel_address << std::dec;
  for (const auto& f : loc.frames)
    out << " | " << f.function << ' ' << f.file << ':' << f.line << ':' << f.column;
  return out.str();
}

// Symbolizer::prepare searches a batch in address order ahead of the one-at-a-time lookups that
// follow; resolve and resolve_vaddrs search their batch in address order too. None of it may
// change an answer: addresses given shuffled and repeated, looked up in the prepared order with
// some skipped (hpctl symbolize answers repeats from its own cache), then in another order
// altogether, must read exactly as a plain one-at-a-time lookup in a fresh Symbolizer reads them.
TEST(Symbolizer, PreparedAndBatchLookupsAnswerAsOneAtATime) {
  const std::string path = FIXTURE_CPP;
  const ModuleRef ref = test::module_ref(path);
  const auto text = test::section_range(path, ".text");
  ASSERT_TRUE(text.has_value());
  const auto segments = test::load_segments(path);
  std::vector<uint64_t> vaddrs;
  for (uint64_t a = text->first; a < text->second; a += 3) vaddrs.push_back(a);
  ASSERT_GT(vaddrs.size(), 200u);
  vaddrs.push_back(text->second + 0x100000);  // outside every unit and symbol
  const size_t distinct = vaddrs.size();
  for (size_t i = 0; i < distinct; i += 5) vaddrs.push_back(vaddrs[i]);  // repeats
  std::mt19937_64 rng(11);
  std::shuffle(vaddrs.begin(), vaddrs.end(), rng);

  std::vector<std::string> expected;
  {
    Symbolizer plain;
    Location loc;
    for (uint64_t v : vaddrs) {
      plain.resolve_vaddr(ref, v, loc);
      expected.push_back(describe(loc));
    }
  }
  size_t with_inlines = 0;
  for (const std::string& e : expected) with_inlines += std::count(e.begin(), e.end(), '|') > 1;
  EXPECT_GT(with_inlines, 10u) << "the fixture lost its inline chains";

  Symbolizer prepared;
  ASSERT_TRUE(prepared.module_info(ref).readable);
  const uint64_t bytes_before = prepared.cache_bytes_used();
  prepared.prepare_vaddrs(ref, vaddrs);
  // The searches happened in prepare: the unit tables they build are accounted for already.
  EXPECT_GT(prepared.cache_bytes_used(), bytes_before + vaddrs.size() * 16);
  Location loc;
  for (size_t i = 0; i < vaddrs.size(); ++i) {
    if (i % 7 == 3) continue;  // answered elsewhere: the next lookup is further on in the batch
    prepared.resolve_vaddr(ref, vaddrs[i], loc);
    ASSERT_EQ(describe(loc), expected[i]) << "prepared order, index " << i;
  }
  prepared.prepare_vaddrs(ref, vaddrs);
  for (size_t i = vaddrs.size(); i-- > 0;) {
    prepared.resolve_vaddr(ref, vaddrs[i], loc);
    ASSERT_EQ(describe(loc), expected[i]) << "reverse order, index " << i;
  }

  // Addresses 2^64 - 8 apart: a batch that cannot be ordered by one word per address (the other
  // path of the sort).
  std::vector<uint64_t> far = vaddrs;
  far.push_back(UINT64_MAX - 7);
  far.push_back(0);
  std::shuffle(far.begin(), far.end(), rng);
  {
    Symbolizer plain;
    std::vector<std::string> far_expected;
    for (uint64_t v : far) {
      plain.resolve_vaddr(ref, v, loc);
      far_expected.push_back(describe(loc));
    }
    prepared.prepare_vaddrs(ref, far);
    for (size_t i = 0; i < far.size(); ++i) {
      prepared.resolve_vaddr(ref, far[i], loc);
      ASSERT_EQ(describe(loc), far_expected[i]) << "far apart, index " << i;
    }
    const std::vector<Location> far_batch = Symbolizer().resolve_vaddrs(ref, far);
    for (size_t i = 0; i < far.size(); ++i) ASSERT_EQ(describe(far_batch[i]), far_expected[i]) << i;
  }

  Symbolizer batch;
  const std::vector<Location> by_vaddr = batch.resolve_vaddrs(ref, vaddrs);
  std::vector<uint64_t> offsets;
  for (uint64_t v : vaddrs) offsets.push_back(v < text->second ? test::file_offset_of(segments, v) : v);
  Symbolizer batch_offsets;
  const std::vector<Location> by_offset = batch_offsets.resolve(ref, offsets);
  ASSERT_EQ(by_vaddr.size(), vaddrs.size());
  ASSERT_EQ(by_offset.size(), vaddrs.size());
  for (size_t i = 0; i < vaddrs.size(); ++i) {
    EXPECT_EQ(describe(by_vaddr[i]), expected[i]) << "resolve_vaddrs, index " << i;
    if (vaddrs[i] < text->second) {
      EXPECT_EQ(describe(by_offset[i]), expected[i]) << "resolve, index " << i;
    }
  }
}

// resolve_vaddr into a LocationView (hpctl symbolize's path) answers exactly as into a Location,
// one at a time and prepared, in C++ and in legacy-mangled Rust (names with decoded escapes).
TEST(Symbolizer, ViewLookupsAnswerAsCopyingOnes) {
  std::vector<std::string> fixtures{FIXTURE_CPP};
#ifdef FIXTURE_RUST_LEGACY
  fixtures.push_back(FIXTURE_RUST_LEGACY);
#endif
  for (const std::string& path : fixtures) {
    SCOPED_TRACE(path);
    const ModuleRef ref = test::module_ref(path);
    const auto text = test::section_range(path, ".text");
    ASSERT_TRUE(text.has_value());
    std::vector<uint64_t> vaddrs;
    for (uint64_t a = text->first; a < text->second; a += 5) vaddrs.push_back(a);
    vaddrs.push_back(text->second + 0x100000);
    Symbolizer copying, viewing, prepared;
    prepared.prepare_vaddrs(ref, vaddrs);
    Location loc;
    LocationView view, prepared_view;
    for (uint64_t v : vaddrs) {
      copying.resolve_vaddr(ref, v, loc);
      viewing.resolve_vaddr(ref, v, view);
      prepared.resolve_vaddr(ref, v, prepared_view);
      const std::string expected = describe(loc);
      ASSERT_EQ(describe(view), expected) << std::hex << v;
      ASSERT_EQ(describe(prepared_view), expected) << std::hex << v;
    }
  }
}

TEST(Symbolizer, RustLegacyInlineNamesDecoded) {
  Symbolizer symbolizer;
  const ModuleRef ref = test::module_ref(FIXTURE_RUST_LEGACY);
  if (!symbolizer.module_info(ref).dwarf_index) GTEST_SKIP() << "no DWARF index built in";
  const auto text = test::section_range(FIXTURE_RUST_LEGACY, ".text");
  const auto segments = test::load_segments(FIXTURE_RUST_LEGACY);
  std::vector<uint64_t> offsets;
  for (uint64_t a = text->first; a < text->second; a += 11)
    offsets.push_back(test::file_offset_of(segments, a));
  size_t inlined = 0, decoded_generic = 0;
  for (const Location& loc : symbolizer.resolve(ref, offsets)) {
    for (size_t d = 0; d < loc.frames.size(); ++d) {
      const std::string& f = loc.frames[d].function;
      EXPECT_EQ(f.find("$LT$"), std::string::npos) << f;
      EXPECT_EQ(f.find("$u20$"), std::string::npos) << f;
      if (d > 0) ++inlined;
      if (d > 0 && f.find("<impl ") != std::string::npos) ++decoded_generic;
    }
  }
  EXPECT_GT(inlined, 100u);
  EXPECT_GT(decoded_generic, 0u);
}
#endif

TEST(Symbolizer, CppNamesAreDemangledUnlessAsked) {
  const auto nm = test::nm_functions(FIXTURE_CPP, false);
  const auto segments = test::load_segments(FIXTURE_CPP);
  const auto it = std::find_if(nm.begin(), nm.end(), [](const test::NmSymbol& s) {
    return s.name.find("Accumulator") != std::string::npos &&
           s.name.find("addERKSt6vector") != std::string::npos;
  });
  ASSERT_NE(it, nm.end());
  const uint64_t offset = test::file_offset_of(segments, it->address);
  Symbolizer demangling;
  EXPECT_EQ(resolve_one(demangling, test::module_ref(FIXTURE_CPP), offset).symbol, demangle(it->name));
  EXPECT_NE(demangle(it->name).find("hpd_fixture::detail::Accumulator<"), std::string::npos);
  SymbolizerOptions raw_options;
  raw_options.demangle = false;
  Symbolizer raw(raw_options);
  EXPECT_EQ(resolve_one(raw, test::module_ref(FIXTURE_CPP), offset).symbol, it->name);
}

// PLT stubs get "<func>@plt" names, as objdump labels them from the same relocations.
TEST(Symbolizer, PltStubsNamedFromRelocations) {
  for (const char* path : {FIXTURE_C_PIE, FIXTURE_C_NOPIE}) {
    SCOPED_TRACE(path);
    std::istringstream dis(
        test::run(std::string("objdump -d -j .plt -j .plt.sec -j .plt.got '") + path + "'"));
    Symbolizer symbolizer;
    const auto segments = test::load_segments(path);
    const uint64_t base = symbolizer.module_info(test::module_ref(path)).image_base;
    std::string line;
    size_t checked = 0;
    while (std::getline(dis, line)) {
      // "0000000000001030 <puts@plt>:"
      const size_t lt = line.find(" <");
      if (lt == std::string::npos || line.size() < 3 || line.substr(line.size() - 2) != ">:") continue;
      const std::string label = line.substr(lt + 2, line.size() - lt - 4);
      const uint64_t vaddr = std::stoull(line.substr(0, lt), nullptr, 16);
      if (label.find("@plt-0x") != std::string::npos) {
        // The lazy-binding header (PLT0) belongs to no function.
        EXPECT_EQ(
            resolve_one(symbolizer, test::module_ref(path), test::file_offset_of(segments, vaddr)).symbol,
            "[plt]");
        continue;
      }
      if (label.find("@plt") == std::string::npos || label.find_first_of("+-") != std::string::npos) continue;
      for (uint64_t delta : {0, 5}) {
        const Location loc =
            resolve_one(symbolizer, test::module_ref(path), test::file_offset_of(segments, vaddr + delta));
        EXPECT_TRUE(loc.found);
        EXPECT_EQ(loc.symbol, label);
        EXPECT_EQ(loc.symbol_address, vaddr - base);
      }
      ++checked;
    }
    EXPECT_GE(checked, 2u);  // printf and puts (gcc folds the malloc/free pair away)
  }
}

struct StrippedFixture {
  test::TempDir dir;
  std::string stripped, debug_root, build_id;
  uint64_t helper_offset = 0;  // file offset of the static function, absent from .dynsym

  StrippedFixture() {
    stripped = dir.file("stripped");
    debug_root = dir.file("debugroot");
    build_id = readelf_build_id(FIXTURE_C_PIE);
    std::filesystem::create_directories(debug_root);
    run_ok("strip --strip-all -o '" + stripped + "' '" + FIXTURE_C_PIE + "'");
    const auto sym = test::nm_find(test::nm_functions(FIXTURE_C_PIE), "hpd_static_helper");
    helper_offset = test::file_offset_of(test::load_segments(FIXTURE_C_PIE), sym->address + 1);
  }
  static void run_ok(const std::string& cmd) { ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd; }
  std::string build_id_debug_path() const {
    return debug_root + "/.build-id/" + build_id.substr(0, 2) + "/" + build_id.substr(2) + ".debug";
  }
  void install_build_id_debug() const {
    std::filesystem::create_directories(std::filesystem::path(build_id_debug_path()).parent_path());
    run_ok("objcopy --only-keep-debug '" + std::string(FIXTURE_C_PIE) + "' '" + build_id_debug_path() + "'");
  }
};

TEST(Symbolizer, StrippedBinaryWithoutDebugFile) {
  StrippedFixture f;
  SymbolizerOptions options;
  options.debug_root = f.debug_root;
  Symbolizer symbolizer(options);
  const ModuleInfo& info = symbolizer.module_info(test::module_ref(f.stripped));
  ASSERT_TRUE(info.readable);
  EXPECT_FALSE(info.has_debug_info);
  EXPECT_TRUE(info.debug_path.empty());
  const Location loc = resolve_one(symbolizer, test::module_ref(f.stripped), f.helper_offset);
  EXPECT_NE(loc.symbol, "hpd_static_helper");  // only .dynsym is left
}

TEST(Symbolizer, DebugFileFoundByBuildId) {
  StrippedFixture f;
  f.install_build_id_debug();
  SymbolizerOptions options;
  options.debug_root = f.debug_root;
  Symbolizer symbolizer(options);
  const ModuleInfo& info = symbolizer.module_info(test::module_ref(f.stripped, f.build_id));
  ASSERT_TRUE(info.readable) << info.error;
  EXPECT_EQ(info.opened_path, f.stripped);
  EXPECT_EQ(info.debug_path, f.build_id_debug_path());
  EXPECT_TRUE(info.has_debug_info);
  EXPECT_TRUE(info.error.empty());
  const Location loc = resolve_one(symbolizer, test::module_ref(f.stripped, f.build_id), f.helper_offset);
  EXPECT_EQ(loc.symbol, "hpd_static_helper");
}

TEST(Symbolizer, DebugFileFoundByDebugLink) {
  for (const std::string sub : {"", ".debug/"}) {
    SCOPED_TRACE(sub);
    StrippedFixture f;
    std::filesystem::create_directories(f.dir.file(sub.empty() ? "." : sub));
    const std::string debug = f.dir.file(sub + "fixture.debug");
    StrippedFixture::run_ok("objcopy --only-keep-debug '" + std::string(FIXTURE_C_PIE) + "' '" + debug + "'");
    // The link's CRC is computed from the file named; objcopy needs it next to the binary.
    StrippedFixture::run_ok("cd '" + f.dir.path() + "' && objcopy --add-gnu-debuglink='" + debug + "' '" +
                            f.stripped + "'");
    SymbolizerOptions options;
    options.debug_root = f.debug_root;  // empty: no build-id path
    Symbolizer symbolizer(options);
    const ModuleInfo& info = symbolizer.module_info(test::module_ref(f.stripped));
    ASSERT_TRUE(info.readable) << info.error;
    EXPECT_EQ(info.debug_path, debug);
    EXPECT_EQ(resolve_one(symbolizer, test::module_ref(f.stripped), f.helper_offset).symbol,
              "hpd_static_helper");
  }
}

TEST(Symbolizer, BuildIdMismatchIsReportedAndSymbolsStillUsed) {
  Symbolizer symbolizer;
  const ModuleRef ref = test::module_ref(FIXTURE_C_PIE, "00112233445566778899aabbccddeeff00112233");
  const ModuleInfo& info = symbolizer.module_info(ref);
  ASSERT_TRUE(info.readable);
  EXPECT_TRUE(info.build_id_mismatch);
  EXPECT_NE(info.error.find("build-id mismatch"), std::string::npos) << info.error;
  EXPECT_NE(info.error.find("00112233445566778899aabbccddeeff00112233"), std::string::npos);
  const auto sym = test::nm_find(test::nm_functions(FIXTURE_C_PIE), "hpd_leaf");
  EXPECT_EQ(
      resolve_one(symbolizer, ref, test::file_offset_of(test::load_segments(FIXTURE_C_PIE), sym->address))
          .symbol,
      "hpd_leaf");
}

// A matching debug file beats a binary that was replaced by a different build.
TEST(Symbolizer, MatchingDebugFileBeatsMismatchingBinary) {
  StrippedFixture f;
  f.install_build_id_debug();
  SymbolizerOptions options;
  options.debug_root = f.debug_root;
  Symbolizer symbolizer(options);
  const ModuleRef ref = test::module_ref(FIXTURE_C_NOPIE, f.build_id);  // the path now holds another build
  const ModuleInfo& info = symbolizer.module_info(ref);
  ASSERT_TRUE(info.readable);
  EXPECT_FALSE(info.build_id_mismatch);
  EXPECT_EQ(info.opened_path, f.build_id_debug_path());
  EXPECT_EQ(info.build_id, f.build_id);
  EXPECT_EQ(info.image_base, 0u);  // the PIE's program headers, kept in the debug file
  EXPECT_EQ(resolve_one(symbolizer, ref, f.helper_offset).symbol, "hpd_static_helper");
}

TEST(Symbolizer, BadFilesGiveErrorsNotCrashes) {
  test::TempDir dir;
  const std::string elf = test::read_file(FIXTURE_C_PIE);
  ASSERT_GT(elf.size(), 8192u);
  test::write_file(dir.file("empty"), "");
  test::write_file(dir.file("text"), "#!/bin/sh\necho this is not an ELF file\n");
  test::write_file(dir.file("trunc64"), elf.substr(0, 64));
  test::write_file(dir.file("trunc1k"), elf.substr(0, 1000));
  test::write_file(dir.file("trunchalf"), elf.substr(0, elf.size() / 2));
  std::string garbage = elf;
  for (size_t i = 64; i < garbage.size(); i += 7) garbage[i] = static_cast<char>(garbage[i] * 31 + 17);
  test::write_file(dir.file("garbage"), garbage);
  std::filesystem::create_directories(dir.file("a_directory"));

  Symbolizer symbolizer;
  const std::vector<uint64_t> offsets{0, 0x1000, 0x1234, UINT64_MAX};
  for (const char* name : {"missing", "empty", "text", "trunc64", "a_directory"}) {
    SCOPED_TRACE(name);
    const ModuleRef ref = test::module_ref(dir.file(name));
    const ModuleInfo& info = symbolizer.module_info(ref);
    EXPECT_FALSE(info.readable);
    EXPECT_NE(info.error.find(dir.file(name)), std::string::npos) << info.error;
    const auto locs = symbolizer.resolve(ref, offsets);
    ASSERT_EQ(locs.size(), offsets.size());
    for (size_t i = 0; i < locs.size(); ++i) {
      EXPECT_FALSE(locs[i].found);
      EXPECT_EQ(locs[i].rel_address, offsets[i]);  // unreadable: the file offset
    }
  }
  // Damaged but with intact headers: whatever is readable is used; never a crash.
  for (const char* name : {"trunc1k", "trunchalf", "garbage"}) {
    SCOPED_TRACE(name);
    const ModuleRef ref = test::module_ref(dir.file(name));
    const ModuleInfo& info = symbolizer.module_info(ref);
    EXPECT_TRUE(info.readable || !info.error.empty());
    EXPECT_EQ(symbolizer.resolve(ref, offsets).size(), offsets.size());
  }
  EXPECT_FALSE(symbolizer.module_info(test::module_ref("")).readable);
}

// /proc/PID/map_files reaches a mapped file even when its path no longer leads to it.
TEST(Symbolizer, ProcMapFilesForMovedBinaries) {
  const auto probe = reinterpret_cast<uint64_t>(&hpd_test_probe_function);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  uint64_t start = 0, end = 0, offset = 0;
  std::string path;
  while (std::getline(maps, line)) {
    std::istringstream f(line);
    std::string range, perms, off, dev, inode;
    f >> range >> perms >> off >> dev >> inode >> path;
    start = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    offset = std::stoull(off, nullptr, 16);
    if (probe >= start && probe < end) break;
    start = end = 0;
  }
  ASSERT_NE(end, 0u);
  ModuleRef ref;
  ref.path = "/nonexistent/was/moved/symbolizer_test";
  ref.pid = getpid();
  ref.map_start = start;
  ref.map_end = end;
  Symbolizer symbolizer;
  const ModuleInfo& info = symbolizer.module_info(ref);
  ASSERT_TRUE(info.readable) << info.error;
  EXPECT_EQ(info.opened_path.rfind("/proc/", 0), 0u) << info.opened_path;
  const Location loc = resolve_one(symbolizer, ref, probe - start + offset);
  EXPECT_EQ(loc.symbol, "hpd_test_probe_function");
  EXPECT_EQ(hpd_test_probe_function(1), 6);
}

// The libc this test runs on (Debian's, its debug file from libc6-dbg when installed), as mapped.
std::string own_libc() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.find('/');
    if (slash != std::string::npos && line.find("/libc.so") != std::string::npos) return line.substr(slash);
  }
  return {};
}

// glibc's exported functions carry ELF versions in their symbol names (clock_nanosleep@@GLIBC_2.17,
// __libc_start_main@GLIBC_2.2.5): shown without them, the version kept for the native symbol.
TEST(Symbolizer, GlibcNamesShownWithoutVersions) {
  const std::string libc = own_libc();
  ASSERT_FALSE(libc.empty());
  Symbolizer symbolizer;
  const ModuleRef ref = test::module_ref(libc);
  ASSERT_TRUE(symbolizer.module_info(ref).readable) << symbolizer.module_info(ref).error;
  size_t versioned = 0, with_version = 0;
  std::vector<uint64_t> vaddrs;
  std::vector<std::string> plain_names;
  for (const auto& sym : test::nm_functions(libc, false, true)) {
    const size_t at = sym.name.find('@');
    if (at == std::string::npos) continue;
    ++versioned;
    vaddrs.push_back(sym.address);
    plain_names.push_back(sym.name.substr(0, at));
  }
  ASSERT_GT(versioned, 500u);  // glibc exports well over a thousand versioned functions
  const std::vector<Location> locs = symbolizer.resolve_vaddrs(ref, vaddrs);
  for (size_t i = 0; i < locs.size(); ++i) {
    SCOPED_TRACE(plain_names[i]);
    ASSERT_TRUE(locs[i].found);
    EXPECT_EQ(locs[i].symbol.find('@'), std::string::npos) << locs[i].symbol;
    for (const SourceFrame& f : locs[i].frames)
      EXPECT_EQ(f.function.find('@'), std::string::npos) << f.function;
    if (!locs[i].symbol_version.empty()) {
      ++with_version;
      EXPECT_EQ(locs[i].symbol_version[0], '@');
      EXPECT_NE(locs[i].symbol_version.find("GLIBC_"), std::string::npos) << locs[i].symbol_version;
    }
  }
  EXPECT_GT(with_version, 0u);  // the versioned names were the ones chosen, and their version kept
  // The two of the issue, by name.
  for (const char* name : {"clock_nanosleep", "__libc_start_main"}) {
    SCOPED_TRACE(name);
    const auto it = std::find(plain_names.begin(), plain_names.end(), name);
    ASSERT_NE(it, plain_names.end());
    const Location& loc = locs[static_cast<size_t>(it - plain_names.begin())];
    EXPECT_EQ(loc.symbol, name);
    EXPECT_EQ(loc.frames.front().function, name);
  }
}

TEST(Symbolizer, LruCacheHonoursItsCap) {
  const auto pie_sym = test::nm_find(test::nm_functions(FIXTURE_C_PIE), "hpd_leaf");
  const uint64_t pie_offset = test::file_offset_of(test::load_segments(FIXTURE_C_PIE), pie_sym->address);
  {
    Symbolizer unlimited;
    for (const char* p : {FIXTURE_C_PIE, FIXTURE_C_NOPIE, FIXTURE_CPP})
      unlimited.module_info(test::module_ref(p));
    EXPECT_EQ(unlimited.cached_modules(), 3u);
    const size_t symbols = unlimited.module_info(test::module_ref(FIXTURE_CPP)).symbol_count;
    EXPECT_GT(symbols, 5u);
    // At least the 32-byte symbol entries plus their names.
    EXPECT_GT(unlimited.cache_bytes_used(), symbols * 32);
    EXPECT_LT(unlimited.cache_bytes_used(), 4u << 20);
  }
  SymbolizerOptions options;
  options.cache_bytes = 1;
  Symbolizer tiny(options);
  EXPECT_EQ(resolve_one(tiny, test::module_ref(FIXTURE_C_PIE), pie_offset).symbol, "hpd_leaf");
  for (const char* p : {FIXTURE_C_NOPIE, FIXTURE_CPP}) tiny.module_info(test::module_ref(p));
  EXPECT_EQ(tiny.cached_modules(), 1u);
  // Evicted modules are reloaded on demand, with the same answers and the same facts.
  EXPECT_EQ(resolve_one(tiny, test::module_ref(FIXTURE_C_PIE), pie_offset).symbol, "hpd_leaf");
  EXPECT_TRUE(tiny.module_info(test::module_ref(FIXTURE_CPP)).readable);
  EXPECT_EQ(tiny.cached_modules(), 1u);
}

// llvm-symbolizer's tie rules on a hand-made table.
TEST(SymbolTable, LlvmTieBreakingAndSizelessSymbols) {
  SymbolTable t;
  t.add(0x1000, 0x10, "small_first", 0x2000);
  t.add(0x1000, 0x40, "large", 0x2000);
  t.add(0x1000, 0x40, "large_alias_later", 0x2000);
  t.add(0x1000, 0x0, "sizeless_same_address", 0x2000);
  t.add(0x1100, 0x0, "sizeless", 0x2000);
  t.add(0x1180, 0x8, "sized", 0x2000);
  t.add(0x1800, 0x0, "sizeless_last", 0x1900);
  t.finalize();
  ASSERT_EQ(t.size(), 4u);
  auto name_at = [&](uint64_t a) -> std::string {
    const auto* s = t.find(a);
    return s ? std::string(t.name(*s)) : "??";
  };
  EXPECT_EQ(name_at(0x1000), "large_alias_later");
  EXPECT_EQ(name_at(0x103f), "large_alias_later");
  EXPECT_EQ(name_at(0x1040), "??");  // past the end; nothing sizeless to extend
  EXPECT_EQ(name_at(0x0fff), "??");
  EXPECT_EQ(name_at(0x1100), "sizeless");
  EXPECT_EQ(name_at(0x117f), "sizeless");  // extends to the next symbol
  EXPECT_EQ(name_at(0x1187), "sized");
  EXPECT_EQ(name_at(0x1188), "??");
  EXPECT_EQ(name_at(0x18ff), "sizeless_last");  // the last extends to its section's end
  EXPECT_EQ(name_at(0x1900), "??");
}

TEST(SegmentMap, FileOffsetsToVaddrs) {
  // A classic non-PIE layout: r-- at 0x400000, r-x at 0x401000 from offset 0x1000, rw- later.
  SegmentMap m({{0, 0x500, 0x400000, 0x500, false},
                {0x1000, 0x2000, 0x401000, 0x2000, true},
                {0x3e10, 0x200, 0x404e10, 0x400, false}});
  EXPECT_EQ(m.image_base(), 0x400000u);
  EXPECT_EQ(m.vaddr_of(0x1234), 0x401234u);
  EXPECT_EQ(m.vaddr_of(0x100), 0x400100u);
  EXPECT_EQ(m.vaddr_of(0x3e20), 0x404e20u);
  EXPECT_EQ(m.vaddr_of(0x9000), 0x409000u);  // outside: extrapolated from the executable segment
  EXPECT_EQ(SegmentMap({{0x1000, 0x100, 0x1123, 0x100, true}}).image_base(), 0x1000u);
}

}  // namespace
}  // namespace hpd

namespace hpd {
namespace {

// This process's vDSO as it is mapped (the image RawModule::image carries).
std::vector<uint8_t> own_vdso_image() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("[vdso]") == std::string::npos) continue;
    const uint64_t start = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    const uint64_t end = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
    return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(start),
                                reinterpret_cast<const uint8_t*>(end));
  }
  return {};
}

// The vDSO read from its image: clock_gettime's address names it; a build-id that does not match,
// a damaged or cut image, and a [vdso] with no image give reasons, never a crash.
TEST(Symbolizer, VdsoFromItsImageAndBadImages) {
  const std::vector<uint8_t> image = own_vdso_image();
  ASSERT_GT(image.size(), 4096u);
  ModuleRef ref;
  ref.path = "[vdso]";
  ref.image = image;
  Symbolizer symbolizer;
  const ModuleInfo& info = symbolizer.module_info(ref);
  ASSERT_TRUE(info.readable) << info.error;
  EXPECT_EQ(info.build_id.size(), 40u);
  EXPECT_GE(info.symbol_count, 4u);  // clock_gettime, gettimeofday, time, getcpu, ...
  // Where clock_gettime lives in this process's vDSO, as the dynamic linker found it.
  uint64_t vdso_start = 0;
  {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) {
      if (line.find("[vdso]") != std::string::npos)
        vdso_start = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    }
  }
  void* handle = ::dlopen("linux-vdso.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(handle, nullptr) << ::dlerror();
  const auto fn = reinterpret_cast<uint64_t>(::dlsym(handle, "__vdso_clock_gettime"));
  ASSERT_NE(fn, 0u);
  const Location loc = resolve_one(symbolizer, ref, fn - vdso_start + 4);
  ASSERT_TRUE(loc.found);
  EXPECT_TRUE(loc.symbol == "__vdso_clock_gettime" || loc.symbol == "clock_gettime") << loc.symbol;

  ModuleRef wrong = ref;
  wrong.build_id = std::string(40, 'a');
  const ModuleInfo& wrong_info = symbolizer.module_info(wrong);
  EXPECT_FALSE(wrong_info.readable);
  EXPECT_NE(wrong_info.error.find("is not the recorded"), std::string::npos) << wrong_info.error;

  ModuleRef none;
  none.path = "[vdso]";
  none.pid = 1;  // not a reason to look anywhere: the vDSO has no file
  const ModuleInfo& none_info = symbolizer.module_info(none);
  EXPECT_FALSE(none_info.readable);
  EXPECT_NE(none_info.error.find("not read while the process lived"), std::string::npos) << none_info.error;

  // Cut and damaged images: an error or a smaller answer, never a crash.
  for (size_t cut : {size_t{0}, size_t{16}, size_t{64}, size_t{700}, image.size() / 2, image.size() - 1}) {
    SCOPED_TRACE(cut);
    std::vector<uint8_t> part(image.begin(), image.begin() + static_cast<std::ptrdiff_t>(cut));
    if (part.empty()) part.push_back(0);  // an empty span means "no image"
    Symbolizer s;
    ModuleRef r;
    r.path = "[vdso]";
    r.image = part;
    const ModuleInfo& i = s.module_info(r);
    if (!i.readable) {
      EXPECT_FALSE(i.error.empty());
    }
    (void)resolve_one(s, r, fn - vdso_start);
  }
  std::vector<uint8_t> damaged = image;
  std::mt19937 rng(7);
  for (size_t k = 64; k < damaged.size(); k += 37) damaged[k] = static_cast<uint8_t>(rng());
  Symbolizer s;
  ModuleRef r;
  r.path = "[vdso]";
  r.image = damaged;
  (void)s.module_info(r);
  (void)resolve_one(s, r, fn - vdso_start);
}

}  // namespace
}  // namespace hpd
