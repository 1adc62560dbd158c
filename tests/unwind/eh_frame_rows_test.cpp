// The one-pass .eh_frame reader (unwind/src/eh_frame_rows.h) against libdw, which the table compiler
// used for every row before it: on the libraries every profiled program maps (glibc, libstdc++, libgcc),
// the large ones of this machine (LLVM, OpenSSL's hand-written assembly), this project's own binaries,
// the unwind fixtures (gcc, clang, rustc) and the running kernel's vDSO, each module's table read both
// ways must be the same, row for row, with the same counts; and the one-pass reader must have read
// them (not fallen back to libdw). `cfi_compile_bench --sweep DIR` compares every ELF file of a directory
// the same way (by hand: docs/performance.md gives the sweeps of /usr/lib/x86_64-linux-gnu and /usr/bin).
#include <elf.h>
#include <gtest/gtest.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "hpd/unwind/cfi_table.h"

namespace {

using hpd::CfiRow;
using hpd::CfiTable;
using hpd::CfiTableOptions;

std::string fixture(const char* name) {
  return std::string(HPD_UNWIND_FIXTURE_DIR) + "/" + name;
}

std::string self_path() {
  return std::filesystem::read_symlink("/proc/self/exe").string();
}

// Both tables of one module; a failure names the module and the first rows that differ.
// `one_pass_read`: the one-pass table must have been read by the one-pass reader, not through libdw.
void expect_same_tables(const std::string& what, const CfiTable& one_pass, const CfiTable& libdw,
                        bool one_pass_read = true) {
  SCOPED_TRACE(what);
  if (one_pass_read) {
    EXPECT_EQ(one_pass.eh_frame_through_libdw, "") << "the one-pass reader fell back to libdw";
  }
  EXPECT_EQ(hpd::cfi_table_difference(one_pass, libdw), "") << "one pass against libdw";
}

// Compiles `path` both ways and compares; returns the rows compared.
size_t compare_file(const std::string& path) {
  CfiTableOptions libdw_options;
  libdw_options.eh_frame_through_libdw = true;
  const auto one_pass = hpd::compile_cfi_table({path}, "", CfiTableOptions{});
  const auto libdw = hpd::compile_cfi_table({path}, "", libdw_options);
  expect_same_tables(path, *one_pass, *libdw);
  return libdw->rows.size();
}

TEST(EhFrameRows, TablesAreLibdwsRowForRow) {
  const std::vector<std::string> files = {
      // What every profiled program maps, and glibc's signal trampoline (a signal row) and PLTs.
      "/lib/x86_64-linux-gnu/libc.so.6",
      "/lib64/ld-linux-x86-64.so.2",
      "/lib/x86_64-linux-gnu/libm.so.6",
      "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
      "/lib/x86_64-linux-gnu/libgcc_s.so.1",
      // The project's own dependencies (installed with it), and large or hand-written CFI.
      "/usr/lib/x86_64-linux-gnu/libdw.so.1",
      "/usr/lib/x86_64-linux-gnu/libelf.so.1",
      "/usr/lib/x86_64-linux-gnu/libbpf.so.1",
      "/usr/lib/x86_64-linux-gnu/libzstd.so.1",
      "/lib/x86_64-linux-gnu/libz.so.1",
      "/usr/lib/x86_64-linux-gnu/libcrypto.so.3",
      // Hand-written assembly that changes a CFA register after a CFA expression, which libdw refuses
      // from there on: that FDE's rows end there either way.
      "/usr/lib/x86_64-linux-gnu/libgcrypt.so.20",
      "/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1",
      // Built here: gcc, clang and rustc, with and without frame pointers; this test itself.
      fixture("chain_gcc"),
      fixture("chain_clang"),
      fixture("chain_fp_nocfi"),
      fixture("memcpy_fp"),
      fixture("moves_loop"),
      self_path(),
  };
  size_t rows = 0;
  for (const std::string& path : files) {
    ASSERT_TRUE(std::filesystem::exists(path)) << path << " is installed by packaging/test.sh's packages";
    rows += compare_file(path);
  }
  // libLLVM alone has over a million rows: the comparison covered real tables, not empty ones.
  EXPECT_GT(rows, 1000000u);
}

// Whether the ELF file at `path` has a section named `name` (64-bit little-endian files only).
bool has_section(const std::string& path, const std::string& name) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Elf64_Ehdr eh{};
  if (bytes.size() < sizeof eh) return false;
  std::memcpy(&eh, bytes.data(), sizeof eh);
  const auto header = [&](size_t i, Elf64_Shdr* sh) {
    const size_t at = eh.e_shoff + i * sizeof(Elf64_Shdr);
    if (at + sizeof(Elf64_Shdr) > bytes.size()) return false;
    std::memcpy(sh, bytes.data() + at, sizeof *sh);
    return true;
  };
  Elf64_Shdr strings{};
  if (!header(eh.e_shstrndx, &strings)) return false;
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh{};
    if (!header(i, &sh) || strings.sh_offset + sh.sh_name >= bytes.size()) continue;
    if (std::strcmp(bytes.c_str() + strings.sh_offset + sh.sh_name, name.c_str()) == 0) return true;
  }
  return false;
}

// A static executable: GCC links it without .eh_frame_hdr, whose table of FDEs the compiler read to find
// them, so it had no rows at all (walked by frame pointer; without frame pointers no stack of it was
// whole). Its .eh_frame is read entry after entry instead: its own functions' and static glibc's rows,
// the same either way.
TEST(EhFrameRows, StaticExecutableWithoutEhFrameHdrHasTheRowsOfItsEhFrame) {
  const std::string path = fixture("chain_gcc_static");
  ASSERT_TRUE(has_section(path, ".eh_frame"));
  ASSERT_FALSE(has_section(path, ".eh_frame_hdr")) << "the fixture is to be linked without it";
  const auto table = hpd::compile_cfi_table({path}, "", CfiTableOptions{});
  EXPECT_EQ(table->error, "");
  // The program's few functions and the hundreds of static glibc's.
  EXPECT_GT(table->fdes, 500u);
  EXPECT_GT(compare_file(path), 1000u);
  // The dynamic build of the same source has its .eh_frame_hdr and the rows its FDEs give.
  ASSERT_TRUE(has_section(fixture("chain_gcc"), ".eh_frame_hdr"));
}

// The comparison the tests above and cfi_compile_bench --sweep rely on finds what differs: one row's
// rule, one row's pc, a count, an error.
TEST(EhFrameRows, TheComparisonFindsOneRowOrCountThatDiffers) {
  const auto libc = hpd::compile_cfi_table({"/lib/x86_64-linux-gnu/libc.so.6"}, "", CfiTableOptions{});
  ASSERT_GT(libc->rows.size(), 1000u) << libc->error;
  EXPECT_EQ(hpd::cfi_table_difference(*libc, *libc), "");
  CfiTable rule = *libc;
  rule.rows[500].cfa_offset += 8;
  const std::string said = hpd::cfi_table_difference(*libc, rule);
  EXPECT_NE(said.find("row 500: pc 0x"), std::string::npos) << said;
  EXPECT_EQ(said.find("rows:"), std::string::npos) << said;
  CfiTable pc = *libc;
  CfiRow& moved = pc.rows[700];
  moved.pc += 1;
  EXPECT_NE(hpd::cfi_table_difference(*libc, pc).find("row 700"), std::string::npos);
  CfiTable shorter = *libc;
  shorter.rows.pop_back();
  EXPECT_NE(hpd::cfi_table_difference(*libc, shorter).find("rows: "), std::string::npos);
  CfiTable counts = *libc;
  counts.fdes += 1;
  counts.error = "no .eh_frame";
  const std::string both = hpd::cfi_table_difference(*libc, counts);
  EXPECT_NE(both.find("FDEs: "), std::string::npos) << both;
  EXPECT_NE(both.find("error: '' against 'no .eh_frame'"), std::string::npos) << both;
}

TEST(EhFrameRows, VdsoTableIsLibdwsRowForRow) {
  const auto* ehdr = reinterpret_cast<const uint8_t*>(getauxval(AT_SYSINFO_EHDR));
  ASSERT_NE(ehdr, nullptr);
  // The vDSO's size: the end of its last program header's segment.
  std::ifstream maps("/proc/self/maps");
  std::string line;
  size_t size = 0;
  while (std::getline(maps, line)) {
    if (line.find("[vdso]") == std::string::npos) continue;
    unsigned long long lo = 0, hi = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "%llx-%llx", &lo, &hi), 2) << line;
    ASSERT_EQ(lo, reinterpret_cast<uintptr_t>(ehdr));
    size = hi - lo;
  }
  ASSERT_NE(size, 0u);
  const std::vector<uint8_t> image(ehdr, ehdr + size);
  const auto one_pass = hpd::compile_cfi_table_image(image, "[vdso]");
  EXPECT_FALSE(one_pass->rows.empty()) << one_pass->error;
  EXPECT_EQ(one_pass->eh_frame_through_libdw, "");
  // The image path has no options: the same image compiled as a file, both ways.
  char path[] = "/tmp/hpd-vdso-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, image.data(), image.size()), static_cast<ssize_t>(image.size()));
  close(fd);
  CfiTableOptions libdw_options;
  libdw_options.eh_frame_through_libdw = true;
  libdw_options.use_debug_frame = false;
  CfiTableOptions options;
  options.use_debug_frame = false;
  const auto file_one_pass = hpd::compile_cfi_table({path}, "", options);
  const auto file_libdw = hpd::compile_cfi_table({path}, "", libdw_options);
  unlink(path);
  expect_same_tables("[vdso]", *file_one_pass, *file_libdw);
  expect_same_tables("[vdso] image", *one_pass, *file_libdw);
}

// Damaged sections: the reader refuses what it cannot read and the module is read through libdw, which
// gives what it gave before (no crash either way). Every byte of libc's .eh_frame_hdr-listed FDEs is
// not practical to damage; this cuts the file at points inside .eh_frame.
TEST(EhFrameRows, TruncatedFilesGiveTheSameTablesEitherWay) {
  const std::string libc = "/lib/x86_64-linux-gnu/libc.so.6";
  std::ifstream in(libc, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 100000u);
  char path[] = "/tmp/hpd-cut-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  for (const double share : {0.95, 0.9, 0.8, 0.5}) {
    const size_t cut = static_cast<size_t>(bytes.size() * share);
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(bytes.data(), static_cast<std::streamsize>(cut));
    CfiTableOptions libdw_options;
    libdw_options.eh_frame_through_libdw = true;
    const auto one_pass = hpd::compile_cfi_table({path}, "", CfiTableOptions{});
    const auto libdw = hpd::compile_cfi_table({path}, "", libdw_options);
    SCOPED_TRACE("cut at " + std::to_string(cut));
    EXPECT_EQ(one_pass->rows.size(), libdw->rows.size());
    EXPECT_EQ(one_pass->error, libdw->error);
  }
  unlink(path);
}

// The file offset and size of section `name` of a 64-bit ELF image (0, 0 when it has none).
std::pair<size_t, size_t> section_of(const std::vector<char>& file, const char* name) {
  Elf64_Ehdr eh;
  std::memcpy(&eh, file.data(), sizeof eh);
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  std::memcpy(sections.data(), file.data() + eh.e_shoff, eh.e_shnum * sizeof(Elf64_Shdr));
  const Elf64_Shdr& names = sections.at(eh.e_shstrndx);
  for (const Elf64_Shdr& sh : sections)
    if (std::strcmp(file.data() + names.sh_offset + sh.sh_name, name) == 0) return {sh.sh_offset, sh.sh_size};
  return {0, 0};
}

// Damaged CFI: bytes of a gcc-built program's .eh_frame changed at random, 300 times, compiled with the
// one-pass reader (under the sanitizers in CI: no read outside the section). Whatever it makes of them,
// the rows come sorted by pc, and a module it cannot read goes through libdw.
TEST(EhFrameRows, DamagedEhFrameNeverCrashes) {
  std::ifstream in(fixture("chain_gcc"), std::ios::binary);
  const std::vector<char> original((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(original.size(), sizeof(Elf64_Ehdr));
  const auto [offset, size] = section_of(original, ".eh_frame");
  ASSERT_GT(size, 64u);
  char path[] = "/tmp/hpd-damaged-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::mt19937 random(31);
  int read_one_pass = 0;
  for (int round = 0; round < 300; ++round) {
    std::vector<char> bytes = original;
    const int changes = 1 + static_cast<int>(random() % 4);
    for (int i = 0; i < changes; ++i) bytes[offset + random() % size] = static_cast<char>(random());
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    const auto table = hpd::compile_cfi_table({path}, "", CfiTableOptions{});
    for (size_t i = 1; i < table->rows.size(); ++i)
      ASSERT_LT(table->rows[i - 1].pc, table->rows[i].pc) << "round " << round << " row " << i;
    read_one_pass += table->eh_frame_through_libdw.empty() ? 1 : 0;
  }
  unlink(path);
  // Most changes land in instructions or addresses the reader takes as they are.
  EXPECT_GT(read_one_pass, 0);
}

}  // namespace
