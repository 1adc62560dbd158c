// Synthetic RawProfiles and their comparison for the capture tests and the benchmark.
#include "raw_profile_testing.h"

#include <algorithm>
#include <vector>

namespace hpd::testing {

RawProfile make_raw_profile(size_t samples) {
  RawProfile p;
  RecordingInfo& i = p.info;
  i.start_unix_ns = 1'700'000'000'000'000'000ull;
  i.start_mono_ns = 5'000'000'000ull;
  i.end_mono_ns = i.start_mono_ns + 2'000'000'000ull;
  i.interval_ns = 200'040;
  i.frequency_hz = 4999;
  i.backend = "perf";
  i.event = "task-clock";
  i.call_graph = "fp";
  i.call_counter = "runtime";
  i.target = "./app --flag";
  i.arguments = {"hpctl", "record", "-F", "4999", "--", "./app", "--flag"};
  i.hostname = "builder";
  i.kernel_release = "6.18.0";
  i.kernel_frames = true;
  i.logical_cpus = 2;
  i.requested_mono_ns = i.start_mono_ns - 40'000'000ull;
  i.first_sample_mono_ns = i.start_mono_ns + 1'000'000ull;
  i.host_steal_known = true;
  i.host_steal_ns = 30'000'000ull;

  const uint32_t kernel = p.intern_module("[kernel.kallsyms]", "aa11", true);
  const uint32_t app = p.intern_module("/usr/bin/app", "0123456789abcdef0123456789abcdef01234567");
  const uint32_t libc = p.intern_module("/lib/x86_64-linux-gnu/libc.so.6", "");
  const uint32_t sh = p.intern_module("/bin/sh", "feedface");
  // A module known only by its image (the vDSO), bytes of every value.
  const uint32_t vdso = p.intern_module("[vdso]", "0badc0de");
  for (int b = 0; b < 600; ++b) p.modules[vdso].image.push_back(static_cast<uint8_t>(b * 7));
  (void)kernel;

  RawProcess& a = p.process(1000);
  a.name = "app";
  a.exe = "/usr/bin/app";
  a.cmdline = {"./app", "--flag", "with space"};
  a.cgroup = "/system.slice/app.service";
  a.start_ns = i.start_mono_ns;
  a.mappings.push_back(RawMapping{0x555500001000, 0x555500005000, 0x1000, app, 0, 0});
  a.mappings.push_back(RawMapping{0x7f0000020000, 0x7f0000190000, 0x28000, libc, 0, 0});
  a.mappings.push_back(RawMapping{0x7ffff7fc1000, 0x7ffff7fc3000, 0, kNoIndex, 0, 0});  // vdso-like
  a.mappings.push_back(RawMapping{0x7ffff7fc5000, 0x7ffff7fc7000, 0, vdso, 0, 0});
  RawProcess& b = p.process(1001);
  b.name = "sh";
  b.exe = "/bin/sh";
  b.start_ns = i.start_mono_ns + 1000;
  b.end_ns = i.end_mono_ns - 5;
  b.mappings.push_back(RawMapping{0x400000, 0x480000, 0, sh, 0, i.start_mono_ns + 500'000'000});
  b.mappings.push_back(
      RawMapping{0x555500001000, 0x555500005000, 0x1000, app, i.start_mono_ns + 500'000'000, 0});

  RawThread& t0 = p.thread(1000, 1000);
  t0.name = "app";
  t0.start_ns = i.start_mono_ns;
  RawThread& t1 = p.thread(1000, 1002);
  t1.name = "worker-1";
  t1.start_ns = i.start_mono_ns + 10;
  t1.end_ns = i.end_mono_ns - 100;
  t1.lost.stack_failures = 1;
  t1.lost.truncated_stacks = 2;
  RawThread& t2 = p.thread(1001, 1001);
  t2.name = "sh";
  t2.start_ns = b.start_ns;
  t2.lost.lost_records = 7;

  const std::vector<std::vector<uint64_t>> user = {
      {0x555500001234, 0x555500002345, 0x7f0000030000},
      {0x555500001300, 0x555500002345, 0x7f0000030000},
      {0x7f0000100000, 0x555500002400, 0x555500002345, 0x7f0000030000},
      {0x400100, 0x400200},
      {0xdeadbeef},  // outside every mapping
  };
  const std::vector<uint64_t> kern = {0xffffffff81000100, 0xffffffff81000200};
  std::vector<uint32_t> stacks;
  for (const auto& u : user) stacks.push_back(p.stacks.intern({}, u));
  stacks.push_back(p.stacks.intern(kern, user[0]));
  stacks.push_back(p.stacks.intern(kern, {}));

  const int32_t tids[3][2] = {{1000, 1000}, {1000, 1002}, {1001, 1001}};
  uint64_t t = i.start_mono_ns;
  for (size_t n = 0; n < samples; ++n) {
    RawSample s;
    const auto& id = tids[n % 3];
    s.pid = id[0];
    s.tid = id[1];
    t += 150'000 + (n * 7919) % 100'000;
    s.time_ns = t - (n % 5 == 0 ? 30'000 : 0);  // not sorted: backends deliver per-CPU batches
    s.stack = n % 41 == 40 ? kNoIndex : stacks[(n * 31) % stacks.size()];
    s.cpu_delta_ns = 200'040 + (n % 13) * 1000;
    s.cpu = static_cast<uint16_t>(n % 2);
    s.stack_end = s.stack == kNoIndex ? StackEnd::kFailed
                  : n % 17 == 0       ? StackEnd::kTruncated
                                      : StackEnd::kComplete;
    p.samples.push_back(s);
    if (n % 25 == 24) {
      RawSample off = s;
      off.kind = SampleKind::kOffCpu;
      off.cpu_delta_ns = 0;
      off.off_cpu_ns = 3'000'000 + n;
      off.stack = stacks[1];
      off.stack_end = StackEnd::kComplete;
      p.samples.push_back(off);
    }
  }
  p.call_edges.push_back(RawCallEdge{1000, 0x555500002345, 0x555500001200, 123456});
  p.call_edges.push_back(RawCallEdge{1000, 0x7f0000030000, 0x555500002300, 1});
  RawCallLatency latency{1000, 0x555500001200, 123456, 9'876'543'210, 9'000'000'000, 2'000'000, {}};
  latency.histogram.ns_per_tick = 0.4347826;
  latency.histogram.buckets = {{3, 5}, {300, 123000}, {301, 450}, {719, 1}};
  p.call_latency.push_back(latency);
  // Sampled allocations (--alloc): freed, live, untracked, without a stack, in another thread.
  p.alloc = RawAllocStats{4096, 3, 5, 1, 2};
  // Freed in another thread than the one that allocated it; each with its time.
  p.allocations.push_back(RawAllocation{1000, 1000, 0x7f1200001000, 64, stacks[0], true, true,
                                        i.start_mono_ns + 7'000'000, i.start_mono_ns + 9'500'000, 1001});
  p.allocations.push_back(RawAllocation{1000, 1002, 0x7f1200002000, 1 << 20, stacks[1], false, true,
                                        i.start_mono_ns + 8'000'000, 0, 0});
  p.allocations.push_back(RawAllocation{1000, 1001, 0x7f1200003000, 4096, stacks[0], false, false,
                                        i.start_mono_ns + 8'000'001, 0, 0});
  p.allocations.push_back(RawAllocation{1000, 1000, 0x7f1200004000, 17, kNoIndex, false, true,
                                        i.start_mono_ns + 1'900'000'000, 0, 0});
  p.lost.lost_records = 7;
  p.lost.throttle_events = 2;
  p.lost.stack_failures = 1;
  p.lost.truncated_stacks = 2;
  p.kernel_symbols =
      "ffffffff81000000 T _stext\nffffffffa0001000 t bpf_prog_6deef7357e7b4530_hpd_on_cpu\t[bpf]\n";
  p.jit_symbols.push_back(RawJitSymbol{1000, 0x7f0040001040, 0x80, "LazyCompile:*hot /app.js:3"});
  p.jit_symbols.push_back(RawJitSymbol{1003, 0x7f0040000000, 1, "stub with spaces"});
  return p;
}

namespace {

std::string lost_diff(const LostCounts& a, const LostCounts& b, const std::string& where) {
  if (a.lost_records != b.lost_records || a.throttle_events != b.throttle_events ||
      a.stack_failures != b.stack_failures || a.truncated_stacks != b.truncated_stacks)
    return where + ": lost counts differ";
  return "";
}

}  // namespace

std::string diff_raw_profiles(const RawProfile& a, const RawProfile& b) {
  const RecordingInfo &x = a.info, &y = b.info;
  if (x.start_unix_ns != y.start_unix_ns || x.start_mono_ns != y.start_mono_ns ||
      x.end_mono_ns != y.end_mono_ns || x.interval_ns != y.interval_ns || x.frequency_hz != y.frequency_hz ||
      x.backend != y.backend || x.event != y.event || x.call_graph != y.call_graph || x.target != y.target ||
      x.call_counter != y.call_counter || x.arguments != y.arguments || x.hostname != y.hostname ||
      x.kernel_release != y.kernel_release || x.kernel_frames != y.kernel_frames ||
      x.logical_cpus != y.logical_cpus || x.requested_mono_ns != y.requested_mono_ns ||
      x.first_sample_mono_ns != y.first_sample_mono_ns || x.host_steal_known != y.host_steal_known ||
      x.host_steal_ns != y.host_steal_ns)
    return "recording info differs";
  if (a.modules.size() != b.modules.size()) return "module count differs";
  for (size_t i = 0; i < a.modules.size(); ++i) {
    if (a.modules[i].path != b.modules[i].path || a.modules[i].build_id != b.modules[i].build_id ||
        a.modules[i].is_kernel != b.modules[i].is_kernel || a.modules[i].image != b.modules[i].image)
      return "module " + std::to_string(i) + " differs";
  }
  if (a.processes.size() != b.processes.size()) return "process count differs";
  for (size_t i = 0; i < a.processes.size(); ++i) {
    const RawProcess &p = a.processes[i], &q = b.processes[i];
    if (p.pid != q.pid || p.name != q.name || p.exe != q.exe || p.cmdline != q.cmdline ||
        p.cgroup != q.cgroup || p.start_ns != q.start_ns || p.end_ns != q.end_ns ||
        p.mappings.size() != q.mappings.size())
      return "process " + std::to_string(p.pid) + " differs";
    for (size_t m = 0; m < p.mappings.size(); ++m) {
      const RawMapping &u = p.mappings[m], &v = q.mappings[m];
      if (u.start != v.start || u.end != v.end || u.file_offset != v.file_offset || u.module != v.module ||
          u.time_ns != v.time_ns || u.unmapped_ns != v.unmapped_ns)
        return "mapping " + std::to_string(m) + " of process " + std::to_string(p.pid) + " differs";
    }
  }
  if (a.threads.size() != b.threads.size()) return "thread count differs";
  for (size_t i = 0; i < a.threads.size(); ++i) {
    const RawThread &s = a.threads[i], &t = b.threads[i];
    if (s.pid != t.pid || s.tid != t.tid || s.name != t.name || s.start_ns != t.start_ns ||
        s.end_ns != t.end_ns)
      return "thread " + std::to_string(s.tid) + " differs";
    if (auto d = lost_diff(s.lost, t.lost, "thread " + std::to_string(s.tid)); !d.empty()) return d;
  }
  if (a.stacks.size() != b.stacks.size()) return "stack count differs";
  for (uint32_t i = 0; i < a.stacks.size(); ++i) {
    const auto ak = a.stacks.kernel_frames(i), bk = b.stacks.kernel_frames(i);
    const auto au = a.stacks.user_frames(i), bu = b.stacks.user_frames(i);
    if (!std::equal(ak.begin(), ak.end(), bk.begin(), bk.end()) ||
        !std::equal(au.begin(), au.end(), bu.begin(), bu.end()))
      return "stack " + std::to_string(i) + " differs";
    if (a.stacks[i].user_leaf != b.stacks[i].user_leaf)
      return "stack " + std::to_string(i) + "'s user leaf differs";
  }
  if (a.samples.size() != b.samples.size()) return "sample count differs";
  for (size_t i = 0; i < a.samples.size(); ++i) {
    const RawSample &s = a.samples[i], &t = b.samples[i];
    if (s.time_ns != t.time_ns || s.pid != t.pid || s.tid != t.tid || s.stack != t.stack ||
        s.cpu_delta_ns != t.cpu_delta_ns || s.off_cpu_ns != t.off_cpu_ns || s.cpu != t.cpu ||
        s.kind != t.kind || s.stack_end != t.stack_end)
      return "sample " + std::to_string(i) + " differs";
  }
  if (a.call_edges.size() != b.call_edges.size()) return "call edge count differs";
  for (size_t i = 0; i < a.call_edges.size(); ++i) {
    const RawCallEdge &e = a.call_edges[i], &f = b.call_edges[i];
    if (e.pid != f.pid || e.caller_address != f.caller_address || e.callee_address != f.callee_address ||
        e.count != f.count)
      return "call edge " + std::to_string(i) + " differs";
  }
  if (a.call_latency.size() != b.call_latency.size()) return "call latency count differs";
  for (size_t i = 0; i < a.call_latency.size(); ++i) {
    const RawCallLatency &l = a.call_latency[i], &m = b.call_latency[i];
    if (l.pid != m.pid || l.callee_address != m.callee_address || l.calls != m.calls ||
        l.sum_ns != m.sum_ns || l.outer_ns != m.outer_ns || l.max_ns != m.max_ns ||
        l.histogram.ns_per_tick != m.histogram.ns_per_tick || l.histogram.buckets != m.histogram.buckets)
      return "call latency " + std::to_string(i) + " differs";
  }
  if (a.alloc.mean_bytes != b.alloc.mean_bytes || a.alloc.processes != b.alloc.processes ||
      a.alloc.dropped != b.alloc.dropped || a.alloc.untracked != b.alloc.untracked ||
      a.alloc.frees_unmatched != b.alloc.frees_unmatched)
    return "allocation statistics differ";
  if (a.allocations.size() != b.allocations.size()) return "allocation count differs";
  for (size_t i = 0; i < a.allocations.size(); ++i) {
    const RawAllocation &l = a.allocations[i], &m = b.allocations[i];
    if (l.pid != m.pid || l.tid != m.tid || l.address != m.address || l.size != m.size ||
        l.stack != m.stack || l.freed != m.freed || l.tracked != m.tracked || l.time_ns != m.time_ns ||
        l.free_time_ns != m.free_time_ns || l.free_tid != m.free_tid)
      return "allocation " + std::to_string(i) + " differs";
  }
  if (a.kernel_symbols != b.kernel_symbols) return "kernel symbol lines differ";
  if (a.jit_symbols.size() != b.jit_symbols.size()) return "JIT symbol count differs";
  for (size_t i = 0; i < a.jit_symbols.size(); ++i) {
    const RawJitSymbol &l = a.jit_symbols[i], &m = b.jit_symbols[i];
    if (l.pid != m.pid || l.start != m.start || l.size != m.size || l.name != m.name)
      return "JIT symbol " + std::to_string(i) + " differs";
  }
  return lost_diff(a.lost, b.lost, "profile");
}

}  // namespace hpd::testing
