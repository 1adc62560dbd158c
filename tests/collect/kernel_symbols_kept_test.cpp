// Tests for the kernel's symbols kept across recordings (collect/src/kernel_symbols_kept.h): when the
// table a recording started with names its kernel addresses, and when /proc/kallsyms is read again.
#include "kernel_symbols_kept.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "hpd/collect/recorder.h"
#include "hpd/model/raw_profile.h"
#include "hpd/symbolizer/symbolizer.h"

namespace hpd {
namespace {

// A table as read while a BPF program was loaded after the kernel image, and a module beyond it.
std::shared_ptr<const KernelSymbols> table() {
  auto symbols = std::make_shared<KernelSymbols>();
  EXPECT_TRUE(
      symbols->load_text("ffffffff81000000 T _stext\n"
                         "ffffffff81001000 T do_exit\n"
                         "ffffffff81002000 T _etext\n"
                         "ffffffffc0001000 t bpf_prog_0123456789abcdef_hpd_exit\t[bpf]\n"
                         "ffffffffc0002000 t bpf_prog_fedcba9876543210_other\t[bpf]\n"
                         "ffffffffc0a00000 t mod_func\t[mymod]\n"
                         "ffffffffc0a01000 t mod_end\t[mymod]\n"));
  return symbols;
}

RawProfile profile_with(std::vector<uint64_t> kernel) {
  RawProfile p;
  const std::vector<uint64_t> user{0x401000};
  p.stacks.intern(kernel, user);
  return p;
}

class KeptKernelSymbols : public ::testing::Test {
 protected:
  void SetUp() override { keep_kernel_symbols(true); }
  void TearDown() override { keep_kernel_symbols(false); }
};

TEST_F(KeptKernelSymbols, FramesOfTheImageNeedNoNewRead) {
  const auto used = table();
  const uint64_t reads = kernel_symbols_status().reads;
  EXPECT_EQ(kernel_symbols_for_profile(profile_with({0xffffffff81001010}), used), used);
  EXPECT_EQ(kernel_symbols_status().reads, reads);
}

// The recording's own program, which the table names as a read now would (RecordResult::
// kernel_code_named), needs no new read; another program in the same table, or a module, does.
TEST_F(KeptKernelSymbols, OnlyCodeKnownToBeNamedAsNowIsTrustedOutsideTheImage) {
  const auto used = table();
  const std::vector<std::pair<uint64_t, uint64_t>> named{{0xffffffffc0001000, 0xffffffffc0001800}};
  const uint64_t reads = kernel_symbols_status().reads;
  EXPECT_EQ(kernel_symbols_for_profile(profile_with({0xffffffffc0001234, 0xffffffff81001010}), used, named),
            used);
  EXPECT_EQ(kernel_symbols_status().reads, reads);

  // Without the range, the same frame makes a new read of /proc/kallsyms (a new table).
  EXPECT_NE(kernel_symbols_for_profile(profile_with({0xffffffffc0001234}), used), used);
  EXPECT_EQ(kernel_symbols_status().reads, reads + 1);
  // Another program in the table, a module, and the first byte of the named range (a frame's lines are
  // looked up at the byte before it too, which is outside the range).
  for (const uint64_t a : {0xffffffffc0002010ull, 0xffffffffc0a00010ull, 0xffffffffc0001000ull}) {
    SCOPED_TRACE(a);
    const uint64_t before = kernel_symbols_status().reads;
    EXPECT_NE(kernel_symbols_for_profile(profile_with({a}), used, named), used);
    EXPECT_EQ(kernel_symbols_status().reads, before + 1);
  }
}

// A recording whose programs were loaded after the kept table was read completes a copy of it with them
// (BpfSession::name_own_programs): the copy is kept in its place, the next recordings start with it, and
// nothing else replaces the kept table this way (no table kept, or another one kept since).
TEST_F(KeptKernelSymbols, ACompletedCopyTakesTheKeptTablesPlaceOnlyWhileItIsKept) {
  keep_kernel_symbols(false);  // forgets any table an earlier test kept
  keep_kernel_symbols(true);
  const KernelSymbolsStatus at_start = kernel_symbols_status();
  EXPECT_EQ(at_start.symbols, 0u);
  kernel_symbols_completed(nullptr, table());
  kernel_symbols_completed(table(), table());
  EXPECT_EQ(kernel_symbols_status().symbols, 0u) << "no table was kept, none is completed";
  EXPECT_EQ(kernel_symbols_status().completions, at_start.completions);

  const std::shared_ptr<const KernelSymbols> kept = recording_kernel_symbols();  // read: root's addresses
  ASSERT_FALSE(kept->empty()) << "/proc/kallsyms unreadable or its addresses hidden (the tests run as root)";
  auto completed = std::make_shared<KernelSymbols>(*kept);
  const uint64_t above = kept->symbols().back().address + 0x1000;  // no symbol there to replace
  completed->replace_range(above, above + 0x800, "bpf_prog_0123456789abcdef_hpd_test [bpf]");
  kernel_symbols_completed(kept, completed);
  EXPECT_EQ(recording_kernel_symbols(), completed);
  EXPECT_EQ(kernel_symbols_status().completions, at_start.completions + 1);
  EXPECT_EQ(kernel_symbols_status().symbols, kept->size() + 1);
  // The table it completed is no longer the kept one: a second completion of it changes nothing.
  kernel_symbols_completed(kept, table());
  EXPECT_EQ(recording_kernel_symbols(), completed);
  EXPECT_EQ(kernel_symbols_status().completions, at_start.completions + 1);
}

// A process that does not keep the table (hpctl) uses the one its recording read, whatever the frames.
TEST(KernelSymbolsNotKept, TheRecordingsOwnTableIsUsed) {
  keep_kernel_symbols(false);
  const auto used = table();
  const uint64_t reads = kernel_symbols_status().reads;
  EXPECT_EQ(kernel_symbols_for_profile(profile_with({0xffffffffc0a00010}), used), used);
  EXPECT_EQ(kernel_symbols_status().reads, reads);
}

}  // namespace
}  // namespace hpd
