// Measures the RawProfile builder: CPU per record when a recording's ring records (perf_event bytes,
// or eBPF program records) go through their backend's decoder into the builder. The records are made
// up front (a process with 8 threads, 2,000 distinct stacks of 8-40 frames over 6 modules, side-band
// records between the samples), so that only decoding and building are timed.
//   builder_bench [perf|bpf] [samples]
#include <linux/perf_event.h>
#include <sys/mman.h>
#include <time.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bpf/bpf_event_decoder.h"
#include "perf/perf_event_decoder.h"
#include "perf/perf_records.h"
#include "perf_record_bytes.h"
#include "raw_profile_builder.h"

namespace {

using namespace hpd;

double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

constexpr int32_t kPid = 4242;
constexpr uint64_t kStart = 1'000'000'000;
constexpr uint64_t kSampleType = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ID |
                                 PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD | PERF_SAMPLE_READ |
                                 PERF_SAMPLE_CALLCHAIN;
const RecordLayout kLayout{kSampleType, 0, true};

const char* const kMaps =
    "00400000-00500000 r-xp 00000000 08:01 5 /usr/bin/app\n"
    "7f0000000000-7f0000200000 r-xp 00000000 08:01 6 /usr/lib/libc.so.6\n"
    "7f0000400000-7f0000600000 r-xp 00000000 08:01 7 /usr/lib/libstdc++.so.6\n"
    "7f0000800000-7f0000900000 r-xp 00000000 08:01 8 /usr/lib/libm.so.6\n"
    "7f0000a00000-7f0000b00000 r-xp 00000000 08:01 9 /usr/lib/libz.so.1\n"
    "7ffff7fc0000-7ffff7fc2000 r-xp 00000000 00:00 0 [vdso]\n";
const uint64_t kModuleStarts[] = {0x400000, 0x7f0000000000, 0x7f0000400000, 0x7f0000800000, 0x7f0000a00000};

struct Workload {
  std::vector<std::vector<uint8_t>> records;
};

// Stacks and the order of samples, the same for both backends.
std::vector<std::vector<uint64_t>> make_stacks(std::mt19937_64& rng) {
  std::vector<std::vector<uint64_t>> stacks(2000);
  for (auto& s : stacks) {
    s.resize(8 + rng() % 33);
    for (uint64_t& a : s) a = kModuleStarts[rng() % 5] + (rng() % 0x100000);
  }
  return stacks;
}

Workload perf_workload(size_t samples) {
  std::mt19937_64 rng(7);
  const auto stacks = make_stacks(rng);
  Workload w;
  std::vector<uint64_t> counters(8, 0);
  for (size_t i = 0; i < samples; ++i) {
    const uint64_t time = kStart + i * 200'000;
    const auto tid = static_cast<uint32_t>(kPid + i % 8);
    if (i % 1000 == 999) {  // a thread comes and goes now and then
      const auto t = static_cast<uint32_t>(kPid + 100 + i);
      w.records.push_back(PerfRecordBytes(PERF_RECORD_FORK, 0)
                              .u32(kPid)
                              .u32(kPid)
                              .u32(t)
                              .u32(kPid)
                              .u64(time)
                              .u32(kPid)
                              .u32(t)
                              .u64(time)
                              .u64(1)
                              .u32(0)
                              .u32(0)
                              .done());
      w.records.push_back(PerfRecordBytes(PERF_RECORD_EXIT, 0)
                              .u32(kPid)
                              .u32(kPid)
                              .u32(t)
                              .u32(t)
                              .u64(time + 1)
                              .u32(kPid)
                              .u32(t)
                              .u64(time + 1)
                              .u64(1)
                              .u32(0)
                              .u32(0)
                              .done());
    }
    const auto& stack = stacks[rng() % stacks.size()];
    uint64_t& counter = counters[i % 8];
    counter += 200'000 + rng() % 1000;
    PerfRecordBytes b(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER);
    b.u64(stack[0]).u32(kPid).u32(tid).u64(time).u64(1).u32(static_cast<uint32_t>(i % 2)).u32(0);
    b.u64(200'000).u64(counter);
    b.u64(stack.size() + 1).u64(static_cast<uint64_t>(PERF_CONTEXT_USER));
    for (const uint64_t a : stack) b.u64(a);
    w.records.push_back(b.done());
  }
  return w;
}

Workload bpf_workload(size_t samples) {
  std::mt19937_64 rng(7);
  const auto stacks = make_stacks(rng);
  Workload w;
  for (size_t i = 0; i < samples; ++i) {
    const uint64_t time = kStart + i * 200'000;
    const int32_t tid = kPid + static_cast<int32_t>(i % 8);
    hpd_event_header h{};
    h.pid = kPid;
    h.cpu = static_cast<uint32_t>(i % 2);
    h.time_ns = time;
    std::memcpy(h.comm, "app", 3);
    if (i % 1000 == 999) {
      hpd_fork_event f{};
      f.header = h;
      f.header.type = HPD_EVENT_FORK;
      f.header.tid = kPid + 100 + static_cast<int32_t>(i);
      f.parent_pid = f.parent_tid = kPid;
      w.records.emplace_back(reinterpret_cast<const uint8_t*>(&f),
                             reinterpret_cast<const uint8_t*>(&f) + sizeof f);
      hpd_task_event x{};
      x.header = f.header;
      x.header.type = HPD_EVENT_EXIT;
      x.header.time_ns = time + 1;
      w.records.emplace_back(reinterpret_cast<const uint8_t*>(&x),
                             reinterpret_cast<const uint8_t*>(&x) + sizeof x);
    }
    const auto& stack = stacks[rng() % stacks.size()];
    static hpd_sample_event e;
    std::memset(&e, 0, sizeof e);
    e.header = h;
    e.header.type = HPD_EVENT_ON_CPU;
    e.header.tid = tid;
    e.cpu_delta_ns = 200'000 + rng() % 1000;
    e.user_end = HPD_USER_END_FP_ZERO;
    e.user_frames = static_cast<uint16_t>(stack.size());
    for (size_t k = 0; k < stack.size(); ++k) e.ips[k] = stack[k];
    const size_t size = offsetof(hpd_sample_event, ips) + stack.size() * sizeof(uint64_t);
    w.records.emplace_back(reinterpret_cast<const uint8_t*>(&e), reinterpret_cast<const uint8_t*>(&e) + size);
  }
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string backend = argc > 1 ? argv[1] : "perf";
  const size_t samples = argc > 2 ? std::stoul(argv[2]) : 2'000'000;
  if (backend != "perf" && backend != "bpf") {
    std::fprintf(stderr, "usage: builder_bench [perf|bpf] [samples]\n");
    return 2;
  }
  const Workload w = backend == "perf" ? perf_workload(samples) : bpf_workload(samples);
  RawProfile profile;
  // eBPF: the maps are read again on an unknown address, as bpf_recorder.cpp wires it.
  SystemLookups lookups;
  if (backend == "bpf") lookups.read_maps = [](int32_t) { return parse_maps(kMaps); };
  RawProfileBuilder builder(profile, BuilderConfig{TrackerConfig{kStart}, false}, lookups);
  builder.processes().add_initial_process(kPid, parse_maps(kMaps));
  const EventSink to_builder = [&](const Event& e) { builder.on_event(e); };
  const double start = process_cpu_s();
  if (backend == "perf") {
    PerfEventDecoder decoder(PerfDecoderConfig{true, 127, false, 0});
    for (const auto& bytes : w.records) {
      if (auto record = decode_record(bytes, kLayout)) decoder.decode(*record, bytes.size(), to_builder);
    }
  } else {
    BpfEventDecoder decoder;
    for (const auto& bytes : w.records) decoder.decode(bytes, to_builder);
  }
  const double cpu = process_cpu_s() - start;
  std::printf("%s: %zu records, %zu samples, %zu stacks: %.1f ns CPU per record\n", backend.c_str(),
              w.records.size(), profile.samples.size(), static_cast<size_t>(profile.stacks.size()),
              cpu * 1e9 / static_cast<double>(w.records.size()));
  return profile.samples.size() == samples ? 0 : 1;
}
