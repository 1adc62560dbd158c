// Profile interning: strings, libs, functions, native symbols, frames and stacks are stored once.
#include "hpd/model/profile.h"

#include <algorithm>
#include <cstring>

namespace hpd {

const char* to_string(Category c) {
  switch (c) {
    case Category::kOther: return "Other";
    case Category::kIdle: return "Idle";
    case Category::kUser: return "User";
    case Category::kKernel: return "Kernel";
    case Category::kWaitCpu: return "Waiting for CPU";
  }
  return "Other";
}

uint32_t StringTable::intern(std::string_view s) {
  auto it = index_.find(std::string(s));
  if (it != index_.end()) return it->second;
  const auto index = static_cast<uint32_t>(strings_.size());
  strings_.emplace_back(s);
  index_.emplace(strings_.back(), index);
  return index;
}

void CallLatency::merge(const CallLatency& other) {
  calls += other.calls;
  sum_ns += other.sum_ns;
  outer_ns += other.outer_ns;
  max_ns = std::max(max_ns, other.max_ns);
  histogram.merge(other.histogram);
}

namespace {
// Appends the raw bytes of trivially copyable values to an interning key.
template <typename... T>
std::string pack_key(const T&... values) {
  std::string key;
  key.reserve((sizeof(T) + ...));
  (key.append(reinterpret_cast<const char*>(&values), sizeof(T)), ...);
  return key;
}
}  // namespace

uint32_t Profile::intern_lib(const Lib& lib) {
  std::string key = lib.path;
  key.push_back('\0');
  key += lib.build_id;
  auto [it, inserted] = lib_index_.try_emplace(std::move(key), static_cast<uint32_t>(libs.size()));
  if (inserted) libs.push_back(lib);
  return it->second;
}

uint32_t Profile::intern_func(std::string_view name, std::string_view file, uint32_t lib) {
  const uint32_t name_index = strings.intern(name);
  const uint32_t file_index = file.empty() ? kNoIndex : strings.intern(file);
  auto [it, inserted] =
      func_index_.try_emplace(pack_key(name_index, file_index, lib), static_cast<uint32_t>(funcs.size()));
  if (inserted) funcs.push_back(Func{name_index, file_index, lib});
  return it->second;
}

uint32_t Profile::intern_native_symbol(uint32_t lib, uint64_t address, uint64_t size, std::string_view name) {
  const uint32_t name_index = strings.intern(name);
  auto [it, inserted] = native_symbol_index_.try_emplace(pack_key(lib, address, name_index),
                                                         static_cast<uint32_t>(native_symbols.size()));
  if (inserted) native_symbols.push_back(NativeSymbol{lib, address, size, name_index});
  return it->second;
}

uint32_t Profile::intern_frame(const Frame& f) {
  auto [it, inserted] = frame_index_.try_emplace(
      pack_key(f.func, f.native_symbol, f.lib, f.address, f.line, f.column, f.inline_depth, f.category),
      static_cast<uint32_t>(frames.size()));
  if (inserted) frames.push_back(f);
  return it->second;
}

uint32_t Profile::intern_stack(uint32_t prefix, uint32_t frame, bool tail_call) {
  const uint64_t key = (static_cast<uint64_t>(prefix) << 32) | frame;
  auto [it, inserted] = stack_index_.try_emplace(key, static_cast<uint32_t>(stacks.size()));
  if (inserted) stacks.push_back(Stack{prefix, frame, tail_call});
  // The frames' addresses decide it, so an equal stack says the same; a yes is never taken back.
  if (tail_call) stacks[it->second].tail_call = true;
  return it->second;
}

std::vector<uint32_t> Profile::stack_frames_root_first(uint32_t stack) const {
  std::vector<uint32_t> out;
  for (uint32_t s = stack; s != kNoIndex; s = stacks[s].prefix) out.push_back(stacks[s].frame);
  std::reverse(out.begin(), out.end());
  return out;
}

std::string samples_not_taken_note(const Profile& profile) {
  const RecordingInfo& info = profile.meta.recording;
  const uint64_t interval_ns = sampling_interval_ns(info);
  SamplesNotTaken missed;
  uint64_t taken = 0;
  for (const Thread& t : profile.threads) {
    for (const Sample& s : t.samples) {
      if (s.kind != SampleKind::kOnCpu) continue;
      missed.add(s.cpu_delta_ns, 1, interval_ns);
      ++taken;
    }
    for (const SampleSum& s : t.sample_sums) {
      if (s.kind != SampleKind::kOnCpu) continue;
      missed.add(s.not_taken);
      taken += s.samples;
    }
  }
  return samples_not_taken_note(missed, taken, info);
}

}  // namespace hpd
