// Reading the files JIT runtimes write for profilers (/tmp/perf-PID.map, jit-PID.dump) into
// RawProfile::jit_symbols: streamed, keeping only what covers sampled code, within a byte bound.
#include "hpd/session/perf_map.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "hpd/base/unique_fd.h"

namespace hpd::session {
namespace {

constexpr off_t kMaxMapBytes = off_t{256} << 20;
constexpr off_t kMaxJitdumpBytes = off_t{1} << 30;  // code bytes included
constexpr size_t kReadBytes = 64 << 10;
// A perf-map line longer than this is not one (and is not kept in memory while it lasts).
constexpr size_t kMaxLineBytes = 16 << 10;
// What one kept symbol's entry in the by-start index costs (node, bucket, allocation).
constexpr uint64_t kIndexEntryBytes = 48;
// Code blobs of a jitdump whose loads are remembered for a later move: their record's offset.
constexpr size_t kMaxJitdumpLoadsIndexed = size_t{1} << 18;

// jitdump (tools/perf/Documentation/jitdump-specification.txt): "JiTD" in the writer's byte order.
constexpr uint32_t kJitdumpMagic = 0x4A695444;
constexpr uint32_t kJitCodeLoad = 0;
constexpr uint32_t kJitCodeMove = 1;
constexpr size_t kMaxJitName = 4096;

// "START SIZE NAME" (hex without 0x); false when the line is not one.
bool parse_map_line(std::string_view line, uint64_t& start, uint64_t& size, std::string_view& name) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  auto hex_field = [&](uint64_t& out) {
    if (line.size() > 2 && line[0] == '0' && (line[1] == 'x' || line[1] == 'X')) line.remove_prefix(2);
    size_t i = 0;
    out = 0;
    for (; i < line.size() && i < 17; ++i) {
      const char c = line[i];
      const int digit = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
      if (digit < 0) break;
      if (i == 16) return false;  // more than 64 bits
      out = out << 4 | static_cast<uint64_t>(digit);
    }
    if (i == 0 || i >= line.size() || line[i] != ' ') return false;
    line.remove_prefix(i + 1);
    return true;
  };
  if (!hex_field(start) || !hex_field(size) || size == 0) return false;
  // perf keeps the rest of the line, spaces included; the '\r' of a CRLF file is not part of it.
  name = line;
  return !name.empty();
}

// Symbols of one recording offered one at a time: kept when they name a sampled address, one per
// (process, start), within the byte bound. The symbolizer names an address by the symbol covering it
// that starts closest below it (Converter::jit_symbol; of two at one start, the later line): a symbol
// is kept while it is that symbol for at least one sampled address of its process, and let go once
// symbols starting closer have taken all of its addresses. So a process keeps at most one symbol per
// sampled address, however many lines of its files overlap there: a map of 4.1 million blobs each
// covering the one sampled instruction kept 16 MiB of them before (the whole bound, which in a
// continuous chunk left nothing for the other processes' maps), and keeps one now.
class Collector {
 public:
  Collector(RawProfile& profile, uint64_t max_bytes, bool every_symbol)
      : profile_(profile), max_bytes_(max_bytes), every_symbol_(every_symbol) {
    // The stacks each process was sampled in (samples held, released and allocations): a process's
    // map is matched against its own addresses only. With --all, the other processes' code sits at
    // the same addresses as a runtime's blobs, and would keep a large map's blobs no stack of the
    // runtime's holds.
    auto add_stack = [&](int32_t pid, uint32_t stack) {
      if (stack < profile.stacks.size())
        stacks_of_pid_.push_back(uint64_t{static_cast<uint32_t>(pid)} << 32 | stack);
    };
    for (const RawSample& s : profile.samples) add_stack(s.pid, s.stack);
    for (const RawSampleSum& s : profile.released) add_stack(s.pid, s.stack);
    for (const RawAllocation& a : profile.allocations) add_stack(a.pid, a.stack);
    std::sort(stacks_of_pid_.begin(), stacks_of_pid_.end());
    stacks_of_pid_.erase(std::unique(stacks_of_pid_.begin(), stacks_of_pid_.end()), stacks_of_pid_.end());
    // Symbols read before (none, unless a caller added some) count against the bound too.
    for (const RawJitSymbol& s : profile.jit_symbols) result.bytes_kept += cost(s.name.size());
    first_ = file_first_ = profile.jit_symbols.size();
  }

  // The symbols offered next are `pid`'s, until the next call.
  void begin_process(int32_t pid) {
    if (pid == pid_) return;
    finish_process();
    pid_ = pid;
    by_start_ = {};
    sampled_.clear();
    best_.clear();
    sampled_ready_ = false;
    visits_ = 0;
  }

  // The symbols of the last process that no sampled address is named by any more are let go.
  void finish_process() {
    auto& symbols = profile_.jit_symbols;
    size_t out = first_;
    for (size_t i = first_; i < symbols.size(); ++i) {
      if (owners_[i - first_] == 0) continue;
      if (out != i) symbols[out] = std::move(symbols[i]);
      ++out;
    }
    symbols.resize(out);
    first_ = file_first_ = out;
    owners_.clear();
  }

  // Per file: counts since the last call.
  struct FileCounts {
    uint64_t read = 0, kept = 0, superseded = 0, unsampled = 0, shadowed = 0, dropped = 0, unweighed = 0;
  };
  FileCounts take_file_counts() {
    file_first_ = profile_.jit_symbols.size();
    return std::exchange(file_, {});
  }

  void offer(uint64_t start, uint64_t size, std::string_view name) {
    ++file_.read;
    ++result.symbols_read;
    if (every_symbol_) {
      keep_every(start, size, name);
      return;
    }
    if (!sampled_ready_) find_sampled();
    // The sampled addresses in [start, start + size]: the sampled instruction itself, or a return
    // address just past the blob's end (looked up one below).
    const auto first = std::lower_bound(sampled_.begin(), sampled_.end(), start);
    const auto last = std::partition_point(first, sampled_.end(),
                                           [&](uint64_t address) { return address - start <= size; });
    if (first == last) {
      ++file_.unsampled;
      ++result.symbols_unsampled;
      return;
    }
    const auto lo = static_cast<size_t>(first - sampled_.begin());
    const auto hi = static_cast<size_t>(last - sampled_.begin());
    // Each sampled address costs a look per symbol covering it: bounded per process, against files
    // made of huge blobs overlapping by the million.
    if (visits_ + (hi - lo) > kMaxVisitsPerProcess) {
      ++file_.unweighed;
      ++result.symbols_dropped;
      return;
    }
    visits_ += hi - lo;
    auto& symbols = profile_.jit_symbols;
    if (const auto it = by_start_.find(start); it != by_start_.end()) {
      // The runtime wrote a new blob over the old one: the later line is current, for the addresses
      // the new one covers (those only the old one covered are let go).
      const size_t index = it->second;
      RawJitSymbol& old = symbols[index];
      for (size_t i = hi; i < sampled_.size() && sampled_[i] - old.start <= old.size; ++i)
        if (best_[i] == index) unname(i);
      rewrite(index, size, name);
      claim(lo, hi, index);
      let_go_if_unused(index);
      return;
    }
    // The addresses it would name: those no symbol names yet, or one that starts farther below. What
    // that lets go is counted only for a symbol naming one address (at least what it frees).
    uint64_t freed = 0;
    size_t wins = 0;
    for (size_t i = lo; i < hi; ++i) {
      if (best_[i] != kNone && symbols[best_[i]].start > start) continue;
      ++wins;
      if (best_[i] != kNone && owners_[best_[i] - first_] == 1) freed += cost(symbols[best_[i]].name.size());
    }
    if (wins == 0) {
      ++file_.shadowed;
      ++result.symbols_shadowed;
      return;
    }
    if (result.bytes_kept - freed + cost(name.size()) > max_bytes_) {
      ++file_.dropped;
      ++result.symbols_dropped;
      return;
    }
    claim(lo, hi, append(start, size, name, 0));
  }

  JitReadResult result;

 private:
  // Address ranges, merged and sorted.
  struct Ranges {
    std::vector<std::pair<uint64_t, uint64_t>> spans;  // [start, end)
    [[nodiscard]] bool contain(uint64_t address) const {
      auto it = std::upper_bound(spans.begin(), spans.end(), std::pair{address, UINT64_MAX});
      return it != spans.begin() && address < (--it)->second;
    }
  };

  // The ranges of `pid`'s mappings of a file never unmapped (files), or of its mappings anonymous or
  // of no known module at any time (!files). An address in the first and not the second is found in
  // a file at every time (RawProcess::find_mapping takes a mapping not unmapped yet for a sample
  // taken before its mmap was seen).
  Ranges ranges_of(int32_t pid, bool files) const {
    Ranges r;
    const RawProcess* process = profile_.find_process(pid);
    if (process == nullptr) return r;
    for (const RawMapping& m : process->mappings) {
      const bool file = m.module < profile_.modules.size() && profile_.modules[m.module].path != "[anon]";
      if (m.start < m.end && (files ? file && m.unmapped_ns == 0 : !file))
        r.spans.emplace_back(m.start, m.end);
    }
    std::sort(r.spans.begin(), r.spans.end());
    size_t merged = 0;
    for (const auto& span : r.spans) {
      if (merged != 0 && span.first <= r.spans[merged - 1].second)
        r.spans[merged - 1].second = std::max(r.spans[merged - 1].second, span.second);
      else
        r.spans[merged++] = span;
    }
    r.spans.resize(merged);
    return r;
  }

  static uint64_t cost(size_t name_bytes) { return sizeof(RawJitSymbol) + name_bytes + kIndexEntryBytes; }

  // pid_'s sampled user addresses and call edges that a JIT symbol may name, sorted: what its symbols
  // are kept for. Found at its first symbol offered: most processes have no perf map or jitdump. The
  // symbolizer looks an address up in the JIT symbols only when the mapping it falls in is anonymous or
  // not known; the addresses inside a file never unmapped, and in nothing else, are named by that file.
  void find_sampled() {
    sampled_ready_ = true;
    const Ranges in_files = ranges_of(pid_, true), in_anon = ranges_of(pid_, false);
    auto add = [&](uint64_t address) {
      if (!in_files.contain(address) || in_anon.contain(address)) sampled_.push_back(address);
    };
    const uint64_t key = uint64_t{static_cast<uint32_t>(pid_)} << 32;
    for (auto it = std::lower_bound(stacks_of_pid_.begin(), stacks_of_pid_.end(), key);
         it != stacks_of_pid_.end() && (*it >> 32) == (key >> 32); ++it) {
      for (const uint64_t address : profile_.stacks.user_frames(static_cast<uint32_t>(*it))) add(address);
    }
    for (const RawCallEdge& e : profile_.call_edges) {
      if (e.pid != pid_) continue;
      add(e.caller_address);
      add(e.callee_address);
    }
    std::sort(sampled_.begin(), sampled_.end());
    sampled_.erase(std::unique(sampled_.begin(), sampled_.end()), sampled_.end());
    best_.assign(sampled_.size(), kNone);
  }

  static constexpr size_t kNone = SIZE_MAX;
  static constexpr uint64_t kMaxVisitsPerProcess = uint64_t{1} << 25;

  // Every symbol (every_symbol_), one per start: the later line is current.
  void keep_every(uint64_t start, uint64_t size, std::string_view name) {
    if (const auto it = by_start_.find(start); it != by_start_.end()) {
      rewrite(it->second, size, name);
      return;
    }
    if (result.bytes_kept + cost(name.size()) > max_bytes_) {
      ++file_.dropped;
      ++result.symbols_dropped;
      return;
    }
    append(start, size, name, 1);
  }

  // The symbol at `index` rewritten by a later line at its start (the runtime wrote a new blob there).
  void rewrite(size_t index, uint64_t size, std::string_view name) {
    RawJitSymbol& s = profile_.jit_symbols[index];
    result.bytes_kept = result.bytes_kept - s.name.size() + name.size();
    s.size = size;
    s.name.assign(name);
    ++file_.superseded;
  }

  // A new symbol of pid_, naming `owners` sampled addresses so far; its index.
  size_t append(uint64_t start, uint64_t size, std::string_view name, uint32_t owners) {
    const size_t index = profile_.jit_symbols.size();
    by_start_.emplace(start, index);
    profile_.jit_symbols.push_back(RawJitSymbol{pid_, start, size, std::string(name)});
    owners_.push_back(owners);
    result.bytes_kept += cost(name.size());
    ++file_.kept;
    ++result.symbols_kept;
    return index;
  }

  // Symbol `index` names sampled addresses [lo, hi) where none does yet, or one starting farther below;
  // a symbol left naming none is let go.
  void claim(size_t lo, size_t hi, size_t index) {
    const uint64_t start = profile_.jit_symbols[index].start;
    for (size_t i = lo; i < hi; ++i) {
      const size_t before = best_[i];
      if (before == index) continue;
      if (before != kNone && profile_.jit_symbols[before].start > start) continue;
      if (before != kNone) unname(i);
      best_[i] = index;
      ++owners_[index - first_];
      if (before != kNone) let_go_if_unused(before);
    }
  }

  // Sampled address i is named by no symbol.
  void unname(size_t i) {
    --owners_[best_[i] - first_];
    best_[i] = kNone;
  }

  // Symbol `index`, once it names no sampled address, is let go (removed by finish_process).
  void let_go_if_unused(size_t index) {
    if (owners_[index - first_] != 0) return;
    const RawJitSymbol& s = profile_.jit_symbols[index];
    result.bytes_kept -= cost(s.name.size());
    --result.symbols_kept;
    ++result.symbols_shadowed;
    // Counted in the note of the file that added it, when that is the one being read.
    if (index >= file_first_) {
      --file_.kept;
      ++file_.shadowed;
    }
    if (const auto it = by_start_.find(s.start); it != by_start_.end() && it->second == index)
      by_start_.erase(it);
  }

  RawProfile& profile_;
  uint64_t max_bytes_;
  bool every_symbol_;
  std::vector<uint64_t> stacks_of_pid_;  // (pid << 32 | stack), sorted
  std::vector<uint64_t> sampled_;        // of pid_, once sampled_ready_ (find_sampled)
  std::vector<size_t> best_;             // per sampled address: the symbol naming it, or kNone
  bool sampled_ready_ = false;
  int32_t pid_ = 0;
  uint64_t visits_ = 0;           // of pid_'s sampled addresses by the symbols covering them
  size_t first_ = 0;              // pid_'s first symbol in jit_symbols
  size_t file_first_ = 0;         // the first symbol the file being read added
  std::vector<uint32_t> owners_;  // per symbol from first_: how many sampled addresses it names
  std::unordered_map<uint64_t, size_t> by_start_;  // of pid_: start -> index in jit_symbols
  FileCounts file_;
};

// A regular file (no symlink followed, a FIFO not waited on) of at most max_bytes, opened as the
// options say; invalid otherwise.
UniqueFd open_regular(const JitReadOptions& options, int32_t pid, const std::string& path, off_t max_bytes) {
  const int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  // Most processes have no such file: found missing here, without the opener (hpd's opens as another
  // user take a thread each, and every process of an --all recording or a chunk has three or four
  // names tried). That a name does not exist is all this process learns; any other failure (a FUSE
  // mount that refuses root) is left to the opener.
  struct stat st {};
  if (options.open_file && ::lstat(path.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR))
    return {};
  UniqueFd fd(options.open_file ? options.open_file(pid, path, flags) : ::open(path.c_str(), flags));
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > max_bytes) return {};
  return fd;
}

ssize_t read_some(int fd, char* buffer, size_t size, off_t offset) {
  ssize_t n;
  do {
    n = ::pread(fd, buffer, size, offset);
  } while (n < 0 && errno == EINTR);
  return n;
}

// Streams the perf map at `fd` into the collector; the number of lines not understood.
size_t stream_perf_map(int fd, Collector& collector) {
  std::string buffer(kReadBytes, '\0');
  std::string line;  // a line cut by the end of the buffer
  bool overlong = false;
  size_t bad = 0;
  auto take = [&](std::string_view text) {
    if (text.empty()) return;
    uint64_t start = 0, size = 0;
    std::string_view name;
    if (parse_map_line(text, start, size, name))
      collector.offer(start, size, name);
    else
      ++bad;
  };
  off_t offset = 0;
  for (;;) {
    const ssize_t n = read_some(fd, buffer.data(), buffer.size(), offset);
    if (n <= 0) break;
    offset += n;
    std::string_view chunk(buffer.data(), static_cast<size_t>(n));
    for (size_t newline; (newline = chunk.find('\n')) != std::string_view::npos;) {
      if (overlong) {
        ++bad;
        overlong = false;
      } else if (line.empty()) {
        take(chunk.substr(0, newline));
      } else {
        line.append(chunk.substr(0, newline));
        take(line);
        line.clear();
      }
      chunk.remove_prefix(newline + 1);
    }
    if (!overlong) line.append(chunk);
    if (line.size() > kMaxLineBytes) {
      overlong = true;
      line = std::string();
    }
  }
  if (overlong)
    ++bad;
  else
    take(line);
  return bad;
}

// The jitdump records of `read_at` (a file, or bytes in memory), streamed into `offer`.
template <class ReadAt, class Offer>
bool stream_jitdump(uint64_t total, ReadAt read_at, Offer offer, uint64_t* moves_lost) {
  uint32_t header[3];
  if (total < 40 || !read_at(0, header, sizeof header) || header[0] != kJitdumpMagic || header[2] < 40 ||
      header[2] > total)
    return false;
  // Code moves refer to a blob by its code_index; the record that loaded it names it.
  std::unordered_map<uint64_t, uint64_t> load_of_index;
  std::string name;
  auto read_name = [&](uint64_t at, uint64_t end) {
    name.resize(std::min<uint64_t>(end - at, kMaxJitName + 1));
    if (!read_at(at, name.data(), name.size())) return false;
    const size_t length = strnlen(name.data(), name.size());
    if (length == 0 || length == name.size()) return false;
    name.resize(length);
    return true;
  };
  for (uint64_t offset = header[2];;) {
    uint32_t head[2];  // id, total_size
    if (total - offset < 16 || !read_at(offset, head, sizeof head) || head[1] < 16 ||
        head[1] > total - offset)
      break;
    const uint64_t body = offset + 16, end = offset + head[1];
    uint64_t fields[5];
    if (head[0] == kJitCodeLoad && body + 40 < end && read_at(body, fields, sizeof fields)) {
      // pid u32, tid u32, vma u64, code_addr u64, code_size u64, code_index u64, name\0, code
      const uint64_t code_addr = fields[2], code_size = fields[3], code_index = fields[4];
      if (code_size > 0 && read_name(body + 40, end)) {
        if (load_of_index.size() < kMaxJitdumpLoadsIndexed || load_of_index.count(code_index) != 0)
          load_of_index[code_index] = offset;
        offer(code_addr, code_size, name);
      }
    } else if (head[0] == kJitCodeMove && body + 48 <= end) {
      // pid u32, tid u32, vma u64, old_code_addr u64, new_code_addr u64, code_size u64, code_index u64
      uint64_t move[6];
      if (read_at(body, move, sizeof move) && move[4] > 0) {
        const auto it = load_of_index.find(move[5]);
        if (it == load_of_index.end()) {
          ++*moves_lost;
        } else if (const uint64_t at = it->second + 16 + 40;
                   read_name(at, std::min(total, at + kMaxJitName + 1))) {
          offer(move[3], move[4], name);
        }
      }
    }
    offset = end;
  }
  return true;
}

std::string file_note(int32_t pid, const std::string& path, const Collector::FileCounts& c, size_t bad,
                      uint64_t moves_lost, const JitReadOptions& options) {
  std::string note = "JIT symbols of pid " + std::to_string(pid) + ": " + std::to_string(c.kept) + " of " +
                     std::to_string(c.read) + " from " + path;
  if (c.unsampled != 0) note += " (" + std::to_string(c.unsampled) + " cover no sampled address)";
  if (c.shadowed != 0)
    note += " (" + std::to_string(c.shadowed) +
            " name no sampled address: other symbols covering them start closer, and name them)";
  if (c.unweighed != 0)
    note += " (" + std::to_string(c.unweighed) +
            " not weighed: their blobs overlapped the sampled addresses too often to follow)";
  if (c.superseded != 0)
    note += " (" + std::to_string(c.superseded) + " written over an earlier one at the same address)";
  if (bad != 0) note += " (" + std::to_string(bad) + " lines not understood)";
  if (moves_lost != 0)
    note += " (" + std::to_string(moves_lost) + " code moves of blobs loaded beyond the first " +
            std::to_string(kMaxJitdumpLoadsIndexed) + " not followed)";
  if (c.dropped != 0)
    note += "; " + std::to_string(c.dropped) + " dropped: the recording's JIT symbols reached " +
            options.bound_name + " (" + std::to_string(options.max_bytes >> 20) + " MiB)";
  return note;
}

}  // namespace

void ProcessTmpDirs::add(int32_t pid) {
  if (pid <= 0 || dir_of_pid_.count(pid) != 0 || dir_of_pid_.size() >= kMaxProcesses) return;
  const std::string proc = "/proc/" + std::to_string(pid);
  struct stat ns {};
  if (::stat((proc + "/ns/mnt").c_str(), &ns) != 0) return;
  for (size_t i = 0; i < dirs_.size(); ++i) {
    if (dirs_[i].namespace_dev == ns.st_dev && dirs_[i].namespace_ino == ns.st_ino) {
      dir_of_pid_.emplace(pid, i);
      return;
    }
  }
  if (dirs_.size() >= kMaxDirs) return;
  UniqueFd fd(::open((proc + "/root/tmp").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  // The namespace again: the pid may have been reused between the two (then nothing is held).
  struct stat again {};
  if (!fd || ::stat((proc + "/ns/mnt").c_str(), &again) != 0 || again.st_ino != ns.st_ino ||
      again.st_dev != ns.st_dev)
    return;
  dirs_.push_back(Dir{static_cast<uint64_t>(ns.st_dev), static_cast<uint64_t>(ns.st_ino), std::move(fd)});
  dir_of_pid_.emplace(pid, dirs_.size() - 1);
}

std::string ProcessTmpDirs::path_in_tmp(int32_t pid, const std::string& name) const {
  const auto it = dir_of_pid_.find(pid);
  if (it == dir_of_pid_.end()) return {};
  return "/proc/self/fd/" + std::to_string(dirs_[it->second].fd.get()) + "/" + name;
}

std::vector<RawJitSymbol> parse_perf_map(const std::string& text, int32_t pid, size_t* bad_lines) {
  std::vector<RawJitSymbol> out;
  size_t bad = 0;
  std::string_view rest(text);
  while (!rest.empty()) {
    const size_t newline = rest.find('\n');
    const std::string_view line = rest.substr(0, newline);
    rest.remove_prefix(newline == std::string_view::npos ? rest.size() : newline + 1);
    if (line.empty()) continue;
    uint64_t start = 0, size = 0;
    std::string_view name;
    if (parse_map_line(line, start, size, name))
      out.push_back(RawJitSymbol{pid, start, size, std::string(name)});
    else
      ++bad;
  }
  if (bad_lines != nullptr) *bad_lines = bad;
  return out;
}

bool parse_jitdump(const std::string& bytes, int32_t pid, std::vector<RawJitSymbol>& out) {
  auto read_at = [&](uint64_t offset, void* into, size_t size) {
    if (offset > bytes.size() || bytes.size() - offset < size) return false;
    std::memcpy(into, bytes.data() + offset, size);
    return true;
  };
  uint64_t moves_lost = 0;
  return stream_jitdump(
      bytes.size(), read_at,
      [&](uint64_t start, uint64_t size, const std::string& name) {
        out.push_back(RawJitSymbol{pid, start, size, name});
      },
      &moves_lost);
}

JitReadResult read_jit_symbols(RawProfile& profile, const JitReadOptions& options) {
  Collector collector(profile, options.max_bytes, options.every_symbol);
  // Copied: jit_symbols grows while the processes are walked, and processes do not.
  for (size_t p = 0; p < profile.processes.size(); ++p) {
    const RawProcess& process = profile.processes[p];
    const int32_t pid = process.pid;
    const bool live = process.end_ns == 0;
    collector.begin_process(pid);
    // The perf map: in the process's own /tmp while it lives, else in the /tmp held for it while it
    // lived, else ours.
    const std::string map_name = "perf-" + std::to_string(pid) + ".map";
    const std::string held = options.tmp_dirs ? options.tmp_dirs->path_in_tmp(pid, map_name) : "";
    UniqueFd map;
    if (live)
      map =
          open_regular(options, pid, "/proc/" + std::to_string(pid) + "/root/tmp/" + map_name, kMaxMapBytes);
    if (!map && !held.empty()) map = open_regular(options, pid, held, kMaxMapBytes);
    if (!map) map = open_regular(options, pid, "/tmp/" + map_name, kMaxMapBytes);
    if (map) {
      const size_t bad = stream_perf_map(map.get(), collector);
      collector.result.notes.push_back(
          file_note(pid, "/tmp/" + map_name, collector.take_file_counts(), bad, 0, options));
    }
    // The jitdump: the one it mapped, else one in its current directory.
    const std::string dump_name = "jit-" + std::to_string(pid) + ".dump";
    std::vector<std::string> candidates;
    for (const RawMapping& m : process.mappings) {
      if (m.module >= profile.modules.size()) continue;
      const std::string& path = profile.modules[m.module].path;
      if (path.size() >= dump_name.size() + 1 &&
          path.compare(path.size() - dump_name.size() - 1, std::string::npos, "/" + dump_name) == 0) {
        // Through the process's root while it lives: its mount namespace may differ from ours.
        if (live) candidates.push_back("/proc/" + std::to_string(pid) + "/root" + path);
        // Under its /tmp: the one held for it, once it has exited.
        if (!live && options.tmp_dirs && path.starts_with("/tmp/") &&
            path.find('/', 5) == std::string::npos) {
          std::string held_dump = options.tmp_dirs->path_in_tmp(pid, path.substr(5));
          if (!held_dump.empty()) candidates.push_back(std::move(held_dump));
        }
        candidates.push_back(path);
        break;
      }
    }
    if (live) candidates.push_back("/proc/" + std::to_string(pid) + "/cwd/" + dump_name);
    for (const std::string& path : candidates) {
      UniqueFd dump = open_regular(options, pid, path, kMaxJitdumpBytes);
      struct stat st {};
      if (!dump || ::fstat(dump.get(), &st) != 0) continue;
      auto read_at = [fd = dump.get()](uint64_t offset, void* into, size_t size) {
        return read_some(fd, static_cast<char*>(into), size, static_cast<off_t>(offset)) ==
               static_cast<ssize_t>(size);
      };
      uint64_t moves_lost = 0;
      const bool is_jitdump = stream_jitdump(
          static_cast<uint64_t>(st.st_size), read_at,
          [&](uint64_t start, uint64_t size, const std::string& name) { collector.offer(start, size, name); },
          &moves_lost);
      const Collector::FileCounts counts = collector.take_file_counts();
      if (!is_jitdump) continue;
      collector.result.notes.push_back(file_note(pid, path, counts, 0, moves_lost, options));
      break;
    }
  }
  collector.finish_process();
  return std::move(collector.result);
}

}  // namespace hpd::session
