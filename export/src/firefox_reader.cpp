// Reads hpd's own Firefox processed profiles (plain or gzip) back into a Profile, checking every index.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "firefox/extensions_read.h"
#include "firefox/json_path.h"
#include "firefox/json_read.h"
#include "firefox_format.h"
#include "hpd/export/firefox/schema.h"
#include "hpd/export/firefox_reader.h"

namespace hpd {

namespace {

using nlohmann::json;

using firefox::as_integer;
using firefox::as_number;
using firefox::FormatError;
using firefox::member;
using firefox::ms_to_ns;
using firefox::optional_member;
using firefox::optional_string;
using firefox::parse_id;
using firefox::string_member;
using firefox::Table;

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ExportError("cannot read profile '" + path + "': " + std::strerror(errno));
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw ExportError("cannot read profile '" + path + "': read error");
  return std::move(buffer).str();
}

bool is_gzip(std::string_view data) {
  return data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f &&
         static_cast<unsigned char>(data[1]) == 0x8b;
}

// Decompresses every gzip member of `data`.
std::string gunzip(std::string_view data) {
  z_stream stream{};
  // 15 + 16: gzip wrapper only.
  if (inflateInit2(&stream, 15 + 16) != Z_OK) throw FormatError("cannot initialize gzip decompression");
  std::string out;
  std::vector<unsigned char> chunk(size_t{1} << 18);
  size_t consumed = 0;
  int rc = Z_OK;
  try {
    while (true) {
      const size_t slice = std::min<size_t>(data.size() - consumed, 1u << 30);
      stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + consumed));
      stream.avail_in = static_cast<uInt>(slice);
      do {
        stream.next_out = chunk.data();
        stream.avail_out = static_cast<uInt>(chunk.size());
        rc = inflate(&stream, Z_NO_FLUSH);
        if (rc == Z_NEED_DICT || rc == Z_DATA_ERROR || rc == Z_MEM_ERROR || rc == Z_STREAM_ERROR) {
          throw FormatError(std::string("corrupt gzip data: ") +
                            (stream.msg ? stream.msg : "inflate failed"));
        }
        out.append(reinterpret_cast<const char*>(chunk.data()), chunk.size() - stream.avail_out);
      } while (stream.avail_out == 0 && rc != Z_STREAM_END);
      consumed += slice - stream.avail_in;
      if (rc == Z_STREAM_END) {
        if (consumed == data.size()) break;
        inflateReset(&stream);  // another gzip member follows
        continue;
      }
      if (consumed == data.size()) throw FormatError("truncated gzip data (the file ends inside the stream)");
    }
  } catch (...) {
    inflateEnd(&stream);
    throw;
  }
  inflateEnd(&stream);
  return out;
}

using firefox::JsonPath;
namespace path = firefox::path;

Category category_from_name(const std::string& name) {
  for (int c = 0; c < kCategoryCount; ++c) {
    if (name == firefox::kCategories[c].name) return static_cast<Category>(c);
  }
  return Category::kOther;
}

class FirefoxReader {
 public:
  explicit FirefoxReader(const json& root) : root_(root) {}

  Profile read() {
    if (!root_.is_object()) throw FormatError("not a Firefox profile: the JSON document is not an object");
    const json& meta = member(root_, firefox::profile::kMeta, JsonPath());
    const json* version = optional_member(meta, firefox::meta::kPreprocessedProfileVersion);
    if (version == nullptr || !version->is_number()) {
      throw FormatError("not a Firefox processed profile (" +
                        path::meta(firefox::meta::kPreprocessedProfileVersion).str() +
                        " is missing; Gecko or other formats are not read)");
    }
    const auto v = as_integer(*version);
    if (!v || *v < kFirefoxReaderMinVersion || *v > kFirefoxReaderMaxVersion) {
      throw FormatError(
          "processed profile version " + version->dump() + " is not supported (this reader understands " +
          std::to_string(kFirefoxReaderMinVersion) + " to " + std::to_string(kFirefoxReaderMaxVersion) + ")");
    }
    read_meta(meta);
    read_libs();
    read_shared();
    read_threads();
    firefox::order_allocations(p_);
    apply_thread_losses();
    return std::move(p_);
  }

 private:
  void read_meta(const json& meta) {
    ProfileMeta& out = p_.meta;
    RecordingInfo& info = out.recording;
    out.product = optional_string(meta, firefox::meta::kProduct);
    const JsonPath interval = path::meta(firefox::meta::kInterval);
    interval_ns_ = ms_to_ns(
        as_number(member(meta, firefox::meta::kInterval, JsonPath().key(firefox::profile::kMeta)), interval),
        interval);
    if (interval_ns_ <= 0) throw FormatError(interval.str() + " must be positive");
    info.interval_ns = static_cast<uint64_t>(interval_ns_);
    if (const json* start = optional_member(meta, firefox::meta::kStartTime);
        start != nullptr && start->is_number()) {
      info.start_unix_ns = static_cast<uint64_t>(
          std::max<int64_t>(0, ms_to_ns(start->get<double>(), path::meta(firefox::meta::kStartTime))));
    }
    if (const json* mono = optional_member(meta, firefox::meta::kStartTimeAsClockMonotonicNs);
        mono != nullptr) {
      const auto n = as_integer(*mono);
      if (n && *n >= 0) info.start_mono_ns = static_cast<uint64_t>(*n);
    }
    if (const json* end = optional_member(meta, firefox::meta::kProfilingEndTime);
        end != nullptr && end->is_number()) {
      info.end_mono_ns = to_mono(end->get<double>(), path::meta(firefox::meta::kProfilingEndTime));
    }
    if (const json* cpus = optional_member(meta, firefox::meta::kLogicalCpus); cpus != nullptr) {
      const auto n = as_integer(*cpus);
      if (n && *n > 0 && *n <= std::numeric_limits<uint32_t>::max())
        info.logical_cpus = static_cast<uint32_t>(*n);
    }
    info.arguments = firefox::split_shell_words(optional_string(meta, firefox::meta::kArguments));

    const json& units =
        meta.contains(firefox::meta::kSampleUnits) ? meta[firefox::meta::kSampleUnits] : json();
    const std::string cpu_unit = optional_string(units, firefox::sample_units::kThreadCpuDelta);
    if (cpu_unit == "ns") {
      cpu_delta_scale_ = 1;
    } else if (cpu_unit == "\xC2\xB5s") {  // MICRO SIGN
      cpu_delta_scale_ = 1000;
    } else {
      cpu_delta_scale_ = 0;  // cycles or unknown: no CPU time to recover
    }

    const json& categories =
        member(meta, firefox::meta::kCategories, JsonPath().key(firefox::profile::kMeta));
    if (!categories.is_array() || categories.empty())
      throw FormatError(path::meta(firefox::meta::kCategories).str() + " is not a non-empty array");
    for (const json& c : categories) {
      category_map_.push_back(category_from_name(optional_string(c, firefox::category::kName)));
      // Where a frame's sample was, by its subcategory's name (firefox_format.h); 0 = on the CPU.
      std::vector<uint8_t> where;
      if (const json* subs = optional_member(c, firefox::category::kSubcategories);
          subs != nullptr && subs->is_array()) {
        for (const json& name : *subs) {
          const std::string text = name.is_string() ? name.get<std::string>() : std::string();
          where.push_back(text == firefox::kOffCpuSubcategories[firefox::kBlockedSubcategory]   ? 1
                          : text == firefox::kOffCpuSubcategories[firefox::kWaitingSubcategory] ? 2
                                                                                                : 0);
        }
      }
      subcategory_where_.push_back(std::move(where));
    }

    if (const json* extra = optional_member(meta, firefox::meta::kExtra);
        extra != nullptr && extra->is_array())
      read_extra(*extra);
  }

  void read_extra(const json& sections) {
    RecordingInfo& info = p_.meta.recording;
    LostCounts& lost = p_.meta.lost;
    for (const json& section : sections) {
      const json* entries = optional_member(section, firefox::extra::kEntries);
      if (entries == nullptr || !entries->is_array()) continue;
      for (const json& entry : *entries) {
        const std::string label = optional_string(entry, firefox::extra::kLabel);
        const json* value = optional_member(entry, firefox::extra::kValue);
        if (value == nullptr) continue;
        const std::string text = value->is_string() ? value->get<std::string>() : std::string();
        const uint64_t count = static_cast<uint64_t>(std::max<int64_t>(0, as_integer(*value).value_or(0)));
        if (label == firefox::kTargetLabel) info.target = text;
        if (label == firefox::kBackendLabel) info.backend = text;
        if (label == firefox::kEventLabel) info.event = text;
        if (label == firefox::kCallGraphLabel) info.call_graph = text;
        if (label == firefox::kFrequencyLabel)
          info.frequency_hz = static_cast<uint32_t>(std::min<uint64_t>(count, UINT32_MAX));
        if (label == firefox::kKernelFramesLabel) info.kernel_frames = text == "yes";
        if (label == firefox::kHostnameLabel) info.hostname = text;
        if (label == firefox::kKernelReleaseLabel) info.kernel_release = text;
        if (label == firefox::kCallCounterLabel) info.call_counter = text;
        if (label == firefox::kRequestedLabel) info.requested_mono_ns = count;
        if (label == firefox::kFirstSampleLabel) info.first_sample_mono_ns = count;
        if (label == firefox::kHostStealLabel) {
          info.host_steal_known = true;
          info.host_steal_ns = count;
        }
        if (label == firefox::kLostRecordsLabel) lost.lost_records = count;
        if (label == firefox::kThrottleLabel) lost.throttle_events = count;
        if (label == firefox::kStackFailuresLabel) lost.stack_failures = count;
        if (label == firefox::kTruncatedLabel) lost.truncated_stacks = count;
        firefox::read_allocation_extra(p_.meta.alloc, label, count);
        if (label.rfind(firefox::kMissingModulePrefix, 0) == 0 && !text.empty()) {
          p_.meta.missing_modules.push_back(text);
        }
        if (firefox::ThreadLossLabel loss; firefox::parse_thread_loss_label(label, loss)) {
          LostCounts& l = thread_losses_[thread_key(loss.pid, loss.tid)];
          if (loss.what == firefox::kLostRecordsLabel) l.lost_records = count;
          if (loss.what == firefox::kThrottleLabel) l.throttle_events = count;
          if (loss.what == firefox::kStackFailuresLabel) l.stack_failures = count;
          if (loss.what == firefox::kTruncatedLabel) l.truncated_stacks = count;
        }
      }
    }
  }

  static uint64_t thread_key(int32_t pid, int32_t tid) {
    return static_cast<uint64_t>(static_cast<uint32_t>(pid)) << 32 | static_cast<uint32_t>(tid);
  }

  // meta.extra comes before the threads; losses of threads the profile does not have stay in the
  // totals only.
  void apply_thread_losses() {
    if (thread_losses_.empty()) return;
    for (Thread& t : p_.threads) {
      if (auto it = thread_losses_.find(thread_key(t.pid, t.tid)); it != thread_losses_.end())
        t.lost = it->second;
    }
  }

  // A time in ms relative to meta.startTime as a monotonic timestamp (clamped at 0).
  template <typename Where>
  uint64_t to_mono(double ms, const Where& where) const {
    return firefox::to_mono(p_, ms, where);
  }

  void read_libs() {
    const json& libs = member(root_, firefox::profile::kLibs, JsonPath());
    if (!libs.is_array())
      throw FormatError(JsonPath().key(firefox::profile::kLibs).str() + " is not an array");
    for (size_t i = 0; i < libs.size(); ++i) {
      const json& l = libs[i];
      const JsonPath where = path::lib(i);
      Lib lib;
      lib.name = string_member(l, firefox::lib::kName, where);
      lib.path = optional_string(l, firefox::lib::kPath);
      lib.debug_name = optional_string(l, firefox::lib::kDebugName);
      lib.debug_path = optional_string(l, firefox::lib::kDebugPath);
      lib.build_id = optional_string(l, firefox::lib::kCodeId);
      lib.arch = optional_string(l, firefox::lib::kArch);
      // The format has no kernel flag; hpd names the kernel image "[kernel.kallsyms]" (perf's name).
      lib.is_kernel = !lib.name.empty() && lib.name.front() == '[';
      lib_map_.push_back(p_.intern_lib(lib));
    }
  }

  void read_shared() {
    const JsonPath shared_path = JsonPath().key(firefox::profile::kShared);
    const JsonPath string_array = path::shared(firefox::shared::kStringArray);
    const json& shared = member(root_, firefox::profile::kShared, JsonPath());
    const json& strings = member(shared, firefox::shared::kStringArray, shared_path);
    if (!strings.is_array()) throw FormatError(string_array.str() + " is not an array");
    string_values_.reserve(strings.size());
    for (size_t i = 0; i < strings.size(); ++i) {
      if (!strings[i].is_string()) throw FormatError(string_array.at(i).str() + " is not a string");
      string_values_.push_back(&strings[i].get_ref<const std::string&>());
    }
    const size_t n_strings = string_values_.size();

    // sources: file names of functions.
    std::vector<uint32_t> source_file;
    if (optional_member(shared, firefox::shared::kSources) != nullptr) {
      const Table sources(shared, firefox::shared::kSources, shared_path);
      const json& filename = sources.column(firefox::sources::kFilename);
      for (size_t i = 0; i < sources.length(); ++i) {
        source_file.push_back(
            sources.index(filename, firefox::sources::kFilename, i, n_strings, string_array));
      }
    }

    const Table resources(shared, firefox::shared::kResourceTable, shared_path);
    std::vector<uint32_t> resource_lib;
    {
      // The column check comes first: a bogus length must not size an allocation.
      const json& lib = resources.column(firefox::resources::kLib);
      for (size_t i = 0; i < resources.length(); ++i) {
        resource_lib.push_back(resources.index(lib, firefox::resources::kLib, i, lib_map_.size(),
                                               JsonPath().key(firefox::profile::kLibs), true));
      }
    }

    const Table symbols(shared, firefox::shared::kNativeSymbols, shared_path);
    {
      const json& lib = symbols.column(firefox::native_symbols::kLibIndex);
      const json& address = symbols.column(firefox::native_symbols::kAddress);
      const json& name = symbols.column(firefox::native_symbols::kName);
      const json& size = symbols.column(firefox::native_symbols::kFunctionSize);
      for (size_t i = 0; i < symbols.length(); ++i) {
        const uint32_t l = symbols.index(lib, firefox::native_symbols::kLibIndex, i, lib_map_.size(),
                                         JsonPath().key(firefox::profile::kLibs));
        const int64_t a = symbols.integer(address, firefox::native_symbols::kAddress, i, 0);
        const uint32_t s = symbols.index(name, firefox::native_symbols::kName, i, n_strings, string_array);
        const int64_t sz = symbols.integer(size, firefox::native_symbols::kFunctionSize, i, 0);
        if (a < 0 || sz < 0)
          throw FormatError(symbols.element(firefox::native_symbols::kAddress, i).str() +
                            " or its size is negative");
        symbol_map_.push_back(p_.intern_native_symbol(lib_map_[l], static_cast<uint64_t>(a),
                                                      static_cast<uint64_t>(sz), *string_values_[s]));
        symbol_lib_.push_back(lib_map_[l]);
      }
    }

    // The leaf frames hpd adds to off-CPU samples (Idle, subcategory Blocked or Waiting for CPU) are
    // not frames of the Profile: their stacks read as their prefixes, their functions are left out.
    const Table frames(shared, firefox::shared::kFrameTable, shared_path);
    std::vector<bool> leaf_frame(frames.length());
    std::unordered_set<int64_t> leaf_funcs;
    if (frames.has(firefox::frames::kSubcategory)) {
      const json& category = frames.column(firefox::frames::kCategory);
      const json& subcategory = frames.column(firefox::frames::kSubcategory);
      const json& func = frames.column(firefox::frames::kFunc);
      for (size_t i = 0; i < frames.length(); ++i) {
        const int64_t c = as_integer(category[i]).value_or(-1);
        if (c < 0 || static_cast<size_t>(c) >= category_map_.size() || category_map_[c] != Category::kIdle ||
            off_cpu_where(static_cast<size_t>(c), subcategory[i]) == 0)
          continue;
        leaf_frame[i] = true;
        leaf_funcs.insert(as_integer(func[i]).value_or(-1));
      }
    }

    const Table funcs(shared, firefox::shared::kFuncTable, shared_path);
    {
      const json& name = funcs.column(firefox::funcs::kName);
      const json& resource = funcs.column(firefox::funcs::kResource);
      const json& source = funcs.column(firefox::funcs::kSource);
      for (size_t i = 0; i < funcs.length(); ++i) {
        const uint32_t s = funcs.index(name, firefox::funcs::kName, i, n_strings, string_array);
        if (leaf_funcs.count(static_cast<int64_t>(i)) != 0) {
          func_map_.push_back(kNoIndex);
          continue;
        }
        const uint32_t r = funcs.index(resource, firefox::funcs::kResource, i, resources.length(),
                                       path::shared(firefox::shared::kResourceTable), true, true);
        const uint32_t src = funcs.index(source, firefox::funcs::kSource, i, source_file.size(),
                                         path::shared(firefox::shared::kSources), true);
        const uint32_t lib = r == kNoIndex ? kNoIndex : resource_lib[r];
        const std::string_view file =
            src == kNoIndex ? std::string_view() : *string_values_[source_file[src]];
        func_map_.push_back(
            p_.intern_func(*string_values_[s], file, lib == kNoIndex ? kNoIndex : lib_map_[lib]));
      }
    }

    {
      const json& address = frames.column(firefox::frames::kAddress);
      const json& inline_depth = frames.column(firefox::frames::kInlineDepth);
      const json& category = frames.column(firefox::frames::kCategory);
      const json& func = frames.column(firefox::frames::kFunc);
      const json& symbol = frames.column(firefox::frames::kNativeSymbol);
      const json& line = frames.column(firefox::frames::kLine);
      const json& column = frames.column(firefox::frames::kColumn);
      const json* subcategory =
          frames.has(firefox::frames::kSubcategory) ? &frames.column(firefox::frames::kSubcategory) : nullptr;
      for (size_t i = 0; i < frames.length(); ++i) {
        Frame f;
        const uint32_t fn = frames.index(func, firefox::frames::kFunc, i, func_map_.size(),
                                         path::shared(firefox::shared::kFuncTable));
        if (leaf_frame[i]) {
          frame_map_.push_back(kNoIndex);
          continue;
        }
        f.func = func_map_[fn];
        if (f.func == kNoIndex)
          throw FormatError(frames.element(firefox::frames::kFunc, i).str() +
                            " names the function of an off-CPU leaf frame");
        const uint32_t sym = frames.index(symbol, firefox::frames::kNativeSymbol, i, symbol_map_.size(),
                                          path::shared(firefox::shared::kNativeSymbols), true);
        f.native_symbol = sym == kNoIndex ? kNoIndex : symbol_map_[sym];
        f.lib = sym != kNoIndex ? symbol_lib_[sym] : p_.funcs[f.func].lib;
        const int64_t a = frames.integer(address, firefox::frames::kAddress, i, -1);
        if (a < -1) throw FormatError(frames.element(firefox::frames::kAddress, i).str() + " is negative");
        f.address = a;
        const int64_t depth = frames.integer(inline_depth, firefox::frames::kInlineDepth, i, 0);
        if (depth < 0 || depth > 255)
          throw FormatError(frames.element(firefox::frames::kInlineDepth, i).str() + " is not in 0..255");
        f.inline_depth = static_cast<uint8_t>(depth);
        const uint32_t c = frames.index(category, firefox::frames::kCategory, i, category_map_.size(),
                                        path::meta(firefox::meta::kCategories), true);
        f.category = c == kNoIndex ? Category::kOther : category_map_[c];
        const int64_t ln = frames.integer(line, firefox::frames::kLine, i, 0);
        const int64_t col = frames.integer(column, firefox::frames::kColumn, i, 0);
        if (ln < 0 || col < 0 || ln > UINT32_MAX || col > UINT32_MAX) {
          throw FormatError(frames.element(firefox::frames::kLine, i).str() +
                            " or its column is out of range");
        }
        f.line = static_cast<uint32_t>(ln);
        f.column = static_cast<uint32_t>(col);
        if (f.category == Category::kKernel && f.lib != kNoIndex) p_.libs[f.lib].is_kernel = true;
        // A frame of an off-CPU sample keeps its function's CPU category in the file; the Profile
        // gives it the sample's.
        if (c != kNoIndex && subcategory != nullptr) {
          const int where = off_cpu_where(c, (*subcategory)[i]);
          if (where != 0) f.category = where == 1 ? Category::kIdle : Category::kWaitCpu;
        }
        frame_map_.push_back(p_.intern_frame(f));
      }
    }

    const Table stacks(shared, firefox::shared::kStackTable, shared_path);
    {
      const json& frame = stacks.column(firefox::stacks::kFrame);
      if (!stacks.has(firefox::stacks::kPrefixOffset)) {
        throw FormatError(path::shared(firefox::shared::kStackTable).str() + " has no " +
                          firefox::stacks::kPrefixOffset + " column (a layout older than version 66)");
      }
      const json& offset = stacks.column(firefox::stacks::kPrefixOffset);
      for (size_t i = 0; i < stacks.length(); ++i) {
        const uint32_t fr = stacks.index(frame, firefox::stacks::kFrame, i, frame_map_.size(),
                                         path::shared(firefox::shared::kFrameTable));
        const int64_t off = stacks.integer(offset, firefox::stacks::kPrefixOffset, i, -1);
        if (off < 0 || static_cast<uint64_t>(off) > i) {
          throw FormatError(stacks.element(firefox::stacks::kPrefixOffset, i).str() + " = " +
                            std::to_string(off) + " does not point at an earlier stack");
        }
        const uint32_t prefix = off == 0 ? kNoIndex : stack_map_[i - static_cast<size_t>(off)];
        // An off-CPU leaf frame's stack is its prefix (none: the sample had no stack).
        stack_map_.push_back(frame_map_[fr] == kNoIndex ? prefix : p_.intern_stack(prefix, frame_map_[fr]));
        leaf_stack_rows_.push_back(frame_map_[fr] == kNoIndex);
      }
    }
  }

  void read_threads() {
    const json& threads = member(root_, firefox::profile::kThreads, JsonPath());
    if (!threads.is_array())
      throw FormatError(JsonPath().key(firefox::profile::kThreads).str() + " is not an array");
    for (size_t i = 0; i < threads.size(); ++i) read_thread(threads[i], path::thread(i));
  }

  void read_thread(const json& t, const JsonPath& where) {
    if (const json* calls = optional_member(t, firefox::kCallsThreadField);
        calls != nullptr && calls->is_boolean() && calls->get<bool>()) {
      firefox::read_calls_thread(p_, t, where, stack_map_);
      return;
    }
    Thread thread;
    thread.name = optional_string(t, firefox::thread::kName);
    thread.process_name = optional_string(t, firefox::thread::kProcessName);
    thread.pid = parse_id(member(t, firefox::thread::kPid, where), where.key(firefox::thread::kPid));
    thread.tid = parse_id(member(t, firefox::thread::kTid, where), where.key(firefox::thread::kTid));
    const json* is_main = optional_member(t, firefox::thread::kIsMainThread);
    thread.is_main = is_main != nullptr && is_main->is_boolean() && is_main->get<bool>();
    const json& reg = member(t, firefox::thread::kRegisterTime, where);
    if (reg.is_number())
      thread.start_ns = to_mono(reg.get<double>(), where.key(firefox::thread::kRegisterTime));
    const json& unreg = member(t, firefox::thread::kUnregisterTime, where);
    if (unreg.is_number())
      thread.end_ns = to_mono(unreg.get<double>(), where.key(firefox::thread::kUnregisterTime));

    const Table samples(t, firefox::thread::kSamples, where);
    const size_t n = samples.length();
    const json& stack = samples.column(firefox::samples::kStack);
    thread.samples.resize(n);
    if (samples.has(firefox::samples::kTime)) {
      const json& time = samples.column(firefox::samples::kTime);
      for (size_t i = 0; i < n; ++i) {
        thread.samples[i].time_ns = to_mono(as_number(time[i], samples.element(firefox::samples::kTime, i)),
                                            samples.element(firefox::samples::kTime, i));
      }
    } else {
      const json& deltas = samples.column(firefox::samples::kTimeDeltas);
      double ms = 0;
      for (size_t i = 0; i < n; ++i) {
        ms += as_number(deltas[i], samples.element(firefox::samples::kTimeDeltas, i));
        thread.samples[i].time_ns = to_mono(ms, samples.element(firefox::samples::kTimeDeltas, i));
      }
    }
    const json* cpu = samples.has(firefox::samples::kThreadCpuDelta)
                          ? &samples.column(firefox::samples::kThreadCpuDelta)
                          : nullptr;
    const json* ends =
        samples.has(firefox::kStackEndColumn) ? &samples.column(firefox::kStackEndColumn) : nullptr;
    for (size_t i = 0; i < n; ++i) {
      Sample& s = thread.samples[i];
      if (ends != nullptr && (*ends)[i].is_number_unsigned() && (*ends)[i].get<uint64_t>() <= 3)
        s.stack_end = static_cast<StackEnd>((*ends)[i].get<uint64_t>());
      const uint32_t st = samples.index(stack, firefox::samples::kStack, i, stack_map_.size(),
                                        path::shared(firefox::shared::kStackTable), true);
      s.stack = st == kNoIndex ? kNoIndex : stack_map_[st];
      if (cpu != nullptr && !(*cpu)[i].is_null()) {
        const double d = as_number((*cpu)[i], samples.element(firefox::samples::kThreadCpuDelta, i)) *
                         static_cast<double>(cpu_delta_scale_);
        if (!(d >= 0) || d > 9.0e18)
          throw FormatError(samples.element(firefox::samples::kThreadCpuDelta, i).str() + " is out of range");
        s.cpu_delta_ns = static_cast<uint64_t>(std::llround(d));
      }
    }

    // Off-CPU samples are named by their markers (see the writer); MIP counts and tail-call edges
    // have theirs.
    if (optional_member(t, firefox::thread::kMarkers) != nullptr) {
      const Table markers(t, firefox::thread::kMarkers, where);
      const json& data = markers.column(firefox::markers::kData);
      for (size_t i = 0; i < markers.length(); ++i) {
        const json& d = data[i];
        if (d.is_object() && optional_string(d, firefox::markers::kDataType) == firefox::kMipSchema) {
          firefox::read_mip_marker(p_, markers, i, thread.pid, func_map_, string_values_);
          continue;
        }
        if (d.is_object() && optional_string(d, firefox::markers::kDataType) == firefox::kTailCallSchema) {
          firefox::read_tail_call_marker(p_, markers, i, stack_map_, leaf_stack_rows_, string_values_);
          continue;
        }
        if (!d.is_object()) continue;
        firefox::read_off_cpu_marker(markers, i, thread.samples);
      }
    }
    std::stable_sort(thread.samples.begin(), thread.samples.end(),
                     [](const Sample& a, const Sample& b) { return a.time_ns < b.time_ns; });
    firefox::read_native_allocations(p_, t, where, thread.pid, thread.tid, stack_map_);
    p_.threads.push_back(std::move(thread));
  }

  const json& root_;
  Profile p_;
  int64_t interval_ns_ = 0;
  uint64_t cpu_delta_scale_ = 1;
  std::vector<Category> category_map_;
  std::vector<std::vector<uint8_t>> subcategory_where_;  // per category and subcategory: 0, 1, 2

  // Where a frame of category `c` with this subcategory value was: 0 on the CPU (or unknown),
  // 1 blocked, 2 waiting for a CPU.
  int off_cpu_where(size_t c, const json& subcategory) const {
    const int64_t s = as_integer(subcategory).value_or(-1);
    if (c >= subcategory_where_.size() || s < 0 || static_cast<size_t>(s) >= subcategory_where_[c].size())
      return 0;
    return subcategory_where_[c][static_cast<size_t>(s)];
  }
  std::unordered_map<uint64_t, LostCounts> thread_losses_;  // from meta.extra, by thread_key
  std::vector<const std::string*> string_values_;
  std::vector<uint32_t> lib_map_;
  std::vector<uint32_t> symbol_map_;
  std::vector<uint32_t> symbol_lib_;
  std::vector<uint32_t> func_map_;
  std::vector<uint32_t> frame_map_;
  std::vector<uint32_t> stack_map_;
  std::vector<bool> leaf_stack_rows_;  // per stack table row: an off-CPU leaf frame's (no stack of p_)
};

}  // namespace

Profile parse_firefox_json(std::string_view json_text, const std::string& source) {
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number beyond a double (1e999): both name the file.
    throw ExportError(source + ": not a JSON document (" + e.what() + ")");
  }
  try {
    return FirefoxReader(root).read();
  } catch (const FormatError& e) {
    throw ExportError(source + ": " + e.what());
  } catch (const json::exception& e) {
    // A value of an unexpected type deep inside; the checks above should have caught it first.
    throw ExportError(source + ": malformed profile (" + e.what() + ")");
  }
}

Profile read_firefox_file(const std::string& path) {
  std::string data = read_whole_file(path);
  if (is_gzip(data)) {
    try {
      data = gunzip(data);
    } catch (const FormatError& e) {
      throw ExportError(path + ": " + e.what());
    }
  }
  return parse_firefox_json(data, path);
}

}  // namespace hpd
