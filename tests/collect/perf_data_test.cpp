// perf.data files (hpd/collect/perf_data.h) written here byte by byte, as perf.data-file-format.txt
// lays them out: what the reader makes of them, and what it says of truncated, corrupt, empty and
// unusable ones (a PerfDataError naming the reason, never a crash: cut at every record boundary and
// at every byte of the header, and with every byte of a file flipped).
#include <linux/perf_event.h>
#include <sys/mman.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "hpd/collect/perf_data.h"

namespace hpd {
namespace {

constexpr uint64_t kSampleType = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ID |
                                 PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD | PERF_SAMPLE_CALLCHAIN;
constexpr uint64_t kPeriod = 1'001'001;
constexpr int32_t kPid = 100;
const std::string kBuildId = "0123456789abcdef0123456789abcdef01234567";

struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
  }
  void put_string(const std::string& s, size_t align) {
    const size_t n = (s.size() + 1 + align - 1) / align * align;
    b.insert(b.end(), s.begin(), s.end());
    b.insert(b.end(), n - s.size(), 0);
  }
  void pad8() { b.resize((b.size() + 7) / 8 * 8, 0); }
};

// Records with the sample_id trailer of kSampleType (TID, TIME, ID, CPU).
class RecordWriter {
 public:
  std::vector<size_t> boundaries;  // offsets of each record within `out`
  Bytes out;

  void record(uint32_t type, uint16_t misc, const Bytes& body, bool trailer, int32_t pid, int32_t tid,
              uint64_t time) {
    Bytes r = body;
    r.pad8();
    if (trailer) {
      r.put(pid);
      r.put(tid);
      r.put(time);
      r.put(uint64_t{7});  // id
      r.put(uint32_t{0});  // cpu
      r.put(uint32_t{0});
    }
    boundaries.push_back(out.b.size());
    out.put(perf_event_header{type, misc, static_cast<uint16_t>(sizeof(perf_event_header) + r.b.size())});
    out.b.insert(out.b.end(), r.b.begin(), r.b.end());
  }
  void comm(int32_t pid, int32_t tid, const std::string& name, bool exec, uint64_t time) {
    Bytes body;
    body.put(pid);
    body.put(tid);
    body.put_string(name, 8);
    record(PERF_RECORD_COMM, exec ? PERF_RECORD_MISC_COMM_EXEC : 0, body, true, pid, tid, time);
  }
  void mmap2(int32_t pid, uint64_t start, uint64_t len, const std::string& path, uint64_t time) {
    Bytes body;
    body.put(pid);
    body.put(pid);
    body.put(start);
    body.put(len);
    body.put(uint64_t{0});  // pgoff
    body.put(uint32_t{8});  // maj, min, ino, ino_generation
    body.put(uint32_t{1});
    body.put(uint64_t{1234});
    body.put(uint64_t{0});
    body.put(uint32_t{PROT_READ | PROT_EXEC});
    body.put(uint32_t{MAP_PRIVATE});
    body.put_string(path, 8);
    record(PERF_RECORD_MMAP2, PERF_RECORD_MISC_USER, body, true, pid, pid, time);
  }
  void kernel_mmap(uint64_t text) {
    Bytes body;
    body.put(int32_t{-1});
    body.put(int32_t{0});
    body.put(text);
    body.put(uint64_t{0x1000000});
    body.put(text);
    body.put_string("[kernel.kallsyms]_text", 8);
    record(PERF_RECORD_MMAP, PERF_RECORD_MISC_KERNEL, body, true, 0, 0, 0);
  }
  void task(uint32_t type, int32_t pid, int32_t ppid, int32_t tid, int32_t ptid, uint64_t time) {
    Bytes body;
    body.put(pid);
    body.put(ppid);
    body.put(tid);
    body.put(ptid);
    body.put(time);
    record(type, 0, body, true, pid, tid, time);
  }
  void sample(int32_t pid, int32_t tid, uint64_t time, uint64_t id, std::vector<uint64_t> user_chain) {
    Bytes body;
    body.put(user_chain.front());  // ip
    body.put(pid);
    body.put(tid);
    body.put(time);
    body.put(id);
    body.put(uint32_t{1});  // cpu
    body.put(uint32_t{0});
    body.put(kPeriod);
    body.put(uint64_t{user_chain.size() + 1});
    body.put(static_cast<uint64_t>(PERF_CONTEXT_USER));
    for (uint64_t a : user_chain) body.put(a);
    record(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, body, false, pid, tid, time);
  }
  void lost(uint64_t count, uint64_t time) {
    Bytes body;
    body.put(uint64_t{7});
    body.put(count);
    record(PERF_RECORD_LOST, 0, body, true, 0, 0, time);
  }
  void finished_round() { record(68, 0, Bytes{}, false, 0, 0, 0); }
};

perf_event_attr make_attr(uint32_t type, uint64_t config) {
  perf_event_attr a{};
  a.type = type;
  a.size = sizeof a;
  a.config = config;
  a.sample_type = kSampleType;
  a.freq = 1;
  a.sample_freq = 999;
  a.sample_id_all = 1;
  return a;
}

struct Feature {
  uint32_t bit;
  Bytes data;
};

Bytes header_string(const std::string& s) {
  Bytes b;
  const uint32_t len = static_cast<uint32_t>((s.size() + 1 + 63) / 64 * 64);
  b.put(len);
  b.put_string(s, 64);
  return b;
}

Bytes build_id_section(const std::string& path, const std::string& hex) {
  Bytes b;
  Bytes body;
  body.put(int32_t{-1});
  uint8_t id[24] = {};
  for (size_t i = 0; i < 20; ++i) id[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  id[20] = 20;
  body.put(id);
  body.put_string(path, 64);
  b.put(perf_event_header{2 /*HEADER_BUILD_ID*/, PERF_RECORD_MISC_USER | (1u << 15),
                          static_cast<uint16_t>(sizeof(perf_event_header) + body.b.size())});
  b.b.insert(b.b.end(), body.b.begin(), body.b.end());
  return b;
}

// A file-mode perf.data: header, attrs and their ids, the data, the feature table and sections.
struct File {
  std::vector<uint8_t> bytes;
  size_t data_offset = 0;
  std::vector<size_t> boundaries;  // absolute offsets of the data records
};

File write_file(const std::vector<perf_event_attr>& attrs, const RecordWriter& records,
                std::vector<Feature> features) {
  Bytes f;
  f.b.resize(104);
  const uint64_t attr_size = sizeof(perf_event_attr) + 16;
  const uint64_t attrs_offset = f.b.size();
  const uint64_t ids_offset = attrs_offset + attr_size * attrs.size();
  for (size_t i = 0; i < attrs.size(); ++i) {
    f.put(attrs[i]);
    f.put(ids_offset + 8 * i);
    f.put(uint64_t{8});
  }
  for (size_t i = 0; i < attrs.size(); ++i) f.put(uint64_t{7 + i});  // event i has id 7 + i
  const uint64_t data_offset = f.b.size();
  f.b.insert(f.b.end(), records.out.b.begin(), records.out.b.end());
  const uint64_t data_size = records.out.b.size();
  uint64_t bits[4] = {};
  for (const Feature& feat : features) bits[feat.bit / 64] |= uint64_t{1} << (feat.bit % 64);
  uint64_t at = f.b.size() + 16 * features.size();
  for (const Feature& feat : features) {
    f.put(at);
    f.put(uint64_t{feat.data.b.size()});
    at += feat.data.b.size();
  }
  for (const Feature& feat : features) f.b.insert(f.b.end(), feat.data.b.begin(), feat.data.b.end());
  const uint64_t magic = 0x32454c4946524550ULL;
  std::memcpy(f.b.data(), &magic, 8);
  const uint64_t header_size = 104;
  std::memcpy(f.b.data() + 8, &header_size, 8);
  std::memcpy(f.b.data() + 16, &attr_size, 8);
  std::memcpy(f.b.data() + 24, &attrs_offset, 8);
  const uint64_t attrs_size = attr_size * attrs.size();
  std::memcpy(f.b.data() + 32, &attrs_size, 8);
  std::memcpy(f.b.data() + 40, &data_offset, 8);
  std::memcpy(f.b.data() + 48, &data_size, 8);
  std::memcpy(f.b.data() + 72, bits, sizeof bits);
  File file{f.b, data_offset, {}};
  for (size_t b : records.boundaries) file.boundaries.push_back(data_offset + b);
  return file;
}

// A program that execs, maps /bin/prog, starts a thread; 10 samples (the rings' order, not time's),
// a lost record, the thread's exit.
RecordWriter typical_records(uint64_t id = 7) {
  RecordWriter w;
  w.kernel_mmap(0xffffffff81000000ULL);
  w.comm(kPid, kPid, "prog", true, 1000);
  w.mmap2(kPid, 0x400000, 0x10000, "/bin/prog", 1100);
  w.task(PERF_RECORD_FORK, kPid, kPid, kPid + 1, kPid, 1200);
  for (int i = 9; i >= 0; --i) {
    const int32_t tid = i % 2 == 0 ? kPid : kPid + 1;
    w.sample(kPid, tid, 2000 + 1000 * static_cast<uint64_t>(i), id, {0x400100, 0x400200});
    if (i == 5) w.finished_round();
  }
  w.lost(3, 9000);
  w.task(PERF_RECORD_EXIT, kPid, kPid, kPid + 1, kPid, 20000);
  return w;
}

std::vector<Feature> typical_features() {
  Bytes cmdline;
  cmdline.put(uint32_t{3});
  for (const char* arg : {"perf", "record", "./prog"}) {
    const Bytes s = header_string(arg);
    cmdline.b.insert(cmdline.b.end(), s.b.begin(), s.b.end());
  }
  return {Feature{2, build_id_section("/bin/prog", kBuildId)}, Feature{3, header_string("testhost")},
          Feature{11, cmdline}};
}

File typical_file() {
  return write_file({make_attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK)}, typical_records(),
                    typical_features());
}

std::string error_of(std::span<const uint8_t> bytes) {
  try {
    read_perf_data(bytes, "f.data");
  } catch (const PerfDataError& e) {
    return e.what();
  }
  return "";
}

std::string all_notes(const PerfDataContents& c) {
  std::string s;
  for (const std::string& n : c.notes) s += n + "\n";
  return s;
}

TEST(PerfData, ReadsSamplesThreadsMappingsAndBuildIds) {
  const File file = typical_file();
  const PerfDataContents c = read_perf_data(file.bytes, "f.data");
  const RawProfile& p = c.profile;
  ASSERT_EQ(p.sample_count(), 10u);
  uint64_t cpu = 0, last_time = 0;
  for (const RawSample& s : p.samples) {
    cpu += s.cpu_delta_ns;
    EXPECT_GE(s.time_ns, last_time) << "fed in time order";
    last_time = s.time_ns;
    ASSERT_NE(s.stack, kNoIndex);
    const auto user = p.stacks.user_frames(s.stack);
    ASSERT_EQ(user.size(), 2u);
    EXPECT_EQ(user[0], 0x400100u);
  }
  EXPECT_EQ(cpu, 10 * kPeriod);  // each sample's period is its CPU time
  const RawProcess* process = p.find_process(kPid);
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(process->name, "prog");
  ASSERT_EQ(process->mappings.size(), 1u);
  const RawModule& m = p.modules[process->mappings[0].module];
  EXPECT_EQ(m.path, "/bin/prog");
  EXPECT_EQ(m.build_id, kBuildId);
  const RawThread* thread = p.find_thread(kPid, kPid + 1);
  ASSERT_NE(thread, nullptr);
  EXPECT_EQ(thread->start_ns, 1200u);
  EXPECT_EQ(thread->end_ns, 20000u);
  EXPECT_EQ(p.lost.lost_records, 3u);
  EXPECT_EQ(p.info.event, "cpu-clock");
  EXPECT_EQ(p.info.frequency_hz, 999u);
  EXPECT_EQ(p.info.call_graph, "fp");
  EXPECT_EQ(p.info.hostname, "testhost");
  EXPECT_EQ(p.info.target, "perf record ./prog");
  const std::string notes = all_notes(c);
  EXPECT_NE(notes.find("event cpu-clock at 999 Hz"), std::string::npos) << notes;
  EXPECT_NE(notes.find("call graph fp"), std::string::npos) << notes;
  EXPECT_NE(notes.find("time off the CPU"), std::string::npos) << notes;
  EXPECT_NE(notes.find("perf lost 3 records"), std::string::npos) << notes;
}

TEST(PerfData, EveryTruncationIsAnErrorNamingIt) {
  const File file = typical_file();
  ASSERT_EQ(error_of(file.bytes), "");
  // At every byte of the header and the attributes, at every record boundary and inside each record,
  // and in the feature table and sections.
  std::vector<size_t> cuts;
  for (size_t n = 0; n < file.data_offset; ++n) cuts.push_back(n);
  for (size_t b : file.boundaries) {
    cuts.push_back(b);
    cuts.push_back(b + 4);
    cuts.push_back(b + 12);
  }
  for (size_t n = file.boundaries.back() + 1; n < file.bytes.size(); ++n) cuts.push_back(n);
  for (size_t n : cuts) {
    const std::string error = error_of(std::span(file.bytes).first(n));
    EXPECT_NE(error, "") << "cut at " << n << " of " << file.bytes.size() << " was read";
    if (n == 0) {
      EXPECT_NE(error.find("empty"), std::string::npos) << error;
    } else if (n >= 104) {
      EXPECT_NE(error.find("truncated"), std::string::npos) << "cut at " << n << ": " << error;
    }
  }
}

TEST(PerfData, FlippedBytesAreReadOrRefusedNeverACrash) {
  const File file = typical_file();
  for (size_t i = 0; i < file.bytes.size(); ++i) {
    for (uint8_t flip : {uint8_t{0xff}, uint8_t{0x80}, uint8_t{0x01}}) {
      std::vector<uint8_t> bytes = file.bytes;
      bytes[i] ^= flip;
      try {
        read_perf_data(bytes, "f.data");
      } catch (const PerfDataError&) {
      }
    }
  }
}

TEST(PerfData, EmptyAndForeignFilesAreNamed) {
  EXPECT_NE(error_of({}).find("f.data: the file is empty"), std::string::npos);
  const std::string json = R"({"meta": {}})";
  EXPECT_NE(
      error_of({reinterpret_cast<const uint8_t*>(json.data()), json.size()}).find("not a perf.data file"),
      std::string::npos);
  File file = typical_file();
  std::reverse(file.bytes.begin(), file.bytes.begin() + 8);  // the other byte order
  EXPECT_NE(error_of(file.bytes).find("other byte order"), std::string::npos);
}

TEST(PerfData, EventsHpdCannotMapAreSkippedAndSaidSo) {
  // Only a hardware event: nothing to read, and the error says what to record instead.
  const File cycles = write_file({make_attr(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES)}, typical_records(),
                                 typical_features());
  const std::string error = error_of(cycles.bytes);
  EXPECT_NE(error.find("no samples hpd can read"), std::string::npos) << error;
  EXPECT_NE(error.find("hardware event 0 (10 samples)"), std::string::npos) << error;
  EXPECT_NE(error.find("-e cpu-clock"), std::string::npos) << error;

  // cpu-clock (id 7) beside a tracepoint (id 8): the tracepoint's samples are skipped and counted.
  RecordWriter w = typical_records(7);
  w.sample(kPid, kPid, 15000, 8, {0x400100});
  w.sample(kPid, kPid, 15001, 8, {0x400100});
  const File mixed = write_file(
      {make_attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK), make_attr(PERF_TYPE_TRACEPOINT, 312)}, w,
      typical_features());
  const PerfDataContents c = read_perf_data(mixed.bytes, "f.data");
  EXPECT_EQ(c.profile.sample_count(), 10u);
  const std::string notes = all_notes(c);
  EXPECT_NE(notes.find("skipped 2 samples of event tracepoint 312 (a tracepoint)"), std::string::npos)
      << notes;
}

TEST(PerfData, EventsOfDifferentLayoutsAreToldApartByTheirIdentifier) {
  // As perf writes cpu-clock beside a tracepoint: the tracepoint's samples add CPU and RAW, so every
  // record starts (samples) or ends (the sample_id trailer) with PERF_SAMPLE_IDENTIFIER.
  perf_event_attr clock = make_attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK);
  clock.sample_type = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                      PERF_SAMPLE_PERIOD | PERF_SAMPLE_CALLCHAIN;
  perf_event_attr tracepoint = make_attr(PERF_TYPE_TRACEPOINT, 312);
  tracepoint.sample_type = clock.sample_type | PERF_SAMPLE_CPU | PERF_SAMPLE_RAW;
  RecordWriter w;
  auto add = [&w](uint32_t type, uint16_t misc, Bytes body) {
    w.boundaries.push_back(w.out.b.size());
    w.out.put(
        perf_event_header{type, misc, static_cast<uint16_t>(sizeof(perf_event_header) + body.b.size())});
    w.out.b.insert(w.out.b.end(), body.b.begin(), body.b.end());
  };
  {
    // perf's synthesized mapping: a zero trailer (TID, TIME, IDENTIFIER of the first event's layout).
    Bytes body;
    body.put(kPid);
    body.put(kPid);
    body.put(uint64_t{0x400000});
    body.put(uint64_t{0x10000});
    body.put(uint64_t{0});
    body.put_string("/bin/prog", 8);
    body.b.insert(body.b.end(), 24, 0);
    add(PERF_RECORD_MMAP, PERF_RECORD_MISC_USER, body);
  }
  for (int i = 0; i < 5; ++i) {
    const bool tp = i % 2 == 1;
    Bytes body;
    body.put(uint64_t{tp ? 8u : 7u});  // identifier
    body.put(uint64_t{0x400100});
    body.put(kPid);
    body.put(kPid);
    body.put(uint64_t{1000} + static_cast<uint64_t>(i));
    if (tp) {
      body.put(uint32_t{1});  // cpu
      body.put(uint32_t{0});
    }
    body.put(kPeriod);
    body.put(uint64_t{2});
    body.put(static_cast<uint64_t>(PERF_CONTEXT_USER));
    body.put(uint64_t{0x400100});
    if (tp) {
      body.put(uint32_t{4});  // raw: size, then the bytes
      body.put(uint32_t{0xabcd});
    }
    add(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, body);
  }
  {
    // The thread's exit, in the tracepoint's trailer: TID, TIME, CPU, IDENTIFIER.
    Bytes body;
    for (int32_t v : {kPid, kPid, kPid, kPid}) body.put(v);
    body.put(uint64_t{5000});
    body.put(kPid);
    body.put(kPid);
    body.put(uint64_t{5000});
    body.put(uint64_t{1});
    body.put(uint64_t{8});
    add(PERF_RECORD_EXIT, 0, body);
  }
  const File file = write_file({clock, tracepoint}, w, typical_features());
  const PerfDataContents c = read_perf_data(file.bytes, "f.data");
  EXPECT_EQ(c.profile.sample_count(), 3u);
  const RawProcess* process = c.profile.find_process(kPid);
  ASSERT_NE(process, nullptr);
  ASSERT_EQ(process->mappings.size(), 1u);
  EXPECT_EQ(c.profile.modules[process->mappings[0].module].build_id, kBuildId);
  const RawThread* thread = c.profile.find_thread(kPid, kPid);
  ASSERT_NE(thread, nullptr);
  EXPECT_EQ(thread->end_ns, 5000u);
  const std::string notes = all_notes(c);
  EXPECT_NE(notes.find("skipped 2 samples of event tracepoint 312"), std::string::npos) << notes;
  EXPECT_EQ(notes.find("not read"), std::string::npos) << notes;
}

TEST(PerfData, PipeModeFileCarriesItsAttributesAsRecords) {
  // perf record -o -: a 16-byte header, then an ATTR record (attribute and ids) before the records.
  Bytes f;
  f.put(uint64_t{0x32454c4946524550ULL});
  f.put(uint64_t{16});
  const perf_event_attr attr = make_attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK);
  f.put(perf_event_header{64, 0, static_cast<uint16_t>(sizeof(perf_event_header) + sizeof attr + 8)});
  f.put(attr);
  f.put(uint64_t{7});
  const RecordWriter w = typical_records();
  f.b.insert(f.b.end(), w.out.b.begin(), w.out.b.end());
  const PerfDataContents c = read_perf_data(f.b, "pipe.data");
  EXPECT_EQ(c.profile.sample_count(), 10u);
  EXPECT_EQ(c.profile.info.event, "task-clock");
  const std::string notes = all_notes(c);
  EXPECT_NE(notes.find("pipe-mode perf.data"), std::string::npos) << notes;
  EXPECT_NE(notes.find("carries no build-ids"), std::string::npos) << notes;
  // Cut inside its last record: a pipe-mode file has no size in its header, the record says it.
  const std::string error = error_of(std::span(f.b).first(f.b.size() - 4));
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
}

}  // namespace
}  // namespace hpd
