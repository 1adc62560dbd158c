// Tests for the small /proc and ELF-note readers.
#include "proc/proc_files.h"
#include "proc/build_id.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace hpd {
namespace {

std::vector<uint8_t> note(uint32_t type, const std::string& name, const std::vector<uint8_t>& desc) {
  std::vector<uint8_t> out;
  auto put32 = [&out](uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  put32(static_cast<uint32_t>(name.size() + 1));
  put32(static_cast<uint32_t>(desc.size()));
  put32(type);
  for (const char c : name) out.push_back(static_cast<uint8_t>(c));
  out.push_back(0);
  while (out.size() % 4) out.push_back(0);
  for (const uint8_t b : desc) out.push_back(b);
  while (out.size() % 4) out.push_back(0);
  return out;
}

TEST(BuildId, FindsGnuNoteAmongOthers) {
  auto notes = note(1, "Xen", {1, 2, 3});
  const auto gnu = note(3, "GNU", {0xde, 0xad, 0xbe, 0xef, 0x01});
  notes.insert(notes.end(), gnu.begin(), gnu.end());
  EXPECT_EQ(build_id_from_raw_notes(notes), "deadbeef01");
  EXPECT_EQ(build_id_from_raw_notes(note(3, "GNUX", {1})), "");
  // Truncated: the descriptor runs past the end.
  auto cut = gnu;
  cut.resize(18);
  EXPECT_EQ(build_id_from_raw_notes(cut), "");
  EXPECT_EQ(build_id_from_raw_notes({}), "");
  EXPECT_EQ(to_hex(std::vector<uint8_t>{0x00, 0xff}), "00ff");
}

TEST(BuildId, ReadsOwnExecutableAndRejectsNonElf) {
  BuildIdReader reader;
  // Linked by Debian's gcc, which adds --build-id by default.
  const std::string exe = read_exe(::getpid());
  ASSERT_FALSE(exe.empty());
  EXPECT_EQ(reader.for_path(::getpid(), exe).size(), 40u);
  EXPECT_EQ(reader.for_path(::getpid(), "/proc/self/status"), "");
  EXPECT_EQ(reader.for_path(::getpid(), "/no/such/file"), "");
  EXPECT_EQ(reader.for_path(::getpid(), "relative"), "");
}

TEST(ProcFiles, CpuListsAndOwnProcess) {
  EXPECT_EQ(parse_cpu_list("0-3,6,8-9\n"), (std::vector<int>{0, 1, 2, 3, 6, 8, 9}));
  EXPECT_EQ(parse_cpu_list("0"), std::vector<int>{0});
  EXPECT_TRUE(parse_cpu_list("").empty());
  EXPECT_EQ(parse_cpu_list("3-1"), std::vector<int>{});
  EXPECT_FALSE(online_cpus().empty());

  const int32_t pid = ::getpid();
  EXPECT_EQ(read_process_state(pid), 'R');
  EXPECT_EQ(read_process_state(-1), 0);
  EXPECT_FALSE(read_comm(pid).empty());
  EXPECT_FALSE(read_cmdline(pid).empty());
  EXPECT_EQ(list_threads(pid).front(), pid);
  EXPECT_TRUE(list_threads(-1).empty());
  ASSERT_TRUE(read_process_uid(pid));
  EXPECT_EQ(*read_process_uid(pid), ::getuid());
  EXPECT_FALSE(read_int_file("/nonexistent"));
}

}  // namespace
}  // namespace hpd
