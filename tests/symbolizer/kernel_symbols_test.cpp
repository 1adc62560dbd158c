// KernelSymbols: kallsyms parsing on synthetic files, and on the live /proc/kallsyms when readable.
#include <gtest/gtest.h>

#include <cstdio>

#include "hpd/symbolizer/symbolizer.h"
#include "test_util.h"

namespace hpd {
namespace {

TEST(KernelSymbols, ParsesTextSymbolsWithModules) {
  test::TempDir dir;
  // Unsorted, with data symbols, a weak one and module symbols, as kallsyms prints them.
  test::write_file(dir.file("kallsyms"),
                   "ffffffff81000000 T _stext\n"
                   "ffffffff81002000 t do_syscall_64\n"
                   "ffffffff82000000 D some_data\n"
                   "ffffffff81001000 W weak_func\n"
                   "ffffffffc0a00000 t mod_func\t[mymod]\n"
                   "ffffffff81003000 T entry_SYSCALL_64\n"
                   "garbage line\n"
                   "ffffffff81004000 B bss_thing\n");
  KernelSymbols k;
  ASSERT_TRUE(k.load(dir.file("kallsyms")));
  EXPECT_EQ(k.size(), 5u);
  EXPECT_EQ(k.base(), 0xffffffff81000000ull);

  Location l = k.resolve(0xffffffff81002010ull);
  ASSERT_TRUE(l.found);
  EXPECT_EQ(l.symbol, "do_syscall_64");
  EXPECT_EQ(l.symbol_address, 0x2000u);
  EXPECT_EQ(l.symbol_size, 0x1000u);
  EXPECT_EQ(l.rel_address, 0x2010u);
  ASSERT_EQ(l.frames.size(), 1u);
  EXPECT_EQ(l.frames[0].function, "do_syscall_64");

  EXPECT_EQ(k.resolve(0xffffffff81001fffull).symbol, "weak_func");
  EXPECT_EQ(k.resolve(0xffffffffc0a00010ull).symbol, "mod_func [mymod]");
  // Data symbols are skipped: the address belongs to the preceding text symbol.
  EXPECT_EQ(k.resolve(0xffffffff81003500ull).symbol, "entry_SYSCALL_64");
  // Below the first symbol, or far past the last: not found.
  EXPECT_FALSE(k.resolve(0xffffffff80000000ull).found);
  EXPECT_FALSE(k.resolve(0xffffffffc0a00000ull + (2 << 20)).found);
}

// The line parser on lines as /proc/kallsyms prints them: addresses of 16 hex digits, nm's type
// letters, a module's name in brackets after a tab, and the kernel image's lines without one.
TEST(KallsymsLine, SplitsAddressTypeNameAndModule) {
  KallsymsLine l;
  ASSERT_TRUE(parse_kallsyms_line("ffffffff81000000 T _stext", l));
  EXPECT_EQ(l.address, 0xffffffff81000000ull);
  EXPECT_EQ(l.type, 'T');
  EXPECT_EQ(l.name, "_stext");
  EXPECT_EQ(l.module, "");

  ASSERT_TRUE(parse_kallsyms_line("ffffffffc0a01230 t nf_conntrack_in\t[nf_conntrack]", l));
  EXPECT_EQ(l.address, 0xffffffffc0a01230ull);
  EXPECT_EQ(l.type, 't');
  EXPECT_EQ(l.name, "nf_conntrack_in");
  EXPECT_EQ(l.module, "[nf_conntrack]");

  ASSERT_TRUE(parse_kallsyms_line("ffffffffc0002000 t bpf_prog_6deef7357e7b4530_sd_fw_ingress\t[bpf]", l));
  EXPECT_EQ(l.name, "bpf_prog_6deef7357e7b4530_sd_fw_ingress");
  EXPECT_EQ(l.module, "[bpf]");

  // kptr_restrict: the addresses read as zero; data, bss and weak types pass through as letters.
  ASSERT_TRUE(parse_kallsyms_line("0000000000000000 D jiffies", l));
  EXPECT_EQ(l.address, 0u);
  EXPECT_EQ(l.type, 'D');
  ASSERT_TRUE(parse_kallsyms_line("ffffffff81001000 W arch_cpu_idle", l));
  EXPECT_EQ(l.type, 'W');
  EXPECT_EQ(l.name, "arch_cpu_idle");

  // Not in that form: nothing is taken from it, and `l` keeps what it held.
  for (const char* bad : {"", "garbage line", "ffffffff81000000", "ffffffff81000000 T", "ffffffff81000000 T ",
                          "xyz0 T name", " ffffffff81000000 T name", "ffffffff81000000  T name",
                          "ffffffff81000000 TT name", "ffffffff81000000 T \t[mod]"}) {
    EXPECT_FALSE(parse_kallsyms_line(bad, l)) << "'" << bad << "'";
    EXPECT_EQ(l.name, "arch_cpu_idle");
  }
}

// A whole text, as load() reads it: the last line without its newline still counts.
TEST(KernelSymbols, LoadTextTakesTextSymbolsInAddressOrder) {
  KernelSymbols k;
  ASSERT_TRUE(
      k.load_text("ffffffff81002000 t b\n"
                  "ffffffff81000000 T a\n"
                  "ffffffff81003000 d data\n"
                  "ffffffffc0a00000 t m\t[mod]\n"
                  "ffffffff81001000 w weak"));
  ASSERT_EQ(k.size(), 4u);
  const auto& s = k.symbols();
  EXPECT_STREQ(k.name(s[0]), "a");
  EXPECT_EQ(s[0].type, 'T');
  EXPECT_STREQ(k.name(s[1]), "weak");
  EXPECT_EQ(s[1].type, 'w');
  EXPECT_STREQ(k.name(s[2]), "b");
  EXPECT_STREQ(k.name(s[3]), "m [mod]");
  EXPECT_EQ(s[3].address, 0xffffffffc0a00000ull);
}

// What the kernel image holds (its names never change while the system runs) against what comes and
// goes (a module's, a BPF program's code), and what lies past the image's last symbol or outside the
// table: hpd reads /proc/kallsyms again for a recording only when one of its addresses is not in it.
TEST(KernelSymbols, InKernelImageOnlyBetweenTwoSymbolsOfTheImage) {
  KernelSymbols k;
  ASSERT_TRUE(
      k.load_text("ffffffff81000000 T _stext\n"
                  "ffffffff81001000 t do_nanosleep\n"
                  "ffffffff81002000 T _etext\n"
                  "ffffffffc0a00000 t virtnet_poll\t[virtio_net]\n"
                  "ffffffffc0a01000 t bpf_prog_0123456789abcdef_hpd_on_cpu\t[bpf]\n"));
  EXPECT_FALSE(k.in_kernel_image(0xffffffff80ffffffull)) << "below the first symbol";
  EXPECT_TRUE(k.in_kernel_image(0xffffffff81000000ull));
  EXPECT_TRUE(k.in_kernel_image(0xffffffff81001234ull));
  EXPECT_TRUE(k.in_kernel_image(0xffffffff81001fffull));
  EXPECT_FALSE(k.in_kernel_image(0xffffffff81002000ull)) << "the image's last symbol: a module may follow";
  EXPECT_FALSE(k.in_kernel_image(0xffffffffc0a00010ull)) << "a module's";
  EXPECT_FALSE(k.in_kernel_image(0xffffffffc0a01010ull)) << "a BPF program's, the last symbol";
  EXPECT_FALSE(KernelSymbols().in_kernel_image(0xffffffff81001234ull)) << "an empty table";
  // A frame: the address and the byte before it (a return address's call), both in the image.
  EXPECT_TRUE(k.frame_in_kernel_image(0xffffffff81001234ull));
  EXPECT_TRUE(k.frame_in_kernel_image(0xffffffff81001fffull));
  EXPECT_FALSE(k.frame_in_kernel_image(0xffffffff81000000ull)) << "the byte before is below the first symbol";
  EXPECT_FALSE(k.frame_in_kernel_image(0xffffffffc0a00010ull));
}

// Code loaded after the table was read (a recording's own BPF programs, when /proc/kallsyms is read
// while they load): its symbol is added as a read now would list it, and replaces those the table had
// inside it (a program unloaded since: live code holds no other symbol), not those around it.
TEST(KernelSymbols, ReplaceRangeAddsCodeLoadedSinceTheRead) {
  KernelSymbols k;
  ASSERT_TRUE(
      k.load_text("ffffffff81000000 T _stext\n"
                  "ffffffff81001000 T _etext\n"
                  "ffffffffc0a00000 t virtnet_poll\t[virtio_net]\n"
                  "ffffffffc0a01000 t bpf_prog_1111111111111111_gone\t[bpf]\n"
                  "ffffffffc0a01100 t bpf_prog_2222222222222222_gone_too\t[bpf]\n"
                  "ffffffffc0a02000 t bpf_prog_3333333333333333_kept\t[bpf]\n"));
  ASSERT_EQ(k.size(), 6u);
  k.replace_range(0xffffffffc0a01000ull, 0xffffffffc0a01800ull, "bpf_prog_0123456789abcdef_hpd_on_cpu [bpf]");
  EXPECT_EQ(k.size(), 5u);
  Location at = k.resolve(0xffffffffc0a01123ull);
  ASSERT_TRUE(at.found);
  EXPECT_EQ(at.symbol, "bpf_prog_0123456789abcdef_hpd_on_cpu [bpf]");
  EXPECT_EQ(at.symbol_address + k.base(), 0xffffffffc0a01000ull);
  EXPECT_EQ(at.symbol_size, 0x1000u) << "it reaches the next symbol, as in a read";
  EXPECT_EQ(k.resolve(0xffffffffc0a00010ull).symbol, "virtnet_poll [virtio_net]");
  EXPECT_EQ(k.resolve(0xffffffffc0a02010ull).symbol, "bpf_prog_3333333333333333_kept [bpf]");
  EXPECT_FALSE(k.in_kernel_image(0xffffffffc0a01010ull));
  // Code in a gap of the table, and at the end of it, keeps the order by address.
  k.replace_range(0xffffffffc0a03000ull, 0xffffffffc0a03040ull, "bpf_prog_4444444444444444_last [bpf]");
  k.replace_range(0xffffffffc0a00800ull, 0xffffffffc0a00900ull, "bpf_prog_5555555555555555_between [bpf]");
  const auto& s = k.symbols();
  ASSERT_EQ(s.size(), 7u);
  for (size_t i = 1; i < s.size(); ++i) EXPECT_LT(s[i - 1].address, s[i].address) << i;
  EXPECT_EQ(k.resolve(0xffffffffc0a03010ull).symbol, "bpf_prog_4444444444444444_last [bpf]");
  // The table's last symbol, which no next one ends, ends where its range does (a program at the top
  // of the area programs are packed in: seen on a machine where the recording's own warm_page was).
  EXPECT_EQ(k.resolve(0xffffffffc0a03010ull).symbol_size, 0x40u);
  EXPECT_TRUE(k.resolve(0xffffffffc0a0303full).found);
  EXPECT_FALSE(k.resolve(0xffffffffc0a03040ull).found) << "past its end: code the table does not know";
  EXPECT_EQ(k.resolve(0xffffffffc0a00810ull).symbol, "bpf_prog_5555555555555555_between [bpf]");
  EXPECT_EQ(k.resolve(0xffffffffc0a00010ull).symbol_size, 0x800u);
  // Lines for a capture name the added code as the table does.
  const uint64_t address = 0xffffffffc0a01123ull;
  KernelSymbols from_lines;
  ASSERT_TRUE(from_lines.load_text(k.lines_for({&address, 1})));
  EXPECT_EQ(from_lines.resolve(address).symbol, "bpf_prog_0123456789abcdef_hpd_on_cpu [bpf]");
  // Nothing is added to an empty table (nothing to name the rest), nor an empty or inverted range.
  KernelSymbols empty;
  empty.replace_range(0xffffffffc0a01000ull, 0xffffffffc0a01800ull, "bpf_prog_0123456789abcdef_x [bpf]");
  EXPECT_TRUE(empty.empty());
  k.replace_range(0xffffffffc0a05000ull, 0xffffffffc0a05000ull, "bpf_prog_6666666666666666_none [bpf]");
  k.replace_range(0xffffffffc0a05000ull, 0xffffffffc0a04000ull, "bpf_prog_6666666666666666_none [bpf]");
  EXPECT_EQ(k.size(), 7u);
  EXPECT_EQ(k.resolve(0xffffffffc0a03010ull).symbol_size, 0x40u) << "the last one's end is kept";
  // A symbol read as the last, end unknown (kallsyms gives no sizes), holds 1 MiB at most; replaced by
  // the same code with its range, it ends where that does.
  KernelSymbols read;
  ASSERT_TRUE(
      read.load_text("ffffffff81000000 T _stext\n"
                     "ffffffffc0a02000 t bpf_prog_3333333333333333_top\t[bpf]\n"));
  EXPECT_EQ(read.resolve(0xffffffffc0a02010ull).symbol_size, 0u);
  EXPECT_TRUE(read.resolve(0xffffffffc0a02200ull).found);
  read.replace_range(0xffffffffc0a02000ull, 0xffffffffc0a02100ull, "bpf_prog_3333333333333333_top [bpf]");
  EXPECT_EQ(read.size(), 2u);
  EXPECT_EQ(read.resolve(0xffffffffc0a02010ull).symbol_size, 0x100u);
  EXPECT_FALSE(read.resolve(0xffffffffc0a02200ull).found);
  // Code added above it becomes the last: the one below now ends at it.
  read.replace_range(0xffffffffc0a02300ull, 0xffffffffc0a02380ull, "bpf_prog_7777777777777777_higher [bpf]");
  EXPECT_EQ(read.resolve(0xffffffffc0a02010ull).symbol_size, 0x300u);
  EXPECT_EQ(read.resolve(0xffffffffc0a02310ull).symbol_size, 0x80u);
}

// The image's last symbol holds at most 1 MiB: an address in the modules' area that no module or BPF
// program of the table holds (one unloaded since, or loaded after the read) is not found, where it was
// named after the image's last symbol (seen in a continuous-mode test: "_einittext" for the address of
// the collection's unloaded hpd_exit). The kept lines for such addresses say the same.
TEST(KernelSymbols, ModulesAreaAddressesNoSymbolHoldsAreNotFound) {
  const std::string text =
      "ffffffff81000000 T _stext\n"
      "ffffffff81001000 t do_nanosleep\n"
      "ffffffff83000000 T _einittext\n"
      "ffffffffc0a00000 t virtnet_poll\t[virtio_net]\n"
      "ffffffffc0a01000 t bpf_prog_0123456789abcdef_hpd_on_cpu\t[bpf]\n";
  KernelSymbols k;
  ASSERT_TRUE(k.load_text(text));
  EXPECT_EQ(k.resolve(0xffffffff81001234ull).symbol, "do_nanosleep");
  EXPECT_EQ(k.resolve(0xffffffff83000010ull).symbol, "_einittext") << "within 1 MiB of the image's last";
  EXPECT_FALSE(k.resolve(0xffffffffc002b583ull).found) << "the modules' area, before any module of the table";
  EXPECT_EQ(k.resolve(0xffffffffc0a00010ull).symbol, "virtnet_poll [virtio_net]");
  EXPECT_EQ(k.resolve(0xffffffffc0a01010ull).symbol, "bpf_prog_0123456789abcdef_hpd_on_cpu [bpf]");
  EXPECT_FALSE(k.resolve(0xffffffffc0c01010ull).found) << "more than 1 MiB past the last symbol";
  const std::vector<uint64_t> addresses = {0xffffffff81001234ull, 0xffffffff83000010ull,
                                           0xffffffffc002b583ull, 0xffffffffc0a01010ull};
  KernelSymbols kept;
  ASSERT_TRUE(kept.load_text(k.lines_for(addresses)));
  for (const uint64_t a : addresses) {
    EXPECT_EQ(kept.resolve(a).found, k.resolve(a).found) << std::hex << a;
    EXPECT_EQ(kept.resolve(a).symbol, k.resolve(a).symbol) << std::hex << a;
  }
}

// load() reads the file in 64 KiB blocks: lines cut between two blocks, and a last line without its
// newline, give what the whole text gives.
TEST(KernelSymbols, FileReadInBlocksGivesWhatTheWholeTextGives) {
  test::TempDir dir;
  std::string text;
  for (int i = 0; i < 6000; ++i) {
    char line[96];
    std::snprintf(line, sizeof line, "ffffffff8%07x %c function_number_%d%s\n", i * 16, "tTdW"[i % 4], i,
                  i % 7 == 0 ? "\t[some_module]" : "");
    text += line;
  }
  text += "ffffffff8fffffff T last_without_newline";
  ASSERT_GT(text.size(), 3u << 16);
  test::write_file(dir.file("kallsyms"), text);
  KernelSymbols from_file, from_text;
  ASSERT_TRUE(from_file.load(dir.file("kallsyms")));
  ASSERT_TRUE(from_text.load_text(text));
  ASSERT_EQ(from_file.size(), 4501u);  // 't', 'T' and 'W' of 6000, and the last
  ASSERT_EQ(from_file.size(), from_text.size());
  for (size_t i = 0; i < from_file.size(); ++i) {
    const auto& a = from_file.symbols()[i];
    const auto& b = from_text.symbols()[i];
    ASSERT_EQ(a.address, b.address) << i;
    ASSERT_EQ(a.type, b.type) << i;
    ASSERT_STREQ(from_file.name(a), from_text.name(b)) << i;
  }
  EXPECT_STREQ(from_file.name(from_file.symbols().back()), "last_without_newline");
  EXPECT_STREQ(from_file.name(from_file.symbols()[7]), "function_number_9");
  EXPECT_EQ(from_file.resolve(0xffffffff80000070ull + 1).symbol, "function_number_7 [some_module]");
}

TEST(KernelSymbols, ZeroAddressesMeanRestricted) {
  test::TempDir dir;
  test::write_file(dir.file("kallsyms"), "0000000000000000 T _stext\n0000000000000000 t do_syscall_64\n");
  KernelSymbols k;
  EXPECT_FALSE(k.load(dir.file("kallsyms")));
  EXPECT_TRUE(k.empty());
  EXPECT_FALSE(k.resolve(0xffffffff81000000ull).found);
}

TEST(KernelSymbols, MissingOrEmptyFile) {
  test::TempDir dir;
  KernelSymbols k;
  EXPECT_FALSE(k.load(dir.file("nope")));
  test::write_file(dir.file("empty"), "");
  EXPECT_FALSE(k.load(dir.file("empty")));
  EXPECT_TRUE(k.empty());
}

TEST(KernelSymbols, LiveKallsymsWhenReadable) {
  KernelSymbols k;
  if (!k.load("/proc/kallsyms")) GTEST_SKIP() << "kallsyms hidden (kptr_restrict or not root)";
  EXPECT_GT(k.size(), 1000u);
  // Our own syscalls pass through this entry point on x86-64.
  const std::string entry = test::run("grep -m1 ' entry_SYSCALL_64$' /proc/kallsyms");
  ASSERT_FALSE(entry.empty());
  const uint64_t address = std::stoull(entry.substr(0, entry.find(' ')), nullptr, 16);
  EXPECT_EQ(k.resolve(address + 1).symbol, "entry_SYSCALL_64");
}

// The lines kept for a recording's kernel addresses resolve those addresses exactly as the whole
// table does: the same name (the first of several at one address), start, size and base, for a
// module's symbol and a BPF program's, for an address in the last symbol and one past the tail.
void expect_same(const Location& a, const Location& b, uint64_t address) {
  SCOPED_TRACE(::testing::Message() << std::hex << address);
  EXPECT_EQ(a.found, b.found);
  EXPECT_EQ(a.symbol, b.symbol);
  EXPECT_EQ(a.symbol_address, b.symbol_address);
  EXPECT_EQ(a.symbol_size, b.symbol_size);
  EXPECT_EQ(a.rel_address, b.rel_address);
}

TEST(KernelSymbols, LinesForAddressesResolveThemAsTheWholeTable) {
  KernelSymbols whole;
  ASSERT_TRUE(
      whole.load_text("ffffffff81000000 T _stext\n"
                      "ffffffff81001000 T alias_one\n"
                      "ffffffff81001000 t alias_two\n"
                      "ffffffff81002000 t between\n"
                      "ffffffff81003000 T do_nanosleep\n"
                      "ffffffff81004000 t after_sleep\n"
                      "ffffffffa0001000 t bpf_prog_6deef7357e7b4530_hpd_on_cpu\t[bpf]\n"
                      "ffffffffa0002000 t bpf_prog_0123456789abcdef_other\t[bpf]\n"
                      "ffffffffc0a00000 t mod_func\t[mymod]\n"));
  const std::vector<uint64_t> addresses{0xffffffff81001010ull, 0xffffffff81003fffull,
                                        0xffffffffa0001004ull, 0xffffffffc0a00010ull,
                                        0xffffffff80000000ull, 0xffffffffc0a00000ull + (2 << 20)};
  const std::string lines = whole.lines_for(addresses);
  KernelSymbols kept;
  ASSERT_TRUE(kept.load_text(lines)) << lines;
  // Only what the addresses need: the base, each holder and the symbol after it.
  EXPECT_EQ(lines,
            "ffffffff81000000 T _stext\n"
            "ffffffff81001000 T alias_one\n"
            "ffffffff81002000 t between\n"
            "ffffffff81003000 T do_nanosleep\n"
            "ffffffff81004000 t after_sleep\n"
            "ffffffffa0001000 t bpf_prog_6deef7357e7b4530_hpd_on_cpu\t[bpf]\n"
            "ffffffffa0002000 t bpf_prog_0123456789abcdef_other\t[bpf]\n"
            "ffffffffc0a00000 t mod_func\t[mymod]\n");
  for (const uint64_t a : addresses) expect_same(kept.resolve(a), whole.resolve(a), a);
  EXPECT_EQ(kept.base(), whole.base());
  EXPECT_EQ(KernelSymbols().lines_for(addresses), "");
}

TEST(KernelSymbols, LinesForTheLiveTableResolveEveryAddressAsIt) {
  KernelSymbols live;
  if (!live.load("/proc/kallsyms")) GTEST_SKIP() << "kallsyms hidden (kptr_restrict or not root)";
  // Addresses spread over the whole table, in and between symbols.
  std::vector<uint64_t> addresses;
  const auto& symbols = live.symbols();
  for (size_t i = 0; i < symbols.size(); i += 97) {
    addresses.push_back(symbols[i].address);
    addresses.push_back(symbols[i].address + 7);
  }
  KernelSymbols kept;
  ASSERT_TRUE(kept.load_text(live.lines_for(addresses)));
  EXPECT_LT(kept.size(), live.size() / 20);
  for (const uint64_t a : addresses) expect_same(kept.resolve(a), live.resolve(a), a);
}

}  // namespace
}  // namespace hpd
