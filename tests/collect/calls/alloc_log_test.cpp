// calls::AllocLog, the reader of the runtime's allocation log, on logs written here byte by byte: a
// log a client hands over (hpd recording `hpctl record --alloc -- CMD`) is every byte the client's, so
// it is adopted only when it is what hpctl makes, and read within the layout, the processes the
// recording follows and hpd's limits, whatever it holds.
#include "hpd/calls/alloc_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "hpd/calls/alloc_abi.h"
#include "hpd/calls/call_counter.h"

namespace hpd::calls {
namespace {

// Appends records to a log as the runtime does (its cursor in the header, then the record).
class LogWriter {
 public:
  explicit LogWriter(int fd) : fd_(fd) {}
  void alloc(int32_t pid, int32_t tid, uint64_t address, uint64_t size, uint64_t time_ns,
             std::vector<uint64_t> frames, uint32_t kind = HPD_ALLOC_RECORD_ALLOC) {
    hpd_alloc_record r{};
    r.kind = kind;
    r.frames = static_cast<uint32_t>(frames.size());
    r.pid = pid;
    r.tid = tid;
    r.address = address;
    r.size = size;
    r.time_ns = time_ns;
    std::vector<uint8_t> bytes(sizeof r + 8 * frames.size());
    std::memcpy(bytes.data(), &r, sizeof r);
    std::memcpy(bytes.data() + sizeof r, frames.data(), 8 * frames.size());
    append(bytes);
  }
  void free(int32_t pid, int32_t tid, uint64_t address, uint64_t time_ns) {
    hpd_alloc_record r{};
    r.kind = HPD_ALLOC_RECORD_FREE;
    r.pid = pid;
    r.tid = tid;
    r.address = address;
    r.time_ns = time_ns;
    std::vector<uint8_t> bytes(sizeof r);
    std::memcpy(bytes.data(), &r, sizeof r);
    append(bytes);
  }
  void append(const std::vector<uint8_t>& bytes) {
    ASSERT_EQ(
        ::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(sizeof(hpd_alloc_header) + cursor_)),
        static_cast<ssize_t>(bytes.size()));
    cursor_ += bytes.size();
    set_header_field(offsetof(hpd_alloc_header, cursor), cursor_);
  }
  void set_header_field(size_t offset, uint64_t value) {
    ASSERT_EQ(::pwrite(fd_, &value, sizeof value, static_cast<off_t>(offset)), 8);
  }

 private:
  int fd_;
  uint64_t cursor_ = 0;
};

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  return text;
}

bool mentions(const std::vector<std::string>& lines, const std::string& what) {
  return joined(lines).find(what) != std::string::npos;
}

UniqueFd dup_of(const AllocLog& log) {
  return UniqueFd(::fcntl(log.fd(), F_DUPFD_CLOEXEC, 0));
}

TEST(AllocLog, AHandedOverLogIsReadForTheFollowedProcessesOnly) {
  const AllocLog made(4096);
  LogWriter w(made.fd());
  w.set_header_field(offsetof(hpd_alloc_header, processes), 2);
  w.alloc(100, 101, 0x1000, 64, 5000, {0x401000, 0x401100});
  w.alloc(200, 200, 0x2000, 64, 5001, {0x401000});  // a process the recording does not follow
  w.free(100, 102, 0x1000, 7000);                   // freed by another thread of the process
  w.free(200, 200, 0x2000, 7001);
  w.alloc(100, 101, 0x3000, 1 << 20, 8000, {0x401200});
  const AllocLog adopted(dup_of(made));
  EXPECT_EQ(adopted.mean_bytes(), 4096u);
  RawProfile profile;
  const std::set<int32_t> followed = {100};
  const std::vector<std::string> messages = adopted.read(profile, &followed, AllocLog::kClientLimits);
  ASSERT_EQ(profile.allocations.size(), 2u) << joined(messages);
  const RawAllocation& a = profile.allocations[0];
  EXPECT_EQ(a.pid, 100);
  EXPECT_EQ(a.tid, 101);
  EXPECT_EQ(a.time_ns, 5000u);
  EXPECT_TRUE(a.freed);
  EXPECT_EQ(a.free_time_ns, 7000u);
  EXPECT_EQ(a.free_tid, 102);
  EXPECT_FALSE(profile.allocations[1].freed);
  EXPECT_EQ(profile.allocations[1].time_ns, 8000u);
  EXPECT_EQ(profile.alloc.mean_bytes, 4096u);
  EXPECT_EQ(profile.alloc.frees_unmatched, 0u);
  EXPECT_TRUE(mentions(messages,
                       "2 record(s) of the runtime's log name processes this recording does not "
                       "follow"))
      << joined(messages);
}

TEST(AllocLog, OnlyALogOfThisLayoutIsAdopted) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  ::close(pipe_fds[1]);
  try {
    AllocLog log{UniqueFd(pipe_fds[0])};
    ADD_FAILURE() << "a pipe was adopted";
  } catch (const CallCountError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  {
    const AllocLog made(4096);
    ASSERT_EQ(::ftruncate(made.fd(), 4096), 0);
    try {
      AllocLog log(dup_of(made));
      ADD_FAILURE() << "a log of the wrong size was adopted";
    } catch (const CallCountError& e) {
      EXPECT_NE(std::string(e.what()).find("bytes, not the"), std::string::npos) << e.what();
    }
  }
  for (const auto& [field, value, expected] :
       {std::tuple{offsetof(hpd_alloc_header, mean_bytes), uint64_t{0}, "sampling mean of 0 bytes"},
        std::tuple{offsetof(hpd_alloc_header, magic), uint64_t{42}, "does not hold this hpd's layout"},
        std::tuple{offsetof(hpd_alloc_header, mean_bytes), uint64_t{1} << 50, "sampling mean of"}}) {
    SCOPED_TRACE(expected);
    const AllocLog made(4096);
    LogWriter(made.fd()).set_header_field(field, value);
    try {
      AllocLog log(dup_of(made));
      ADD_FAILURE() << "adopted";
    } catch (const CallCountError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

// Records no runtime writes (a kind of its own, more frames than a runtime keeps, a record past the
// cursor), a log truncated after it was adopted, more allocations than hpd keeps: each read ends
// with a message, nothing beyond the damage is read, and nothing crashes.
TEST(AllocLog, DamageTruncationAndLimitsAreReportedNotTrusted) {
  {
    const AllocLog made(4096);
    LogWriter w(made.fd());
    w.alloc(100, 100, 0x1000, 64, 1, {0x401000});
    w.alloc(100, 100, 0x2000, 64, 2, {0x401000}, 77);
    w.alloc(100, 100, 0x3000, 64, 3, {0x401000});
    RawProfile profile;
    const std::vector<std::string> messages = AllocLog(dup_of(made)).read(profile);
    EXPECT_EQ(profile.allocations.size(), 1u);
    EXPECT_TRUE(mentions(messages, "the runtime's log is damaged at byte")) << joined(messages);
  }
  {
    const AllocLog made(4096);
    LogWriter w(made.fd());
    w.alloc(100, 100, 0x1000, 64, 1, {0x401000});
    hpd_alloc_record r{};
    r.kind = HPD_ALLOC_RECORD_ALLOC;
    r.frames = HPD_ALLOC_MAX_FRAMES + 1;
    std::vector<uint8_t> bytes(sizeof r);
    std::memcpy(bytes.data(), &r, sizeof r);
    w.append(bytes);
    // The cursor claims the whole file.
    w.set_header_field(offsetof(hpd_alloc_header, cursor), UINT64_MAX);
    RawProfile profile;
    const std::vector<std::string> messages = AllocLog(dup_of(made)).read(profile);
    EXPECT_EQ(profile.allocations.size(), 1u);
    EXPECT_TRUE(mentions(messages, "damaged")) << joined(messages);
  }
  {
    const AllocLog made(4096);
    LogWriter w(made.fd());
    for (int i = 0; i < 10; ++i) w.alloc(100, 100, 0x1000 + 0x100 * i, 64, i, {0x401000});
    const AllocLog adopted(dup_of(made));
    // Cut after the third record, once hpd holds the log.
    ASSERT_EQ(::ftruncate(made.fd(),
                          static_cast<off_t>(sizeof(hpd_alloc_header) + 3 * hpd_alloc_record_size(1) + 5)),
              0);
    RawProfile profile;
    const std::vector<std::string> messages = adopted.read(profile);
    EXPECT_EQ(profile.allocations.size(), 3u);
    EXPECT_TRUE(mentions(messages, "truncated while recording")) << joined(messages);
  }
  {
    const AllocLog made(4096);
    LogWriter w(made.fd());
    for (int i = 0; i < 10; ++i) w.alloc(100, 100, 0x1000 + 0x100 * i, 64, i, {0x401000});
    RawProfile profile;
    const std::vector<std::string> messages =
        AllocLog(dup_of(made)).read(profile, nullptr, AllocLogLimits{4});
    EXPECT_EQ(profile.allocations.size(), 4u);
    EXPECT_EQ(profile.alloc.dropped, 6u);
    EXPECT_TRUE(mentions(messages, "hpd keeps at most 4 sampled allocations")) << joined(messages);
  }
}

}  // namespace
}  // namespace hpd::calls
