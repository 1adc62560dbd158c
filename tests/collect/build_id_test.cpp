// Tests for the build-id readers: ELF notes, files and the vDSO of live processes.
#include "proc/build_id.h"

#include "hpd/base/hex.h"
#include "hpd/base/proc_files.h"
#include "hpd/base/proc_maps.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

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
  // No such mapping (0-0): the path as the process sees it.
  EXPECT_EQ(reader.for_mapping(::getpid(), 0, 0, exe).build_id.size(), 40u);
  EXPECT_EQ(reader.for_mapping(::getpid(), 0, 0, "/proc/self/status").build_id, "");
  EXPECT_EQ(reader.for_mapping(::getpid(), 0, 0, "/no/such/file").build_id, "");
  EXPECT_EQ(reader.for_mapping(::getpid(), 0, 0, "relative").build_id, "");
}

// The vDSO as this process mapped it, from /proc/self/mem: an ELF image with a build-id. A process
// that is gone gives a reason; a range of the vDSO's size falls back to hpd's own image. A file
// mapping is held open, and that descriptor reads the file.
TEST(BuildId, VdsoImageAndHeldFilesOfALiveProcess) {
  const int32_t pid = ::getpid();
  MapsEntry vdso, exe;
  for (const MapsEntry& e : read_proc_maps(pid)) {
    if (e.path == "[vdso]") vdso = e;
    if (e.executable && e.path == read_exe(pid)) exe = e;
  }
  ASSERT_GT(vdso.end, vdso.start);
  ASSERT_GT(exe.end, exe.start);
  BuildIdReader reader;
  const MappedModule mine = reader.for_mapping(pid, vdso.start, vdso.end, "[vdso]");
  ASSERT_EQ(mine.image.size(), vdso.end - vdso.start) << mine.error;
  EXPECT_EQ(std::memcmp(mine.image.data(), reinterpret_cast<const void*>(vdso.start), mine.image.size()), 0);
  EXPECT_EQ(mine.build_id.size(), 40u);
  EXPECT_EQ(mine.build_id, build_id_of_image(mine.image));
  EXPECT_EQ(mine.file, nullptr);

  // A reaped child: nothing to read.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);
  std::string error;
  EXPECT_TRUE(read_process_memory(child, vdso.start, vdso.end, &error).empty());
  EXPECT_NE(error.find("/proc/" + std::to_string(child) + "/mem"), std::string::npos) << error;
  const MappedModule odd =
      reader.for_mapping(child, vdso.start, vdso.start + 3 * 4096 + vdso.end - vdso.start, "[vdso]");
  EXPECT_TRUE(odd.image.empty());
  EXPECT_FALSE(odd.error.empty());
  const MappedModule fallback = reader.for_mapping(child, vdso.start, vdso.end, "[vdso]");
  EXPECT_EQ(fallback.image, mine.image);
  EXPECT_EQ(fallback.build_id, mine.build_id);
  EXPECT_TRUE(read_process_memory(pid, 10, 5, &error).empty());  // a reversed range
  EXPECT_TRUE(build_id_of_image(std::vector<uint8_t>(64, 0x7f)).empty());

  const MappedModule file = reader.for_mapping(pid, exe.start, exe.end, exe.path);
  ASSERT_NE(file.file, nullptr);
  EXPECT_EQ(file.build_id.size(), 40u);
  const std::string held = "/proc/self/fd/" + std::to_string(file.file->fd());
  UniqueFd again(::open(held.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(again);
  EXPECT_EQ(read_elf_build_id(again.get()), file.build_id);
  // Which file it is, as the tables' caches tell files apart.
  struct stat st {};
  ASSERT_EQ(::stat(exe.path.c_str(), &st), 0);
  EXPECT_EQ(file.identity,
            (FileIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), st.st_size,
                          static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec}));
  EXPECT_FALSE(mine.identity.known());
  // One descriptor per file, however many mappings name it.
  EXPECT_EQ(reader.for_mapping(pid, exe.start, exe.end, exe.path).file, file.file);
  // A process gone before its mapping was read: the build-id of the path as this process sees it,
  // and no file held (it might not be the one the process ran; symbolization says if it is missing).
  const MappedModule gone = reader.for_mapping(child, exe.start, exe.end, exe.path);
  EXPECT_EQ(gone.build_id, file.build_id);
  EXPECT_EQ(gone.identity, file.identity);
  EXPECT_EQ(gone.file, nullptr);
  const MappedModule nowhere = reader.for_mapping(child, exe.start, exe.end, "/nonexistent/prog");
  EXPECT_EQ(nowhere.build_id, "");
  EXPECT_EQ(nowhere.file, nullptr);
  EXPECT_FALSE(nowhere.identity.known());
}

// Near RLIMIT_NOFILE no file is held (the recording's own descriptors come first); the build-id
// is still read. Checked in a child, whose limit can be lowered without touching this process.
TEST(BuildId, NoFileHeldNearTheDescriptorLimit) {
  const int32_t pid = ::getpid();
  MapsEntry exe;
  for (const MapsEntry& e : read_proc_maps(pid)) {
    if (e.executable && e.path == read_exe(pid)) exe = e;
  }
  ASSERT_GT(exe.end, exe.start);
  const pid_t child = ::fork();
  if (child == 0) {
    // Room for a few more descriptors, but less than the spare the reader keeps.
    const int probe = ::open("/dev/null", O_RDONLY);
    rlimit tight{static_cast<rlim_t>(probe) + 16, static_cast<rlim_t>(probe) + 16};
    ::close(probe);
    if (::setrlimit(RLIMIT_NOFILE, &tight) != 0) ::_exit(10);
    BuildIdReader reader;
    const MappedModule m = reader.for_mapping(pid, exe.start, exe.end, exe.path);
    if (m.build_id.size() != 40) ::_exit(11);
    if (m.file != nullptr) ::_exit(12);
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setrlimit failed, 11: no build-id, 12: a file held at the limit";
}

}  // namespace
}  // namespace hpd
