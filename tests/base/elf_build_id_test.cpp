// GNU build-id notes read by hpd/base/elf.h from binaries built here with gcc, each compared with
// what `readelf -n` prints for the same file; and bad input (not ELF, truncated, missing).
#include "hpd/base/elf.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <regex>

#include "subprocess.h"
#include "temp_dir.h"

namespace hpd {
namespace {

// The build-id readelf -n prints for `path`, "" when it prints none.
std::string readelf_build_id(const std::string& path) {
  const test::RunResult r = test::run({"readelf", "-n", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  static const std::regex kLine("Build ID: ([0-9a-f]+)");
  return std::regex_search(r.out, m, kLine) ? m[1].str() : "";
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class ElfBuildId : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = dir_.file("prog.c");
    std::ofstream(source_)
        << "#include <stdio.h>\n"
           "int work(int n) { return n * VARIANT; }\n"
           "int main(int argc, char** argv) { printf(\"%d\\n\", work(argc)); return 0; }\n";
  }

  // Builds prog.c as `name` with -O2 -g and `flags`; the variant number changes the code, and so
  // any hash-based build-id.
  std::string build(const std::string& name, const std::vector<std::string>& flags, int variant = 1) {
    std::vector<std::string> argv = {"gcc",   "-O2", "-g",           "-DVARIANT=" + std::to_string(variant),
                                     source_, "-o",  dir_.file(name)};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const test::RunResult r = test::run(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return dir_.file(name);
  }

  // Every reader of the file agrees with readelf; returns what they read.
  std::string check_all_readers(const std::string& path, bool image_too = true) {
    const std::string expected = readelf_build_id(path);
    const OpenedElf elf = OpenedElf::open(path);
    EXPECT_TRUE(static_cast<bool>(elf)) << elf.error();
    EXPECT_EQ(elf_build_id(elf.get(), BuildIdSearch::kSegmentsFirst), expected) << path;
    EXPECT_EQ(elf_build_id(elf.get(), BuildIdSearch::kSectionsFirst), expected) << path;
    EXPECT_EQ(read_elf_build_id(elf.fd()), expected) << path;
    EXPECT_EQ(file_build_id(path), std::optional<std::string>(expected)) << path;
    if (image_too) {
      EXPECT_EQ(build_id_of_image(file_bytes(path)), expected) << path;
    }
    return expected;
  }

  testing::TempDir dir_;
  std::string source_;
};

TEST_F(ElfBuildId, Sha1OfPieAndNonPieExecutables) {
  const std::string pie = check_all_readers(build("pie", {"-pie", "-fPIE", "-Wl,--build-id=sha1"}));
  const std::string nopie =
      check_all_readers(build("nopie", {"-no-pie", "-fno-pie", "-Wl,--build-id=sha1"}, 2));
  EXPECT_EQ(pie.size(), 40u);  // 20 bytes of SHA-1
  EXPECT_EQ(nopie.size(), 40u);
  EXPECT_NE(pie, nopie);
}

TEST_F(ElfBuildId, Md5AndAnExplicitId) {
  EXPECT_EQ(check_all_readers(build("md5", {"-Wl,--build-id=md5"})).size(), 32u);
  // The linker writes the given bytes: a truth that does not depend on readelf.
  EXPECT_EQ(check_all_readers(build("explicit", {"-Wl,--build-id=0x00112233445566778899aabbccddeeff"})),
            "00112233445566778899aabbccddeeff");
}

TEST_F(ElfBuildId, NoneWhenLinkedWithout) {
  const std::string path = build("none", {"-Wl,--build-id=none"});
  EXPECT_EQ(check_all_readers(path), "");
  EXPECT_EQ(file_build_id(path), std::optional<std::string>(""));  // ELF, but no note: not nullopt
}

TEST_F(ElfBuildId, SharedLibraryStrippedFileAndSeparateDebugFile) {
  const std::string so = build("lib.so", {"-shared", "-fPIC", "-Wl,--build-id=sha1"});
  check_all_readers(so);
  const std::string exe = build("exe", {"-Wl,--build-id=sha1"}, 3);
  const std::string id = check_all_readers(exe);
  const std::string stripped = dir_.file("exe.stripped");
  ASSERT_EQ(test::run({"strip", "-o", stripped, exe}).exit_code, 0);
  EXPECT_EQ(check_all_readers(stripped), id);
  // objcopy --only-keep-debug: the note sections stay, the other sections become NOBITS.
  const std::string debug = dir_.file("exe.debug");
  ASSERT_EQ(test::run({"objcopy", "--only-keep-debug", exe, debug}).exit_code, 0);
  EXPECT_EQ(check_all_readers(debug, false), id);
}

TEST_F(ElfBuildId, BadInputGivesNoIdAndNoCrash) {
  const std::string text = dir_.file("text");
  std::ofstream(text) << "#!/bin/sh\necho not ELF\n";
  EXPECT_EQ(file_build_id(text), std::nullopt);
  const OpenedElf not_elf = OpenedElf::open(text);
  EXPECT_FALSE(static_cast<bool>(not_elf));
  EXPECT_NE(not_elf.error().find("not an ELF file"), std::string::npos) << not_elf.error();

  const OpenedElf missing = OpenedElf::open(dir_.file("missing"));
  EXPECT_FALSE(static_cast<bool>(missing));
  EXPECT_NE(missing.error().find("cannot open"), std::string::npos) << missing.error();
  EXPECT_EQ(file_build_id(dir_.file("missing")), std::nullopt);

  // The first 100 bytes of a real executable: an ELF header whose tables are cut off.
  std::vector<uint8_t> head = file_bytes(build("whole", {"-Wl,--build-id=sha1"}));
  head.resize(100);
  const std::string cut = dir_.file("cut");
  std::ofstream(cut, std::ios::binary).write(reinterpret_cast<const char*>(head.data()), head.size());
  EXPECT_EQ(file_build_id(cut).value_or(""), "");
  EXPECT_EQ(build_id_of_image(head), "");
  EXPECT_EQ(build_id_of_image({}), "");
  EXPECT_EQ(elf_build_id(nullptr, BuildIdSearch::kSectionsFirst), "");
  EXPECT_EQ(build_id_in_note_data(nullptr), "");
}

TEST(RawNotes, MalformedNotesAreRejected) {
  // namesz 4 "GNU", descsz 2, type 3 (NT_GNU_BUILD_ID), desc ab cd (padded).
  const std::vector<uint8_t> good = {4, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 'G', 'N', 'U', 0, 0xab, 0xcd, 0, 0};
  EXPECT_EQ(build_id_from_raw_notes(good), "abcd");
  std::vector<uint8_t> huge_desc = good;
  huge_desc[4] = 0xff;  // descsz past the end
  EXPECT_EQ(build_id_from_raw_notes(huge_desc), "");
  std::vector<uint8_t> other_type = good;
  other_type[8] = 1;
  EXPECT_EQ(build_id_from_raw_notes(other_type), "");
  std::vector<uint8_t> other_owner = good;
  other_owner[12] = 'X';
  EXPECT_EQ(build_id_from_raw_notes(other_owner), "");
  // A note of another kind first, then the build-id.
  std::vector<uint8_t> two = {4, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 'G', 'N', 'U', 0, 1, 2, 3, 4};
  two.insert(two.end(), good.begin(), good.end());
  EXPECT_EQ(build_id_from_raw_notes(two), "abcd");
}

}  // namespace
}  // namespace hpd
