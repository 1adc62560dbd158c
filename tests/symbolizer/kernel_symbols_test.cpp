// KernelSymbols: kallsyms parsing on synthetic files, and on the live /proc/kallsyms when readable.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace hpd
