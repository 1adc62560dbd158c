// OutputFile's rules (hpd/base/output_file.h) on real files: replacement by rename, writing in place,
// links, FIFOs, devices and files of another uid in shared directories (the uid given by lchown, so
// the test needs root), a FIFO without a reader; write_output_fully's stall limit.
#include "hpd/base/output_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "temp_dir.h"

namespace hpd {
namespace {

constexpr uid_t kOther = 65534;  // another user's uid (nobody)

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// What `open` throws ("" when nothing).
template <typename F>
std::string thrown(F&& open) {
  try {
    open();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

std::string refusal(const std::string& path, OutputWrite how) {
  return thrown([&] { OutputFile file(path, how); });
}

std::string check_refusal(const std::string& path, OutputWrite how) {
  return thrown([&] { check_output_path(path, how); });
}

class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: files of another uid are made with lchown";
  }
  // A directory of another user's, mode 0755: shared for root, by its owner.
  std::string others_dir(const std::string& name) const {
    const std::string dir = tmp_.file(name);
    std::filesystem::create_directory(dir);
    ::chmod(dir.c_str(), 0755);
    EXPECT_EQ(::chown(dir.c_str(), kOther, kOther), 0);
    return dir;
  }
  testing::TempDir tmp_{"output-file"};
};

TEST_F(OutputFileTest, ReplacesByRenameAndLeavesNothingWithoutCommit) {
  const std::string out = tmp_.file("p.json");
  std::ofstream(out) << "old";
  {
    OutputFile file(out, OutputWrite::kReplace);
    EXPECT_FALSE(file.in_place());
    file.write("new", 3);
    EXPECT_EQ(text_of(out), "old") << "the old file stays until commit";
  }
  EXPECT_EQ(text_of(out), "old");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(tmp_.path()), {}), 1)
      << "a temporary file stayed";
  OutputFile file(out, OutputWrite::kReplace);
  file.write("new", 3);
  file.commit();
  EXPECT_EQ(text_of(out), "new");
}

TEST_F(OutputFileTest, InPlaceCreatesOrTruncatesAndRemovesOnlyWhatItWrote) {
  const std::string out = tmp_.file("c.hpr");
  {
    OutputFile file(out, OutputWrite::kInPlace, 0640);
    file.write("abc", 3);
    EXPECT_EQ(text_of(out), "abc");
  }
  EXPECT_FALSE(std::filesystem::exists(out)) << "not kept: removed";
  std::ofstream(out) << "a longer old content";
  OutputFile file(out, OutputWrite::kInPlace);
  file.write("x", 1);
  file.keep();
  EXPECT_EQ(text_of(out), "x");
}

TEST_F(OutputFileTest, PlantedLinksAreNotFollowedInSharedDirectories) {
  const std::string victim = tmp_.file("victim");
  std::ofstream(victim) << "root's";
  const std::string others = others_dir("others");
  const std::string world = tmp_.file("world");
  std::filesystem::create_directory(world);
  ::chmod(world.c_str(), 01777);
  for (const std::string& dir : {others, world}) {
    const std::string link = dir + "/out.json";
    ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
    ASSERT_EQ(::lchown(link.c_str(), kOther, kOther), 0);
    for (const OutputWrite how : {OutputWrite::kReplace, OutputWrite::kInPlace}) {
      const std::string why = refusal(link, how);
      EXPECT_EQ(why.rfind("cannot write '" + link + "': it is a symbolic link in directory '" + dir + "'", 0),
                0u)
          << why;
      EXPECT_EQ(check_refusal(link, how), why);
    }
    EXPECT_EQ(text_of(victim), "root's");
    // The writer's own link there is followed (in place) or replaced by the new file (rename).
    ASSERT_EQ(::lchown(link.c_str(), 0, 0), 0);
    OutputFile own(link, OutputWrite::kInPlace);
    own.write("mine", 4);
    own.keep();
    EXPECT_EQ(text_of(victim), "mine");
    std::ofstream(victim) << "root's";
    ::unlink(link.c_str());
  }
  // A directory of root's own, 0755: its links are followed.
  const std::string link = tmp_.file("mine.json");
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  ASSERT_EQ(::lchown(link.c_str(), kOther, kOther), 0);
  EXPECT_EQ(refusal(link, OutputWrite::kInPlace), "");
}

TEST_F(OutputFileTest, FifosDevicesAndFilesOfOthersInSharedDirectoriesAreRefused) {
  const std::string others = others_dir("others");
  const std::string fifo = others + "/fifo.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0666), 0);
  ASSERT_EQ(::chown(fifo.c_str(), kOther, kOther), 0);
  const int reader = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);  // a reader: still refused
  ASSERT_GE(reader, 0);
  EXPECT_EQ(
      refusal(fifo, OutputWrite::kReplace),
      "cannot write '" + fifo + "': it is a FIFO in directory '" + others +
          "', which belongs to another user, and not yours: it is not written; remove it or write elsewhere");
  ::close(reader);
  const std::string device = others + "/null";
  ASSERT_EQ(::mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  ASSERT_EQ(::chown(device.c_str(), kOther, kOther), 0);
  EXPECT_NE(refusal(device, OutputWrite::kReplace).find("it is a character device in directory"),
            std::string::npos);
  // Another user's file: not overwritten in place; replaced by rename, which leaves its content alone.
  const std::string theirs = others + "/theirs.hpr";
  std::ofstream(theirs) << "theirs";
  ASSERT_EQ(::chown(theirs.c_str(), kOther, kOther), 0);
  const std::string hard = tmp_.file("hard");
  ASSERT_EQ(::link(theirs.c_str(), hard.c_str()), 0);
  EXPECT_NE(refusal(theirs, OutputWrite::kInPlace).find("it is a file in directory '" + others + "'"),
            std::string::npos);
  OutputFile replaced(theirs, OutputWrite::kReplace);
  replaced.write("root's", 6);
  replaced.commit();
  EXPECT_EQ(text_of(theirs), "root's");
  EXPECT_EQ(text_of(hard), "theirs") << "the old file was written into";
  // Root's own FIFO in root's own directory, with a reader: written in place.
  const std::string own_fifo = tmp_.file("own.fifo");
  ASSERT_EQ(::mkfifo(own_fifo.c_str(), 0600), 0);
  const int own_reader = ::open(own_fifo.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(own_reader, 0);
  {
    OutputFile file(own_fifo, OutputWrite::kReplace);
    EXPECT_TRUE(file.special());
    file.write("ok", 2);
    file.commit();
  }
  char got[4] = {};
  EXPECT_EQ(::read(own_reader, got, sizeof got), 2);
  EXPECT_STREQ(got, "ok");
  ::close(own_reader);
  EXPECT_TRUE(std::filesystem::is_fifo(own_fifo)) << "the FIFO was replaced";
}

TEST_F(OutputFileTest, FifoWithoutReaderFailsAtOnce) {
  const std::string fifo = tmp_.file("p.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(refusal(fifo, OutputWrite::kReplace),
            "cannot write '" + fifo +
                "': it is a FIFO that no process reads; start its reader first (hpctl does "
                "not wait for one)");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5);
  EXPECT_EQ(check_refusal(fifo, OutputWrite::kReplace), "") << "the check does not open a FIFO";
}

TEST_F(OutputFileTest, SocketsDirectoriesAndMissingDirectoriesAreSaid) {
  const std::string sock = tmp_.file("s.json");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(refusal(sock, OutputWrite::kReplace),
            "cannot write '" + sock + "': it is a socket, which is not written to");
  ::close(fd);
  EXPECT_EQ(refusal(tmp_.path(), OutputWrite::kReplace),
            "cannot write '" + tmp_.path() + "': it is a directory; give a file name");
  EXPECT_EQ(refusal(tmp_.file("no/such/x.json"), OutputWrite::kReplace),
            "cannot write '" + tmp_.file("no/such/x.json") + "': directory '" + tmp_.file("no/such") +
                "' does not exist");
  EXPECT_EQ(refusal("", OutputWrite::kReplace), "the output path is empty");
}

TEST(WriteOutputFully, AStalledReaderEndsTheWriteAndALowerLimitEndsAWaitBegun) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
  const std::string block(1 << 20, 'x');
  const int before = output_stall_timeout_ms();
  set_output_stall_timeout_ms(60000);
  std::thread lower([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    set_output_stall_timeout_ms(200);
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    write_output_fully(fds[1], block.data(), block.size(), "writing");
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  lower.join();
  set_output_stall_timeout_ms(before);
  EXPECT_EQ(what, "writing: the reader of the output took no data for 200 ms");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30)
      << "the lowered limit did not end the wait";
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace hpd
