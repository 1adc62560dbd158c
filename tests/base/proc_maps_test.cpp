// Tests for the /proc/PID/maps parser on literal lines.
#include "hpd/base/proc_maps.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace hpd {
namespace {

TEST(ProcMaps, ParsesFileMapping) {
  const auto e = parse_maps_line(
      "55d0c8a00000-55d0c8a21000 r-xp 00002000 fd:01 1234567                    /usr/bin/true");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->start, 0x55d0c8a00000u);
  EXPECT_EQ(e->end, 0x55d0c8a21000u);
  EXPECT_EQ(e->offset, 0x2000u);
  EXPECT_TRUE(e->readable);
  EXPECT_FALSE(e->writable);
  EXPECT_TRUE(e->executable);
  EXPECT_FALSE(e->shared);
  EXPECT_EQ(e->dev_major, 0xfdu);
  EXPECT_EQ(e->dev_minor, 1u);
  EXPECT_EQ(e->inode, 1234567u);
  EXPECT_EQ(e->path, "/usr/bin/true");
  EXPECT_FALSE(e->deleted);
  EXPECT_TRUE(e->is_file());
}

TEST(ProcMaps, KeepsSpacesInPathsAndStripsDeleted) {
  const auto spaced =
      parse_maps_line("7f0000000000-7f0000001000 r-xp 00000000 08:02 42   /opt/my app/lib x.so");
  ASSERT_TRUE(spaced);
  EXPECT_EQ(spaced->path, "/opt/my app/lib x.so");
  EXPECT_FALSE(spaced->deleted);

  const auto deleted =
      parse_maps_line("7f0000000000-7f0000001000 r-xp 00001000 08:02 42  /tmp/libfoo.so (deleted)");
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->path, "/tmp/libfoo.so");
  EXPECT_TRUE(deleted->deleted);
}

TEST(ProcMaps, AnonymousAndPseudoMappings) {
  const auto anon = parse_maps_line("7f1234560000-7f1234570000 rw-p 00000000 00:00 0 ");
  ASSERT_TRUE(anon);
  EXPECT_EQ(anon->path, "");
  EXPECT_FALSE(anon->is_file());
  EXPECT_FALSE(anon->is_pseudo());

  const auto vdso =
      parse_maps_line("7ffd1e5f2000-7ffd1e5f4000 r-xp 00000000 00:00 0                          [vdso]");
  ASSERT_TRUE(vdso);
  EXPECT_EQ(vdso->path, "[vdso]");
  EXPECT_TRUE(vdso->is_pseudo());
  EXPECT_FALSE(vdso->is_file());
  EXPECT_TRUE(vdso->executable);

  const auto stack =
      parse_maps_line("7ffd1e4d0000-7ffd1e4f1000 rw-p 00000000 00:00 0                          [stack]");
  ASSERT_TRUE(stack);
  EXPECT_EQ(stack->path, "[stack]");
  EXPECT_FALSE(stack->executable);

  const auto shared = parse_maps_line("7f0000000000-7f0000001000 rw-s 00000000 00:05 77 /dev/zero (deleted)");
  ASSERT_TRUE(shared);
  EXPECT_TRUE(shared->shared);
  EXPECT_TRUE(shared->deleted);
}

TEST(ProcMaps, RejectsGarbage) {
  EXPECT_FALSE(parse_maps_line(""));
  EXPECT_FALSE(parse_maps_line("hello world"));
  EXPECT_FALSE(parse_maps_line("1000-"));
  EXPECT_FALSE(parse_maps_line("2000-1000 r-xp 00000000 00:00 0"));  // end before start
  EXPECT_FALSE(parse_maps_line("1000-2000 r-"));
  EXPECT_FALSE(parse_maps_line("1000-2000 r-xp zz 00:00 0"));
}

TEST(ProcMaps, ParsesWholeFileSkippingBadLines) {
  const std::string text =
      "00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/dbus-daemon\n"
      "garbage line\n"
      "\n"
      "7ffd1e5f2000-7ffd1e5f4000 r-xp 00000000 00:00 0 [vdso]";  // no final newline
  const auto maps = parse_maps(text);
  ASSERT_EQ(maps.size(), 2u);
  EXPECT_EQ(maps[0].path, "/usr/bin/dbus-daemon");
  EXPECT_EQ(maps[1].path, "[vdso]");
}

TEST(ProcMaps, ReadsOwnMaps) {
  const auto maps = read_proc_maps(::getpid());
  ASSERT_FALSE(maps.empty());
  bool found_exec = false;
  for (const auto& e : maps) found_exec = found_exec || (e.executable && e.is_file());
  EXPECT_TRUE(found_exec);
  EXPECT_TRUE(read_proc_maps(-5).empty());
}

}  // namespace
}  // namespace hpd
