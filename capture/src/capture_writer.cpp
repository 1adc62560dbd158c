// CaptureWriter: appends zstd-compressed blocks with what is new in a growing RawProfile.
#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "capture_codec.h"
#include "hpd/base/output_file.h"
#include "hpd/base/process.h"
#include "hpd/base/unique_fd.h"
#include "hpd/capture/capture.h"

namespace hpd {

using capture::BlockType;
using capture::Encoder;

namespace {

bool same_lost(const LostCounts& a, const LostCounts& b) {
  return a.lost_records == b.lost_records && a.throttle_events == b.throttle_events &&
         a.stack_failures == b.stack_failures && a.truncated_stacks == b.truncated_stacks;
}

bool same_mapping(const RawMapping& a, const RawMapping& b) {
  return a.start == b.start && a.end == b.end && a.file_offset == b.file_offset && a.module == b.module &&
         a.time_ns == b.time_ns && a.unmapped_ns == b.unmapped_ns;
}

bool same_process_fields(const RawProcess& a, const RawProcess& b) {
  return a.pid == b.pid && a.name == b.name && a.exe == b.exe && a.cmdline == b.cmdline &&
         a.cgroup == b.cgroup && a.start_ns == b.start_ns && a.end_ns == b.end_ns;
}

bool same_thread(const RawThread& a, const RawThread& b) {
  return a.pid == b.pid && a.tid == b.tid && a.name == b.name && a.start_ns == b.start_ns &&
         a.end_ns == b.end_ns && same_lost(a.lost, b.lost);
}

bool same_info(const RecordingInfo& a, const RecordingInfo& b) {
  return a.start_unix_ns == b.start_unix_ns && a.start_mono_ns == b.start_mono_ns &&
         a.end_mono_ns == b.end_mono_ns && a.interval_ns == b.interval_ns &&
         a.frequency_hz == b.frequency_hz && a.backend == b.backend && a.event == b.event &&
         a.call_graph == b.call_graph && a.target == b.target && a.arguments == b.arguments &&
         a.hostname == b.hostname && a.kernel_release == b.kernel_release &&
         a.kernel_frames == b.kernel_frames && a.logical_cpus == b.logical_cpus &&
         a.call_counter == b.call_counter && a.requested_mono_ns == b.requested_mono_ns &&
         a.first_sample_mono_ns == b.first_sample_mono_ns && a.host_steal_known == b.host_steal_known &&
         a.host_steal_ns == b.host_steal_ns;
}

bool same_latency(const std::vector<RawCallLatency>& a, const std::vector<RawCallLatency>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].pid != b[i].pid || a[i].callee_address != b[i].callee_address || a[i].calls != b[i].calls ||
        a[i].sum_ns != b[i].sum_ns || a[i].max_ns != b[i].max_ns)
      return false;
  }
  return true;
}

bool same_edges(const std::vector<RawCallEdge>& a, const std::vector<RawCallEdge>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].pid != b[i].pid || a[i].caller_address != b[i].caller_address ||
        a[i].callee_address != b[i].callee_address || a[i].count != b[i].count)
      return false;
  }
  return true;
}

void encode_lost(Encoder& e, const LostCounts& l) {
  e.var(l.lost_records);
  e.var(l.throttle_events);
  e.var(l.stack_failures);
  e.var(l.truncated_stacks);
}

}  // namespace

struct CaptureWriter::State {
  std::string path;
  CaptureWriterOptions options;
  UniqueFd fd;
  ZSTD_CCtx* cctx = nullptr;
  std::string boot_id;
  uint64_t bytes = 0;
  uint64_t blocks = 0;
  bool finished = false;

  // What has been written so far, to find what is new or changed.
  bool info_written = false;
  RecordingInfo info;
  size_t modules = 0;
  std::vector<bool> image_written;  // by module index
  struct WrittenProcess {
    RawProcess fields;  // without mappings
    std::vector<RawMapping> mappings;
  };
  std::unordered_map<int32_t, WrittenProcess> processes;
  std::vector<RawThread> threads;  // same order as RawProfile::threads
  size_t stacks = 0;               // of the current generation
  uint32_t stack_generation = 0;   // RawProfile::stack_generation of the stacks written
  uint64_t samples = 0;            // written so far, in the whole recording
  std::vector<RawCallEdge> edges;
  std::vector<RawCallLatency> latency;
  size_t allocations = 0;  // written in the last allocations block, with alloc_mean
  uint64_t alloc_mean = 0;
  // MIP snapshots are only ever appended, so their count says whether a new block is due.
  size_t mip_snapshots = 0;
  LostCounts lost;
  std::string kernel_symbols;
  size_t jit_symbols = 0;
  Encoder enc;
  std::vector<uint8_t> compressed;

  [[noreturn]] void fail(const std::string& what, int err) const {
    throw CaptureError("cannot write capture file '" + path + "': " + what + ": " + std::strerror(err));
  }

  void write_all(const uint8_t* data, size_t size) {
    try {
      bytes += write_output_fully(fd.get(), data, size, "write");
    } catch (const std::runtime_error& e) {
      throw CaptureError("cannot write capture file '" + path + "': " + e.what());
    }
  }

  // Frames, compresses and writes the payload in `enc` as one block, with one write() call.
  void emit(BlockType type, bool required = true) {
    const std::string& raw = enc.bytes();
    uint16_t flags = required ? capture::kFlagRequired : 0;
    std::span<const uint8_t> stored(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
    if (raw.size() >= 64) {  // tiny payloads do not shrink; a zstd frame header alone is 6+ bytes
      compressed.resize(capture::kBlockHeaderSize + ZSTD_compressBound(raw.size()));
      const size_t n = ZSTD_compressCCtx(cctx, compressed.data() + capture::kBlockHeaderSize,
                                         compressed.size() - capture::kBlockHeaderSize, raw.data(),
                                         raw.size(), options.zstd_level);
      if (ZSTD_isError(n)) {
        throw CaptureError("cannot write capture file '" + path + "': zstd: " + ZSTD_getErrorName(n));
      }
      if (n < raw.size()) {
        flags |= capture::kFlagZstd;
        compressed.resize(capture::kBlockHeaderSize + n);
        stored = std::span<const uint8_t>(compressed.data() + capture::kBlockHeaderSize, n);
      }
    }
    if (!(flags & capture::kFlagZstd)) {
      compressed.resize(capture::kBlockHeaderSize);
      compressed.insert(compressed.end(), stored.begin(), stored.end());
      stored = std::span<const uint8_t>(compressed.data() + capture::kBlockHeaderSize, stored.size());
    }
    uint8_t* h = compressed.data();
    capture::put_le16(h, static_cast<uint16_t>(type));
    capture::put_le16(h + 2, flags);
    capture::put_le32(h + 4, static_cast<uint32_t>(stored.size()));
    capture::put_le32(h + 8, static_cast<uint32_t>(raw.size()));
    capture::put_le32(h + 12, capture::block_crc(h, stored));
    write_all(compressed.data(), compressed.size());
    ++blocks;
    enc.clear();
  }

  void write_info(const RawProfile& p) {
    if (info_written && same_info(info, p.info)) return;
    const RecordingInfo& i = p.info;
    enc.var(i.start_unix_ns);
    enc.var(i.start_mono_ns);
    enc.var(i.end_mono_ns);
    enc.var(i.interval_ns);
    enc.var(i.frequency_hz);
    enc.str(i.backend);
    enc.str(i.event);
    enc.str(i.call_graph);
    enc.str(i.target);
    enc.var(i.arguments.size());
    for (const auto& a : i.arguments) enc.str(a);
    enc.str(i.hostname);
    enc.str(i.kernel_release);
    enc.u8(i.kernel_frames ? 1 : 0);
    enc.var(i.logical_cpus);
    enc.str(options.writer);
    enc.str(boot_id);
    enc.str(i.call_counter);
    enc.var(i.requested_mono_ns);
    enc.var(i.first_sample_mono_ns);
    enc.u8(i.host_steal_known ? 1 : 0);
    enc.var(i.host_steal_ns);
    emit(BlockType::kInfo);
    info = i;
    info_written = true;
  }

  void write_modules(const RawProfile& p) {
    if (modules >= p.modules.size()) return;
    enc.var(modules);
    enc.var(p.modules.size() - modules);
    for (size_t i = modules; i < p.modules.size(); ++i) {
      enc.str(p.modules[i].path);
      enc.str(p.modules[i].build_id);
      enc.u8(p.modules[i].is_kernel ? 1 : 0);
    }
    emit(BlockType::kModules);
    modules = p.modules.size();
  }

  // Optional: a reader that does not know the block still reads a right profile, with the vDSO's
  // frames as [vdso]+0xOFFSET.
  void write_module_images(const RawProfile& p) {
    image_written.resize(p.modules.size(), false);
    size_t n = 0;
    for (size_t i = 0; i < p.modules.size(); ++i)
      n += !image_written[i] && !p.modules[i].image.empty() ? 1 : 0;
    if (n == 0) return;
    enc.var(n);
    for (size_t i = 0; i < p.modules.size(); ++i) {
      if (image_written[i] || p.modules[i].image.empty()) continue;
      enc.var(i);
      enc.str(std::string_view(reinterpret_cast<const char*>(p.modules[i].image.data()),
                               p.modules[i].image.size()));
      image_written[i] = true;
    }
    emit(BlockType::kModuleImages, false);
  }

  void write_processes(const RawProfile& p) {
    size_t changed = 0;
    Encoder body;
    std::vector<const std::string*> cgroups;  // the column appended after the processes
    for (const RawProcess& process : p.processes) {
      auto [it, added] = processes.try_emplace(process.pid);
      WrittenProcess& w = it->second;
      const bool fields_changed = added || !same_process_fields(w.fields, process);
      std::vector<uint32_t> mapping_updates;
      for (size_t m = 0; m < process.mappings.size(); ++m) {
        if (m >= w.mappings.size() || !same_mapping(w.mappings[m], process.mappings[m]))
          mapping_updates.push_back(static_cast<uint32_t>(m));
      }
      if (!fields_changed && mapping_updates.empty()) continue;
      ++changed;
      cgroups.push_back(&process.cgroup);
      body.svar(process.pid);
      body.str(process.name);
      body.str(process.exe);
      body.var(process.cmdline.size());
      for (const auto& a : process.cmdline) body.str(a);
      body.var(process.start_ns);
      body.var(process.end_ns);
      body.var(mapping_updates.size());
      for (const uint32_t m : mapping_updates) {
        const RawMapping& map = process.mappings[m];
        body.var(m);
        body.var(map.start);
        body.var(map.end - map.start);
        body.var(map.file_offset);
        body.index(map.module);
        body.var(map.time_ns);
        body.var(map.unmapped_ns);
      }
      w.fields.pid = process.pid;
      w.fields.name = process.name;
      w.fields.exe = process.exe;
      w.fields.cmdline = process.cmdline;
      w.fields.cgroup = process.cgroup;
      w.fields.start_ns = process.start_ns;
      w.fields.end_ns = process.end_ns;
      w.mappings = process.mappings;
    }
    if (changed == 0) return;
    for (const std::string* cgroup : cgroups) body.str(*cgroup);
    enc.var(changed);
    enc.append(body.bytes());
    emit(BlockType::kProcesses);
  }

  void write_threads(const RawProfile& p) {
    size_t changed = 0;
    Encoder body;
    for (size_t i = 0; i < p.threads.size(); ++i) {
      const RawThread& t = p.threads[i];
      if (i < threads.size() && same_thread(threads[i], t)) continue;
      ++changed;
      body.svar(t.pid);
      body.svar(t.tid);
      body.str(t.name);
      body.var(t.start_ns);
      body.var(t.end_ns);
      encode_lost(body, t.lost);
      if (i < threads.size())
        threads[i] = t;
      else
        threads.push_back(t);
    }
    if (changed == 0) return;
    enc.var(changed);
    enc.append(body.bytes());
    emit(BlockType::kThreads);
  }

  void write_stacks(const RawProfile& p) {
    const RawStackTable& table = p.stacks;
    // The profile let its stacks go (RawProfile::forget_released_stacks) and numbers them from 0 again:
    // every sample written so far named the old ones, those held now name the new ones.
    if (p.stack_generation != stack_generation) {
      if (samples != p.sample_offset) {
        throw CaptureError("cannot write capture file '" + path +
                           "': the stacks were let go before samples " + std::to_string(samples) + " to " +
                           std::to_string(p.sample_offset) + " that name them were written");
      }
      enc.var(p.stack_generation);
      emit(BlockType::kStackGeneration);
      stack_generation = p.stack_generation;
      stacks = 0;
    }
    while (stacks < table.size()) {
      const size_t n = std::min(table.size() - stacks, capture::kStacksPerBlock);
      enc.var(stacks);
      enc.var(n);
      // Columns, then addresses as deltas: return addresses of one stack are close to each other.
      for (size_t i = stacks; i < stacks + n; ++i) enc.var(table[static_cast<uint32_t>(i)].kernel_depth);
      for (size_t i = stacks; i < stacks + n; ++i) enc.var(table[static_cast<uint32_t>(i)].user_depth);
      uint64_t prev = 0;
      for (size_t i = stacks; i < stacks + n; ++i) {
        for (const uint64_t a : table.kernel_frames(static_cast<uint32_t>(i))) {
          enc.svar(static_cast<int64_t>(a - prev));
          prev = a;
        }
        for (const uint64_t a : table.user_frames(static_cast<uint32_t>(i))) {
          enc.svar(static_cast<int64_t>(a - prev));
          prev = a;
        }
      }
      // Appended later: what each stack's user leaf is (absent in older files).
      for (size_t i = stacks; i < stacks + n; ++i)
        enc.u8(static_cast<uint8_t>(table[static_cast<uint32_t>(i)].user_leaf));
      emit(BlockType::kStacks);
      stacks += n;
    }
  }

  // `samples` counts every sample written: the profile's samples[0] is sample p.sample_offset.
  void write_samples(const RawProfile& p) {
    if (samples < p.sample_offset) {
      throw CaptureError("cannot write capture file '" + path + "': samples " + std::to_string(samples) +
                         " to " + std::to_string(p.sample_offset) + " were released before being written");
    }
    const uint64_t end = p.sample_count();
    while (samples < end) {
      const size_t n = std::min<uint64_t>(end - samples, capture::kSamplesPerBlock);
      const RawSample* s = p.samples.data() + (samples - p.sample_offset);
      enc.var(samples);
      enc.var(n);
      // One column per field: zstd finds far more repetition in a column of tids than in rows.
      uint64_t prev_time = 0;
      for (size_t i = 0; i < n; ++i) {
        enc.svar(static_cast<int64_t>(s[i].time_ns - prev_time));
        prev_time = s[i].time_ns;
      }
      for (size_t i = 0; i < n; ++i) enc.svar(s[i].pid);
      for (size_t i = 0; i < n; ++i) enc.svar(int64_t{s[i].tid} - s[i].pid);
      for (size_t i = 0; i < n; ++i) enc.index(s[i].stack);
      for (size_t i = 0; i < n; ++i) enc.var(s[i].cpu_delta_ns);
      for (size_t i = 0; i < n; ++i) enc.var(s[i].off_cpu_ns);
      for (size_t i = 0; i < n; ++i) enc.var(s[i].cpu);
      // The kind byte keeps the two kinds of the first format (a wait for a CPU is written as off-CPU,
      // which is what a reader older than the kind column makes of it); the full kind follows.
      for (size_t i = 0; i < n; ++i) {
        const auto kind =
            static_cast<uint8_t>(is_off_cpu_interval(s[i].kind) ? SampleKind::kOffCpu : s[i].kind);
        enc.u8(static_cast<uint8_t>(kind | static_cast<uint8_t>(s[i].stack_end) << 2));
      }
      for (size_t i = 0; i < n; ++i) enc.u8(static_cast<uint8_t>(s[i].kind));
      emit(BlockType::kSamples);
      samples += n;
    }
  }

  void write_edges(const RawProfile& p) {
    if (same_edges(edges, p.call_edges)) return;
    enc.var(p.call_edges.size());
    for (const RawCallEdge& e : p.call_edges) {
      enc.svar(e.pid);
      enc.var(e.caller_address);
      enc.var(e.callee_address);
      enc.var(e.count);
    }
    emit(BlockType::kCallEdges);
    edges = p.call_edges;
  }

  // Optional: a reader that skips it still has the call counts, only without their latency.
  void write_latency(const RawProfile& p) {
    if (same_latency(latency, p.call_latency)) return;
    enc.var(p.call_latency.size());
    for (const RawCallLatency& l : p.call_latency) {
      enc.svar(l.pid);
      enc.var(l.callee_address);
      enc.var(l.calls);
      enc.var(l.sum_ns);
      enc.var(l.outer_ns);
      enc.var(l.max_ns);
      uint64_t scale = 0;
      static_assert(sizeof scale == sizeof l.histogram.ns_per_tick);
      std::memcpy(&scale, &l.histogram.ns_per_tick, sizeof scale);
      enc.var(scale);
      enc.var(l.histogram.buckets.size());
      uint32_t previous = 0;
      for (const auto& [bucket, count] : l.histogram.buckets) {
        enc.var(bucket - previous);  // ascending
        enc.var(count);
        previous = bucket;
      }
    }
    emit(BlockType::kCallLatency, false);
    latency = p.call_latency;
  }

  // Optional: a reader that skips it still has a right profile, only without the allocations. Read
  // only when the recording ends, so written (whole) once, after the stacks it refers to.
  void write_allocations(const RawProfile& p) {
    if (p.alloc.mean_bytes == 0 || (p.allocations.size() == allocations && p.alloc.mean_bytes == alloc_mean))
      return;
    enc.var(p.alloc.mean_bytes);
    enc.var(p.alloc.processes);
    enc.var(p.alloc.dropped);
    enc.var(p.alloc.untracked);
    enc.var(p.alloc.frees_unmatched);
    enc.var(p.allocations.size());
    for (const RawAllocation& a : p.allocations) {
      enc.svar(a.pid);
      enc.svar(int64_t{a.tid} - a.pid);
      enc.var(a.address);
      enc.var(a.size);
      enc.index(a.stack);
      enc.u8(static_cast<uint8_t>((a.freed ? 1 : 0) | (a.tracked ? 0 : 2)));
    }
    // Appended fields (an older reader stops before them): when each was sampled and freed, and by
    // which thread freed it; the sampling times as deltas (the log is in time order).
    uint64_t previous = 0;
    for (const RawAllocation& a : p.allocations) {
      enc.svar(static_cast<int64_t>(a.time_ns - previous));
      previous = a.time_ns;
      enc.var(a.free_time_ns);
      enc.svar(int64_t{a.free_tid} - a.tid);
    }
    emit(BlockType::kAllocations, false);
    allocations = p.allocations.size();
    alloc_mean = p.alloc.mean_bytes;
  }

  // Optional: a reader that skips it still has a right profile, only without MIP counts.
  void write_mip(const RawProfile& p) {
    if (p.mip_snapshots.size() == mip_snapshots) return;
    enc.var(p.mip_snapshots.size());
    for (const RawMipSnapshot& s : p.mip_snapshots) {
      enc.svar(s.pid);
      enc.var(s.time_ns);
      enc.index(s.module);
      enc.var(s.module_hash);
      enc.u8(s.counts_calls ? 1 : 0);
      enc.var(s.functions.size());
      for (const RawMipFunction& f : s.functions) {
        enc.str(f.name);
        enc.var(f.address);
        enc.var(f.size);
        enc.var(f.call_count);
        enc.var(f.first_call);
        enc.var(f.blocks_covered);
        enc.var(f.blocks_total);
      }
    }
    emit(BlockType::kMip, false);
    mip_snapshots = p.mip_snapshots.size();
  }

  // Optional: a reader that skips it names kernel frames from the kallsyms of the boot it runs in.
  void write_kernel_symbols(const RawProfile& p) {
    if (p.kernel_symbols == kernel_symbols) return;
    enc.str(p.kernel_symbols);
    emit(BlockType::kKernelSymbols, false);
    kernel_symbols = p.kernel_symbols;
  }

  // Optional: a reader that skips it leaves the frames of generated code as [anon]+0xOFFSET. Written
  // when the recording ends (the files are read then), whole; the symbols are only ever appended.
  void write_jit_symbols(const RawProfile& p) {
    if (p.jit_symbols.size() == jit_symbols) return;
    enc.var(p.jit_symbols.size());
    for (const RawJitSymbol& s : p.jit_symbols) {
      enc.svar(s.pid);
      enc.var(s.start);
      enc.var(s.size);
      enc.str(s.name);
    }
    emit(BlockType::kJitSymbols, false);
    jit_symbols = p.jit_symbols.size();
  }

  void write_lost(const RawProfile& p) {
    if (same_lost(lost, p.lost)) return;
    encode_lost(enc, p.lost);
    emit(BlockType::kLost);
    lost = p.lost;
  }
};

CaptureWriter::CaptureWriter(const std::string& path, CaptureWriterOptions options)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.path = path;
  s.options = std::move(options);
  s.boot_id = current_boot_id();
  // Opened by the rules of OutputFile (never through a link, FIFO or device another user could have
  // planted; a device of the writer's written, not truncated); the file stays if writing fails later.
  try {
    OutputFile file(path, OutputWrite::kInPlace, s.options.file_mode);
    s.fd.reset(file.release_fd());
    file.keep();
  } catch (const std::runtime_error& e) {
    throw CaptureError(e.what());
  }
  start();
}

CaptureWriter::CaptureWriter(int fd, const std::string& name, CaptureWriterOptions options)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.path = name;
  s.options = std::move(options);
  s.boot_id = current_boot_id();
  s.fd.reset(fd);
  if (!s.fd) s.fail("open", EBADF);
  start();
}

void CaptureWriter::start() {
  State& s = *state_;
  // A throwing constructor runs no destructor: the descriptor and context are released here.
  try {
    s.cctx = ZSTD_createCCtx();
    if (s.cctx == nullptr) throw CaptureError("cannot write capture file '" + s.path + "': out of memory");
    uint8_t header[capture::kFileHeaderSize] = {};
    std::memcpy(header, capture::kMagic, sizeof capture::kMagic);
    capture::put_le32(header + 8, kCaptureFormatVersion);
    capture::put_le32(header + 12, 0);  // flags: none defined
    s.write_all(header, sizeof header);
  } catch (...) {
    s.fd.reset();
    ZSTD_freeCCtx(s.cctx);
    s.cctx = nullptr;
    throw;
  }
}

CaptureWriter::~CaptureWriter() {
  ZSTD_freeCCtx(state_->cctx);
}

void CaptureWriter::flush(const RawProfile& profile) {
  State& s = *state_;
  if (s.finished) throw CaptureError("capture file '" + s.path + "' is already finished");
  // Order matters for a file cut short: a sample's stack, thread and process precede it.
  s.write_info(profile);
  s.write_modules(profile);
  s.write_module_images(profile);
  s.write_processes(profile);
  s.write_threads(profile);
  s.write_stacks(profile);
  s.write_samples(profile);
  s.write_edges(profile);
  s.write_latency(profile);
  s.write_allocations(profile);
  s.write_mip(profile);
  s.write_kernel_symbols(profile);
  s.write_jit_symbols(profile);
  s.write_lost(profile);
}

void CaptureWriter::finish(const RawProfile& profile) {
  flush(profile);
  State& s = *state_;
  s.enc.var(s.samples);
  s.enc.var(s.stacks);
  s.emit(BlockType::kEnd);
  s.finished = true;
  if (::fsync(s.fd.get()) != 0 && errno != EINVAL) s.fail("fsync", errno);
  if (const int error = s.fd.close(); error != 0) s.fail("close", error);
}

uint64_t CaptureWriter::bytes_written() const {
  return state_->bytes;
}
uint64_t CaptureWriter::blocks_written() const {
  return state_->blocks;
}
const std::string& CaptureWriter::path() const {
  return state_->path;
}

void write_capture_file(const RawProfile& profile, const std::string& path, CaptureWriterOptions options) {
  CaptureWriter writer(path, std::move(options));
  writer.finish(profile);
}

}  // namespace hpd
