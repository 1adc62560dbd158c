// Offline MIP decoding of .mipraw files dumped by the fixtures at exit: exact counts, order, coverage and
// addresses against the symbol table (gcc + GNU ld, clang++ + lld, a clang DSO), .mipmap files, merging, bad
// files.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mip_internal.h"
#include "mip_test_support.h"

namespace hpd::mip {
namespace {

using test::fixture;
using test::TempDir;

// Runs a calls fixture to its end (one line, then EOF) and returns the .mipraw it dumped.
std::string run_calls_fixture(const std::string& binary, const TempDir& dir, const std::string& name) {
  test::Child child(fixture(binary), {"LLVM_MIP_PROFILE_FILENAME=" + dir.path() + "/" + name});
  EXPECT_TRUE(child.wait_for_line("ready"));
  child.send_line();
  EXPECT_TRUE(child.wait_for_line("ready2"));
  child.close_stdin();
  EXPECT_EQ(child.wait_exit(), 0);
  return dir.path() + "/" + name;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const MipError& e) {
    return e.code();
  }
  ADD_FAILURE() << "no MipError thrown";
  return ErrorCode::kIo;
}

class MipOffline : public ::testing::TestWithParam<const char*> {};

TEST_P(MipOffline, DumpedRawDecodesWithExactCounts) {
  TempDir dir;
  const std::string binary = GetParam();
  const std::string raw = run_calls_fixture(binary, dir, "run.mipraw");
  const Module m = decode_file(raw, fixture(binary));
  EXPECT_EQ(test::check_calls_fixture(m, true), "");
  EXPECT_TRUE(m.addresses_known);
  EXPECT_EQ(test::check_against_symbols(m, fixture(binary), false), "");
  // The dump is exactly the section: its size is the ELF section's.
  EXPECT_EQ(m.raw_section_size, read_file(raw).size());
  EXPECT_EQ(load_map(fixture(binary)).raw_section_size, m.raw_section_size);
}

TEST_P(MipOffline, MergeAddsCountsAndOrder) {
  TempDir dir;
  const std::string binary = GetParam();
  const std::vector<std::string> raws = {run_calls_fixture(binary, dir, "a.mipraw"),
                                         run_calls_fixture(binary, dir, "b.mipraw")};
  const Module m = merge_files(raws, fixture(binary));
  EXPECT_EQ(m.raw_profiles, 2u);
  for (const test::Expected& e : test::calls_fixture_expected(true)) {
    const Function* f = test::find_base(m, e.name);
    ASSERT_NE(f, nullptr) << e.name;
    EXPECT_EQ(f->call_count, 2 * e.calls) << e.name;
    EXPECT_EQ(f->order_sum, 2 * e.order) << e.name;
    EXPECT_EQ(f->profiles_called, e.calls ? 2u : 0u) << e.name;
    if (e.order) {
      EXPECT_DOUBLE_EQ(f->first_call(), static_cast<double>(e.order)) << e.name;
    }
  }
  ASSERT_EQ(m.never_called().size(), 1u);
  EXPECT_EQ(m.never_called()[0]->demangled.substr(0, 12), "never_called");
}

INSTANTIATE_TEST_SUITE_P(Compilers, MipOffline, ::testing::Values("mip_calls_gcc", "mip_calls_clang"));

TEST(MipOffline, ClangNamesAreDemangled) {
  TempDir dir;
  const Module m =
      decode_file(run_calls_fixture("mip_calls_clang", dir, "c.mipraw"), fixture("mip_calls_clang"));
  const Function* leaf = m.find("leaf(int)");
  ASSERT_NE(leaf, nullptr);
  EXPECT_EQ(leaf->name, "_Z4leafi");
  EXPECT_EQ(leaf->call_count, 32000u);
}

TEST(MipOffline, MipmapFileGivesTheSameCountsWithoutAddresses) {
  TempDir dir;
  const std::string raw = run_calls_fixture("mip_calls_gcc", dir, "run.mipraw");
  const Module from_elf = decode_file(raw, fixture("mip_calls_gcc"));
  const Module from_map = decode_file(raw, fixture("mip_calls_gcc.mipmap"));
  EXPECT_EQ(test::check_calls_fixture(from_map, true), "");
  EXPECT_FALSE(from_map.addresses_known);
  ASSERT_EQ(from_map.functions.size(), from_elf.functions.size());
  for (size_t i = 0; i < from_map.functions.size(); i++) {
    EXPECT_EQ(from_map.functions[i].section_offset, from_elf.functions[i].section_offset);
    EXPECT_EQ(from_map.functions[i].call_count, from_elf.functions[i].call_count);
  }
  // With GNU ld the map header's RawSectionOffset is the section's link-time address.
  EXPECT_EQ(static_cast<uint64_t>(load_map(fixture("mip_calls_gcc.mipmap")).header.raw_section_offset),
            from_elf.raw_section_address);
}

TEST(MipOffline, SharedLibraryAndItsExecutableDumpSeparately) {
  TempDir dir;
  test::Child child(fixture("mip_dso_main"), {"LLVM_MIP_PROFILE_FILENAME=" + dir.path() + "/%h.mipraw"});
  ASSERT_TRUE(child.wait_for_line("ready"));
  child.close_stdin();
  ASSERT_EQ(child.wait_exit(), 0);
  const auto files = dir.entries();
  ASSERT_EQ(files.size(), 2u);
  for (const std::string& binary : {fixture("libmipdso.so"), fixture("mip_dso_main")}) {
    char name[32];
    std::snprintf(name, sizeof name, "/%04x.mipraw", load_map(binary).header.module_hash & 0xFFFF);
    const Module m = decode_file(dir.path() + name, binary);
    EXPECT_EQ(test::check_against_symbols(m, binary, false), "") << binary;
    if (binary.ends_with(".so")) {
      EXPECT_EQ(m.find("dso_work")->call_count, 3u);
      EXPECT_EQ(m.find("dso_leaf")->call_count, 3000u);
      EXPECT_EQ(m.find("dso_work")->order_sum, 1u);  // each link unit has its own clock
      EXPECT_EQ(m.find("dso_leaf")->order_sum, 2u);
      EXPECT_FALSE(m.find("dso_never")->called());
    } else {
      EXPECT_EQ(m.find("main")->call_count, 1u);
      EXPECT_EQ(m.find("main_helper")->call_count, 7u);
      EXPECT_EQ(m.find("main_helper")->order_sum, 2u);
      EXPECT_FALSE(m.find("main_never")->called());
    }
  }
}

TEST(MipOfflineErrors, BadFilesGiveClearErrors) {
  TempDir dir;
  const std::string raw = run_calls_fixture("mip_calls_gcc", dir, "run.mipraw");
  const auto bytes = read_file(raw);

  // Another build's raw data.
  EXPECT_EQ(code_of([&] { decode_file(raw, fixture("mip_calls_clang")); }), ErrorCode::kHashMismatch);
  try {
    decode_file(raw, fixture("mip_calls_clang"));
  } catch (const MipError& e) {
    EXPECT_NE(std::string(e.what()).find("hash mismatch"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(raw), std::string::npos) << e.what();
  }

  auto cut = bytes;
  cut.resize(bytes.size() - 3);
  write_file(dir.path() + "/cut.mipraw", cut);
  EXPECT_EQ(code_of([&] { decode_file(dir.path() + "/cut.mipraw", fixture("mip_calls_gcc")); }),
            ErrorCode::kTruncated);

  auto magic = bytes;
  magic[1] = 'X';
  write_file(dir.path() + "/magic.mipraw", magic);
  EXPECT_EQ(code_of([&] { decode_file(dir.path() + "/magic.mipraw", fixture("mip_calls_gcc")); }),
            ErrorCode::kBadMagic);

  auto future = bytes;
  future[4] = 9;
  write_file(dir.path() + "/future.mipraw", future);
  EXPECT_EQ(code_of([&] { decode_file(dir.path() + "/future.mipraw", fixture("mip_calls_gcc")); }),
            ErrorCode::kUnsupportedVersion);

  EXPECT_EQ(code_of([&] { decode_file(dir.path() + "/missing.mipraw", fixture("mip_calls_gcc")); }),
            ErrorCode::kIo);
  EXPECT_EQ(code_of([&] { load_map("/proc/self/exe"); }), ErrorCode::kNoSection);  // an ELF file without MIP
  write_file(dir.path() + "/text.mipmap", {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '\n'});
  EXPECT_EQ(code_of([&] { load_map(dir.path() + "/text.mipmap"); }), ErrorCode::kBadMagic);
  // A raw file given as the map.
  EXPECT_EQ(code_of([&] { load_map(raw); }), ErrorCode::kWrongFileType);

  const std::vector<std::string> mixed = {raw, run_calls_fixture("mip_calls_clang", dir, "clang.mipraw")};
  EXPECT_EQ(code_of([&] { merge_files(mixed, fixture("mip_calls_gcc")); }), ErrorCode::kHashMismatch);
}

TEST(MipOffline, TableAndJsonOfARealDump) {
  TempDir dir;
  const Module m =
      decode_file(run_calls_fixture("mip_calls_gcc", dir, "run.mipraw"), fixture("mip_calls_gcc"));
  std::ostringstream table;
  print_table(m, table);
  std::istringstream lines(table.str());
  std::string line;
  std::vector<std::string> rows;
  while (std::getline(lines, line)) {
    EXPECT_LE(line.size(), 80u) << line;
    rows.push_back(line);
  }
  ASSERT_EQ(rows.size(), 4u + 7u);                     // module, summary, build-id, heads, 7 functions
  EXPECT_NE(rows[4].find("main"), std::string::npos);  // first call first
  EXPECT_NE(rows.back().find("never_called"), std::string::npos);  // never called last
  EXPECT_NE(rows.back().find("never"), std::string::npos);
  const auto j = nlohmann::json::parse(to_json(m));
  EXPECT_EQ(j["call_order"].size(), 6u);
  EXPECT_EQ(j["never_called"], nlohmann::json::array({"never_called"}));
  EXPECT_EQ(j["build_id"].get<std::string>().size(), 40u);  // the fixtures link with --build-id (SHA1)
}

}  // namespace
}  // namespace hpd::mip
