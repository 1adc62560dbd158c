// Capture file reader: validates the header and every block, rebuilds the RawProfile, and recovers
// what precedes the point where an interrupted recording stopped.
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "capture_codec.h"
#include "hpd/capture/capture.h"

namespace hpd {

using capture::BlockType;
using capture::Decoder;

namespace {

LostCounts decode_lost(Decoder& d) {
  LostCounts l;
  l.lost_records = d.var();
  l.throttle_events = d.var();
  l.stack_failures = d.var();
  l.truncated_stacks = d.var();
  return l;
}

class BlockApplier {
 public:
  BlockApplier(CaptureContents& out) : out_(out), p_(out.profile) {}

  // Returns false for a block type this reader does not know.
  bool apply(uint16_t type, Decoder& d) {
    switch (static_cast<BlockType>(type)) {
      case BlockType::kInfo: info(d); return true;
      case BlockType::kModules: modules(d); return true;
      case BlockType::kProcesses: processes(d); return true;
      case BlockType::kThreads: threads(d); return true;
      case BlockType::kStacks: stacks(d); return true;
      case BlockType::kSamples: samples(d); return true;
      case BlockType::kCallEdges: edges(d); return true;
      case BlockType::kLost: p_.lost = decode_lost(d); return true;
      case BlockType::kMip: mip(d); return true;
      case BlockType::kModuleImages: module_images(d); return true;
      case BlockType::kCallLatency: latency(d); return true;
      case BlockType::kAllocations: allocations(d); return true;
      case BlockType::kKernelSymbols: p_.kernel_symbols = d.str(); return true;
      case BlockType::kStackGeneration: stack_generation(d); return true;
      case BlockType::kEnd: end(d); return true;
      case BlockType::kJitSymbols: jit_symbols(d); return true;
    }
    return false;
  }

 private:
  // Fields appended to a block by later versions of the same format are optional: absent in files
  // written before them, ignored (trailing bytes) by readers written before them.
  void info(Decoder& d) {
    RecordingInfo& i = p_.info;
    i.start_unix_ns = d.var();
    i.start_mono_ns = d.var();
    i.end_mono_ns = d.var();
    i.interval_ns = d.var();
    i.frequency_hz = d.u32();
    i.backend = d.str();
    i.event = d.str();
    i.call_graph = d.str();
    i.target = d.str();
    i.arguments.resize(d.count());
    for (auto& a : i.arguments) a = d.str();
    i.hostname = d.str();
    i.kernel_release = d.str();
    i.kernel_frames = d.u8() != 0;
    i.logical_cpus = d.u32();
    if (!d.at_end()) out_.info.writer = d.str();
    if (!d.at_end()) out_.info.boot_id = d.str();
    if (!d.at_end()) i.call_counter = d.str();
    if (!d.at_end()) i.requested_mono_ns = d.var();
    if (!d.at_end()) i.first_sample_mono_ns = d.var();
    if (!d.at_end()) {
      i.host_steal_known = d.u8() != 0;
      i.host_steal_ns = d.var();
    }
  }

  void latency(Decoder& d) {
    const size_t n = d.count(8);
    std::vector<RawCallLatency> out(n);
    for (RawCallLatency& l : out) {
      l.pid = d.s32();
      l.callee_address = d.var();
      l.calls = d.var();
      l.sum_ns = d.var();
      l.outer_ns = d.var();
      l.max_ns = d.var();
      const uint64_t scale = d.var();
      std::memcpy(&l.histogram.ns_per_tick, &scale, sizeof scale);
      l.histogram.buckets.resize(d.count(2));
      uint64_t bucket = 0;
      for (auto& [b, count] : l.histogram.buckets) {
        bucket += d.var();
        if (bucket > UINT32_MAX) d.fail("latency bucket out of range");
        b = static_cast<uint32_t>(bucket);
        count = d.var();
      }
    }
    p_.call_latency = std::move(out);
  }

  void jit_symbols(Decoder& d) {
    const size_t n = d.count(4);  // pid, start, size and a name's length: a byte each at least
    std::vector<RawJitSymbol> out(n);
    for (RawJitSymbol& s : out) {
      s.pid = d.s32();
      s.start = d.var();
      s.size = d.var();
      s.name = d.str();
    }
    p_.jit_symbols = std::move(out);
  }

  void allocations(Decoder& d) {
    RawAllocStats stats;
    stats.mean_bytes = d.var();
    stats.processes = d.var();
    stats.dropped = d.var();
    stats.untracked = d.var();
    stats.frees_unmatched = d.var();
    if (stats.mean_bytes == 0) d.fail("allocations with a sampling mean of 0 bytes");
    const size_t n = d.count(6);
    std::vector<RawAllocation> out(n);
    for (RawAllocation& a : out) {
      a.pid = d.s32();
      const int64_t tid = int64_t{a.pid} + d.svar();
      if (tid < INT32_MIN || tid > INT32_MAX) d.fail("allocation tid out of range");
      a.tid = static_cast<int32_t>(tid);
      a.address = d.var();
      a.size = d.var();
      a.stack = table_index(d, d.index(), "allocation");
      const uint8_t flags = d.u8();
      if (flags > 3) d.fail("allocation flags " + std::to_string(flags));
      a.freed = (flags & 1) != 0;
      a.tracked = (flags & 2) == 0;
    }
    // Appended later (an older file ends here): sampling and free times, the freeing thread.
    if (!d.at_end()) {
      uint64_t previous = 0;
      for (RawAllocation& a : out) {
        a.time_ns = previous + static_cast<uint64_t>(d.svar());
        previous = a.time_ns;
        a.free_time_ns = d.var();
        const int64_t free_tid = int64_t{a.tid} + d.svar();
        if (free_tid < INT32_MIN || free_tid > INT32_MAX) d.fail("allocation free tid out of range");
        a.free_tid = static_cast<int32_t>(free_tid);
      }
    }
    p_.alloc = stats;
    p_.allocations = std::move(out);
  }

  void modules(Decoder& d) {
    const uint64_t first = d.var();
    if (first != p_.modules.size())
      d.fail("modules start at " + std::to_string(first) + ", expected " + std::to_string(p_.modules.size()));
    const size_t n = d.count(3);
    for (size_t i = 0; i < n; ++i) {
      std::string path = d.str();
      std::string build_id = d.str();
      const bool kernel = d.u8() != 0;
      if (p_.intern_module(path, build_id, kernel) != first + i)
        d.fail("module '" + path + "' appears twice");
    }
  }

  void module_images(Decoder& d) {
    const size_t n = d.count(2);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t module = d.var();
      if (module >= p_.modules.size())
        d.fail("image of module " + std::to_string(module) + ", not yet read (" +
               std::to_string(p_.modules.size()) + " modules)");
      const std::string image = d.str();
      p_.modules[module].image.assign(image.begin(), image.end());
    }
  }

  void processes(Decoder& d) {
    const size_t n = d.count(7);
    std::vector<int32_t> pids;  // in the block's order, for the columns appended after them
    pids.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      pids.push_back(d.s32());
      RawProcess& process = p_.process(pids.back());
      process.name = d.str();
      process.exe = d.str();
      process.cmdline.resize(d.count());
      for (auto& a : process.cmdline) a = d.str();
      process.start_ns = d.var();
      process.end_ns = d.var();
      const size_t updates = d.count(7);
      for (size_t u = 0; u < updates; ++u) {
        const uint64_t index = d.var();
        RawMapping m;
        m.start = d.var();
        const uint64_t size = d.var();
        if (size > UINT64_MAX - m.start) d.fail("mapping end overflows");
        m.end = m.start + size;
        m.file_offset = d.var();
        m.module = d.index();
        if (m.module != kNoIndex && m.module >= p_.modules.size())
          d.fail("mapping refers to module " + std::to_string(m.module) + " of " +
                 std::to_string(p_.modules.size()));
        m.time_ns = d.var();
        m.unmapped_ns = d.var();
        if (index < process.mappings.size())
          process.mappings[index] = m;
        else if (index == process.mappings.size())
          process.mappings.push_back(m);
        else
          d.fail("mapping " + std::to_string(index) + " of pid " + std::to_string(process.pid) +
                 " skips ahead");
      }
    }
    // Appended later: each process's cgroup; a file without the column leaves them as they were.
    if (d.at_end()) return;
    for (const int32_t pid : pids) p_.process(pid).cgroup = d.str();
  }

  void threads(Decoder& d) {
    const size_t n = d.count(9);
    for (size_t i = 0; i < n; ++i) {
      const int32_t pid = d.s32();
      const int32_t tid = d.s32();
      RawThread& t = p_.thread(pid, tid);
      t.name = d.str();
      t.start_ns = d.var();
      t.end_ns = d.var();
      t.lost = decode_lost(d);
    }
  }

  void stacks(Decoder& d) {
    const uint64_t first = d.var();
    if (first != generation_size())
      d.fail("stacks start at " + std::to_string(first) + ", expected " + std::to_string(generation_size()));
    const size_t n = d.count(2);
    std::vector<uint16_t> kernel_depth(n), user_depth(n);
    for (auto& k : kernel_depth) k = depth(d);
    for (auto& u : user_depth) u = depth(d);
    std::vector<uint64_t> addresses;
    uint64_t prev = 0;
    for (size_t i = 0; i < n; ++i) {
      if (size_t{kernel_depth[i]} + user_depth[i] > d.remaining()) d.fail("stack addresses exceed the block");
      for (size_t k = size_t{kernel_depth[i]} + user_depth[i]; k > 0; --k)
        addresses.push_back(prev += static_cast<uint64_t>(d.svar()));
    }
    // Each stack's user leaf (appended later: absent in older files, whose rule it presumes).
    std::vector<UserLeaf> leaves(n);
    const bool leaves_written = !d.at_end();
    for (size_t i = 0; i < n; ++i) {
      if (!leaves_written) {
        leaves[i] = presumed_user_leaf(kernel_depth[i]);
        continue;
      }
      const uint8_t leaf = d.u8();
      if (leaf > static_cast<uint8_t>(UserLeaf::kAfterSyscall))
        d.fail("user leaf " + std::to_string(leaf) + " of stack " + std::to_string(first + i) +
               " out of range");
      leaves[i] = static_cast<UserLeaf>(leaf);
    }
    const std::span<const uint64_t> all(addresses);
    size_t at = 0;
    for (size_t i = 0; i < n; ++i) {
      const auto kernel = all.subspan(at, kernel_depth[i]);
      const auto user = all.subspan(at + kernel_depth[i], user_depth[i]);
      at += size_t{kernel_depth[i]} + user_depth[i];
      const uint32_t index = p_.stacks.intern(kernel, user, leaves[i]);
      if (generation_ != 0) {
        // A stack let go by the recorder and met again is written again in a later generation: the
        // table keeps it once, both generations' indices name it.
        ids_.push_back(index);
      } else if (index != first + i) {
        d.fail("stack " + std::to_string(first + i) + " appears twice");
      }
    }
  }

  // The recorder let its stacks go (RawProfile::forget_released_stacks): the indices of the blocks
  // after this one start over at 0.
  void stack_generation(Decoder& d) {
    const uint64_t generation = d.var();
    if (generation <= generation_)
      d.fail("stack generation " + std::to_string(generation) + " after generation " +
             std::to_string(generation_));
    generation_ = generation;
    ids_.clear();
    ++out_.info.stack_generations;
  }

  // How many stacks the current generation has: the indices a block may name.
  size_t generation_size() const { return generation_ != 0 ? ids_.size() : p_.stacks.size(); }

  // The table's index of the current generation's stack `id` (checked: kNoIndex stays).
  uint32_t table_index(Decoder& d, uint32_t id, const char* what) const {
    if (id == kNoIndex) return id;
    if (id >= generation_size())
      d.fail(std::string(what) + " refers to stack " + std::to_string(id) + " of " +
             std::to_string(generation_size()));
    return generation_ != 0 ? ids_[id] : id;
  }

  static uint16_t depth(Decoder& d) {
    const uint64_t v = d.var();
    if (v > UINT16_MAX) d.fail("stack depth " + std::to_string(v) + " out of range");
    return static_cast<uint16_t>(v);
  }

  void samples(Decoder& d) {
    const uint64_t first = d.var();
    if (first != p_.samples.size())
      d.fail("samples start at " + std::to_string(first) + ", expected " + std::to_string(p_.samples.size()));
    const size_t n = d.count(8);  // eight columns of at least one byte each
    const size_t base = p_.samples.size();
    p_.samples.resize(base + n);
    RawSample* s = p_.samples.data() + base;
    uint64_t time = 0;
    for (size_t i = 0; i < n; ++i) s[i].time_ns = time += static_cast<uint64_t>(d.svar());
    for (size_t i = 0; i < n; ++i) s[i].pid = d.s32();
    for (size_t i = 0; i < n; ++i) {
      const int64_t tid = d.svar() + s[i].pid;
      if (tid < INT32_MIN || tid > INT32_MAX) d.fail("thread id out of range");
      s[i].tid = static_cast<int32_t>(tid);
    }
    for (size_t i = 0; i < n; ++i) {
      s[i].stack = table_index(d, d.index(), "sample");
    }
    for (size_t i = 0; i < n; ++i) s[i].cpu_delta_ns = d.var();
    for (size_t i = 0; i < n; ++i) s[i].off_cpu_ns = d.var();
    for (size_t i = 0; i < n; ++i) {
      const uint64_t cpu = d.var();
      if (cpu > UINT16_MAX) d.fail("cpu number out of range");
      s[i].cpu = static_cast<uint16_t>(cpu);
    }
    for (size_t i = 0; i < n; ++i) {
      const uint8_t b = d.u8();
      if ((b & 3) > 1 || (b >> 2) > 3) d.fail("sample kind byte " + std::to_string(b) + " out of range");
      s[i].kind = static_cast<SampleKind>(b & 3);
      s[i].stack_end = static_cast<StackEnd>(b >> 2);
    }
    // The full kind (appended later: absent in older files, whose off-CPU samples stay kOffCpu). It
    // may only tell a kind of off-CPU interval that the byte above called off-CPU.
    if (d.at_end()) return;
    for (size_t i = 0; i < n; ++i) {
      const uint8_t kind = d.u8();
      const bool consistent = kind < kSampleKindCount && is_off_cpu_interval(static_cast<SampleKind>(kind)) ==
                                                             is_off_cpu_interval(s[i].kind);
      if (!consistent)
        d.fail("sample kind " + std::to_string(kind) + " out of range or contradicting kind byte " +
               std::to_string(static_cast<int>(s[i].kind)));
      s[i].kind = static_cast<SampleKind>(kind);
    }
  }

  void edges(Decoder& d) {
    const size_t n = d.count(4);
    p_.call_edges.assign(n, RawCallEdge{});
    for (auto& e : p_.call_edges) {
      e.pid = d.s32();
      e.caller_address = d.var();
      e.callee_address = d.var();
      e.count = d.var();
    }
  }

  void mip(Decoder& d) {
    const size_t n = d.count(6);
    std::vector<RawMipSnapshot> snapshots(n);
    for (RawMipSnapshot& s : snapshots) {
      s.pid = d.s32();
      s.time_ns = d.var();
      s.module = d.index();
      if (s.module == kNoIndex || s.module >= p_.modules.size())
        d.fail("MIP snapshot names module " + std::to_string(s.module) + ", not yet read");
      s.module_hash = d.u32();
      const uint8_t counts = d.u8();
      if (counts > 1) d.fail("MIP counts_calls byte " + std::to_string(counts) + " out of range");
      s.counts_calls = counts == 1;
      s.functions.resize(d.count(7));
      for (RawMipFunction& f : s.functions) {
        f.name = d.str();
        f.address = d.var();
        f.size = d.u32();
        f.call_count = d.var();
        f.first_call = d.var();
        f.blocks_covered = d.u32();
        f.blocks_total = d.u32();
        if (f.blocks_covered > f.blocks_total)
          d.fail("MIP function '" + f.name + "' covers more blocks than it has");
      }
    }
    p_.mip_snapshots = std::move(snapshots);
  }

  void end(Decoder& d) {
    const uint64_t samples = d.var();
    const uint64_t stacks = d.var();
    // The stacks of the last generation (all of them when the recorder never let any go).
    if (samples != p_.samples.size() || stacks != generation_size()) {
      d.fail("the end block counts " + std::to_string(samples) + " samples and " + std::to_string(stacks) +
             " stacks, the file holds " + std::to_string(p_.samples.size()) + " and " +
             std::to_string(generation_size()));
    }
    out_.info.complete = true;
  }

  CaptureContents& out_;
  RawProfile& p_;
  // After a stack-generation block (generation_ from 1 on): the current generation's stacks, by their
  // index in the file, as indices of p_.stacks. Before one (generation 0), a file's indices are the
  // table's own.
  uint64_t generation_ = 0;
  std::vector<uint32_t> ids_;
};

bool all_zero(std::span<const uint8_t> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
}

}  // namespace

bool has_capture_magic(std::span<const uint8_t> bytes) {
  return bytes.size() >= sizeof capture::kMagic &&
         std::memcmp(bytes.data(), capture::kMagic, sizeof capture::kMagic) == 0;
}

bool is_capture_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint8_t head[sizeof capture::kMagic] = {};
  in.read(reinterpret_cast<char*>(head), sizeof head);
  return in.gcount() == static_cast<std::streamsize>(sizeof head) && has_capture_magic(head);
}

CaptureContents read_capture(std::span<const uint8_t> bytes, const std::string& source) {
  if (!has_capture_magic(bytes)) {
    throw CaptureError(source + ": not an hpd capture file (no \\x89HPR signature at the start)");
  }
  if (bytes.size() < capture::kFileHeaderSize) throw CaptureError(source + ": the file header is truncated");
  CaptureContents out;
  CaptureFileInfo& info = out.info;
  info.version = capture::get_le32(bytes.data() + 8);
  if (info.version == 0) throw CaptureError(source + ": invalid capture format version 0");
  if (info.version > kCaptureMaxReadVersion) {
    throw CaptureError(source + ": written by a newer hpd (capture format " + std::to_string(info.version) +
                       "); this hpctl reads up to format " + std::to_string(kCaptureMaxReadVersion) +
                       "; convert it with a newer hpctl");
  }
  if (const uint32_t flags = capture::get_le32(bytes.data() + 12); flags != 0) {
    throw CaptureError(source + ": unknown file flags " + std::to_string(flags) +
                       " (written by a newer hpd?)");
  }
  BlockApplier applier(out);
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  if (dctx == nullptr) throw CaptureError(source + ": out of memory");
  struct DctxFree {
    ZSTD_DCtx* p;
    ~DctxFree() { ZSTD_freeDCtx(p); }
  } dctx_free{dctx};
  std::vector<uint8_t> raw;

  size_t pos = capture::kFileHeaderSize;
  const size_t size = bytes.size();
  std::string cut;  // why reading stopped early, for the note
  while (pos < size) {
    if (info.complete) {
      info.notes.push_back(std::to_string(size - pos) + " bytes after the end block were ignored");
      break;
    }
    const std::string where =
        source + ": block " + std::to_string(info.blocks) + " at offset " + std::to_string(pos);
    if (all_zero(bytes.subspan(pos))) {
      cut = "the file ends in " + std::to_string(size - pos) + " zero bytes at offset " + std::to_string(pos);
      break;
    }
    if (size - pos < capture::kBlockHeaderSize) {
      cut = "the file ends inside the header of block " + std::to_string(info.blocks);
      break;
    }
    const uint8_t* h = bytes.data() + pos;
    const uint16_t type = capture::get_le16(h);
    const uint16_t flags = capture::get_le16(h + 2);
    const uint32_t stored_size = capture::get_le32(h + 4);
    const uint32_t raw_size = capture::get_le32(h + 8);
    const uint32_t crc = capture::get_le32(h + 12);
    if (stored_size > capture::kMaxBlockBytes || raw_size > capture::kMaxBlockBytes) {
      throw CaptureError(where + ": block size " + std::to_string(std::max(stored_size, raw_size)) +
                         " exceeds the limit (the file is corrupt)");
    }
    if (size - pos - capture::kBlockHeaderSize < stored_size) {
      cut = "the file ends inside " + std::string(capture::block_name(type)) + " block " +
            std::to_string(info.blocks) + " (" + std::to_string(size - pos - capture::kBlockHeaderSize) +
            " of " + std::to_string(stored_size) + " bytes)";
      break;
    }
    const auto stored = bytes.subspan(pos + capture::kBlockHeaderSize, stored_size);
    if (capture::block_crc(h, stored) != crc)
      throw CaptureError(where + ": checksum mismatch (the file is corrupt)");
    if ((flags & ~(capture::kFlagZstd | capture::kFlagRequired)) != 0) {
      throw CaptureError(where + ": unknown block flags 0x" + std::to_string(flags));
    }
    std::span<const uint8_t> payload = stored;
    if (flags & capture::kFlagZstd) {
      raw.resize(raw_size);
      const size_t n = ZSTD_decompressDCtx(dctx, raw.data(), raw.size(), stored.data(), stored.size());
      if (ZSTD_isError(n) || n != raw_size) {
        throw CaptureError(where + ": cannot decompress (" +
                           (ZSTD_isError(n) ? std::string(ZSTD_getErrorName(n)) : "size mismatch") + ")");
      }
      payload = raw;
    } else if (raw_size != stored_size) {
      throw CaptureError(where + ": stored and raw sizes differ in an uncompressed block");
    }
    Decoder d(payload, where + " (" + capture::block_name(type) + ")");
    if (!applier.apply(type, d)) {
      if (flags & capture::kFlagRequired) {
        throw CaptureError(where + ": block type " + std::to_string(type) +
                           " is required but unknown to this hpctl (written by a newer hpd)");
      }
      ++info.skipped_blocks;
    }
    ++info.blocks;
    pos += capture::kBlockHeaderSize + stored_size;
  }
  if (info.skipped_blocks != 0) {
    info.notes.push_back("skipped " + std::to_string(info.skipped_blocks) +
                         " blocks of types this hpctl does not know (written by a newer hpd)");
  }
  if (!info.complete) {
    // A thread's share of the losses is written before the samples of a flush, the totals after
    // them: in a file cut between the two, the totals are the flush's before. They are at least the
    // threads' shares (RawThread::lost), which a finished file's are.
    LostCounts shares;
    for (const RawThread& t : out.profile.threads) shares += t.lost;
    LostCounts& total = out.profile.lost;
    total.stack_failures = std::max(total.stack_failures, shares.stack_failures);
    total.truncated_stacks = std::max(total.truncated_stacks, shares.truncated_stacks);
    total.lost_records = std::max(total.lost_records, shares.lost_records);
    total.throttle_events = std::max(total.throttle_events, shares.throttle_events);
    info.notes.push_back((cut.empty() ? std::string("the file has no end block") : cut) +
                         ": the recording did not finish (interrupted or crashed); recovered " +
                         std::to_string(out.profile.samples.size()) + " samples from " +
                         std::to_string(info.blocks) + " complete blocks");
  }
  return out;
}

CaptureContents read_capture_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CaptureError("cannot open '" + path + "': " + std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw CaptureError("cannot read '" + path + "': " + std::strerror(errno));
  return read_capture(bytes, path);
}

}  // namespace hpd
