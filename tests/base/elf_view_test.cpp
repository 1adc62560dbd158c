// ElfView (hpd/base/elf.h) on a program and a library built here with gcc, each answer compared
// with what readelf prints for the same file: sections by name with their headers and bytes, the
// PT_LOAD segments and file offset <-> address through them, PT_INTERP, DT_NEEDED and DT_RUNPATH;
// the build-id tree path; and bad input (not ELF) giving empty answers.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "hpd/base/elf.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace hpd {
namespace {

std::string readelf(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"readelf", "-W"};
  argv.insert(argv.end(), args.begin(), args.end());
  const test::RunResult r = test::run(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

uint64_t hex_value(const std::string& text) {
  return std::stoull(text, nullptr, 16);
}

class ElfViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_.file("lib.c")) << "int lib_value(int x) { return x * 3; }\n";
    std::ofstream(dir_.file("prog.c")) << "#include <stdio.h>\n"
                                          "int lib_value(int);\n"
                                          "const char message[] = \"hello from the data\";\n"
                                          "int main(int argc, char** argv) {\n"
                                          "  printf(\"%s %d\\n\", message, lib_value(argc));\n"
                                          "  return 0;\n"
                                          "}\n";
    run_ok({"gcc", "-O2", "-g", "-shared", "-fPIC", dir_.file("lib.c"), "-o", dir_.file("libview.so")});
    run_ok({"gcc", "-O2", "-g", "-fPIE", "-pie", dir_.file("prog.c"), "-o", dir_.file("prog"),
            "-L" + dir_.path(), "-lview", "-Wl,-rpath,/opt/a:$ORIGIN/lib", "-Wl,--enable-new-dtags"});
  }

  static void run_ok(const std::vector<std::string>& argv) {
    const test::RunResult r = test::run(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  testing::TempDir dir_;
};

TEST_F(ElfViewTest, SectionsByNameMatchReadelf) {
  const std::string prog = dir_.file("prog");
  const OpenedElf file = OpenedElf::open(prog);
  ASSERT_TRUE(file) << file.error();
  const ElfView elf = file.view();
  ASSERT_TRUE(elf.has_section_names());
  // "[Nr] Name Type Address Off Size": every named section readelf lists has the same header here.
  static const std::regex kLine(R"(\]\s+(\S+)\s+(\S+)\s+([0-9a-f]{16})\s+([0-9a-f]+)\s+([0-9a-f]+))");
  std::istringstream lines(readelf({"-S", prog}));
  size_t compared = 0;
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, kLine) || m[1] == "NULL") continue;
    const ElfSection s = elf.section(m[1].str());
    ASSERT_TRUE(s) << m[1];
    EXPECT_STREQ(s.name, m[1].str().c_str());
    EXPECT_EQ(s.header.sh_addr, hex_value(m[3])) << m[1];
    EXPECT_EQ(s.header.sh_offset, hex_value(m[4])) << m[1];
    EXPECT_EQ(s.header.sh_size, hex_value(m[5])) << m[1];
    EXPECT_EQ(s.has_bytes(), m[2] != "NOBITS") << m[1];
    ++compared;
  }
  EXPECT_GT(compared, 20u);
  EXPECT_EQ(elf.sections().size(), compared);
  EXPECT_FALSE(elf.section(".no_such_section"));

  // .rodata holds the string the program prints, and .bss has no bytes in the file.
  const std::span<const uint8_t> rodata = elf.section(".rodata").bytes();
  const std::string text(rodata.begin(), rodata.end());
  EXPECT_NE(text.find("hello from the data"), std::string::npos);
  EXPECT_EQ(elf.section(".bss").data(), nullptr);
  EXPECT_TRUE(elf.section(".bss").bytes().empty());
}

TEST_F(ElfViewTest, LoadSegmentsAndOffsetsMatchReadelf) {
  const std::string prog = dir_.file("prog");
  const OpenedElf file = OpenedElf::open(prog);
  ASSERT_TRUE(file) << file.error();
  const std::vector<ElfSegment> segments = file.view().load_segments();
  // "LOAD Offset VirtAddr PhysAddr FileSiz MemSiz Flg Align"
  static const std::regex kLoad(
      R"(LOAD\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x[0-9a-f]+\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+([RWE ]+?)\s+0x)");
  std::istringstream lines(readelf({"-l", prog}));
  size_t i = 0;
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, kLoad)) continue;
    ASSERT_LT(i, segments.size());
    EXPECT_EQ(segments[i].offset, hex_value(m[1]));
    EXPECT_EQ(segments[i].vaddr, hex_value(m[2]));
    EXPECT_EQ(segments[i].filesz, hex_value(m[3]));
    EXPECT_EQ(segments[i].memsz, hex_value(m[4]));
    EXPECT_EQ(segments[i].executable, m[5].str().find('E') != std::string::npos);
    ++i;
  }
  ASSERT_EQ(i, segments.size());
  ASSERT_GE(segments.size(), 2u);

  // main's address (from its symbol) and its file offset (readelf's section table) agree both ways.
  const ElfSection text = file.view().section(".text");
  ASSERT_TRUE(text);
  const uint64_t inside = text.header.sh_addr + 16;
  EXPECT_EQ(offset_of_vaddr(segments, inside), text.header.sh_offset + 16);
  EXPECT_EQ(vaddr_of_offset(segments, text.header.sh_offset + 16), inside);
  // An address in .bss (in memory, not in the file) has no file offset; an offset past the file none.
  const ElfSection bss = file.view().section(".bss");
  ASSERT_TRUE(bss);
  EXPECT_EQ(offset_of_vaddr(segments, bss.header.sh_addr + bss.header.sh_size - 1), std::nullopt);
  EXPECT_EQ(vaddr_of_offset(segments, uint64_t{1} << 40), std::nullopt);
}

TEST_F(ElfViewTest, InterpreterAndDynamicDependenciesMatchReadelf) {
  const std::string prog = dir_.file("prog");
  const OpenedElf file = OpenedElf::open(prog);
  ASSERT_TRUE(file) << file.error();
  std::smatch m;
  const std::string program_headers = readelf({"-l", prog});
  ASSERT_TRUE(std::regex_search(program_headers, m, std::regex(R"(interpreter: ([^\]]+)\])")));
  EXPECT_EQ(file.view().interpreter(), m[1].str());
  EXPECT_TRUE(file.view().has_program_header(PT_DYNAMIC));

  const ElfDynamic dynamic = file.view().dynamic();
  std::vector<std::string> needed;
  const std::string dyn = readelf({"-d", prog});
  static const std::regex kNeeded(R"(\(NEEDED\)\s+Shared library: \[([^\]]+)\])");
  for (auto it = std::sregex_iterator(dyn.begin(), dyn.end(), kNeeded); it != std::sregex_iterator(); ++it)
    needed.push_back((*it)[1].str());
  EXPECT_EQ(dynamic.needed, needed);
  ASSERT_GE(needed.size(), 2u);  // libview.so and libc
  EXPECT_EQ(dynamic.needed.front(), "libview.so");
  EXPECT_EQ(dynamic.search_paths, std::vector<std::string>{"/opt/a:$ORIGIN/lib"});

  // The library has no interpreter.
  const OpenedElf lib = OpenedElf::open(dir_.file("libview.so"));
  ASSERT_TRUE(lib) << lib.error();
  EXPECT_EQ(lib.view().interpreter(), "");
  EXPECT_FALSE(lib.view().has_program_header(PT_INTERP));
}

TEST(ElfBuildIdPath, SplitsTheFirstByteOff) {
  EXPECT_EQ(build_id_path("/usr/lib/debug", "0123abcd"), "/usr/lib/debug/.build-id/01/23abcd.debug");
  EXPECT_EQ(build_id_path("/d", "0123abcd", ""), "/d/.build-id/01/23abcd");
  EXPECT_EQ(build_id_path("/d", "01"), "");
  EXPECT_EQ(build_id_path("/d", ""), "");
}

TEST(ElfViewBadInput, NotElfGivesEmptyAnswers) {
  testing::TempDir dir;
  std::ofstream(dir.file("text")) << "not an ELF file at all, just some text\n";
  const OpenedElf file = OpenedElf::open(dir.file("text"));
  EXPECT_FALSE(file);
  const ElfView none(nullptr);
  EXPECT_FALSE(none.is_elf());
  EXPECT_EQ(none.header(), std::nullopt);
  EXPECT_TRUE(none.sections().empty());
  EXPECT_FALSE(none.section(".text"));
  EXPECT_TRUE(none.load_segments().empty());
  EXPECT_EQ(none.interpreter(), "");
  EXPECT_TRUE(none.dynamic().needed.empty());
}

}  // namespace
}  // namespace hpd
