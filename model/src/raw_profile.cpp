// RawProfile helpers: stack interning, module/process/thread lookup.
#include "hpd/model/raw_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <unordered_set>

namespace hpd {

const char* to_string(StackEnd end) {
  switch (end) {
    case StackEnd::kComplete: return "complete";
    case StackEnd::kTruncated: return "truncated";
    case StackEnd::kFailed: return "failed";
    case StackEnd::kUnknown: break;
  }
  return "unknown";
}

const RawMapping* RawProcess::find_mapping(uint64_t address, uint64_t time_ns) const {
  // Later mappings win: a library mapped over an old range replaces it from its time on.
  auto live_at = [time_ns](const RawMapping& m) { return m.unmapped_ns == 0 || time_ns < m.unmapped_ns; };
  for (auto it = mappings.rbegin(); it != mappings.rend(); ++it) {
    if (address >= it->start && address < it->end && it->time_ns <= time_ns && live_at(*it)) return &*it;
  }
  // A sample may arrive (by timestamp) a little before its mmap record; accept a covering mapping
  // that was not yet unmapped.
  for (auto it = mappings.rbegin(); it != mappings.rend(); ++it) {
    if (address >= it->start && address < it->end && live_at(*it)) return &*it;
  }
  return nullptr;
}

namespace {
uint64_t hash_frames(std::span<const uint64_t> kernel, std::span<const uint64_t> user) {
  // FNV-1a-like over the 64-bit words in four lanes (word i into lane i % 4), with the split point mixed
  // in: a lane's multiply waits only for its own last one, where one chain waited for every word's
  // (a deep stack's hash was 4% of hpd's CPU in a recording of a whole build machine).
  constexpr uint64_t kPrime = 1099511628211ULL;
  uint64_t lane[4] = {1469598103934665603ULL ^ (kernel.size() * 0x9E3779B97F4A7C15ULL), 0x243F6A8885A308D3ULL,
                      0x13198A2E03707344ULL, 0xA4093822299F31D0ULL};
  size_t next = 0;
  auto mix = [](uint64_t& h, uint64_t v) {
    h ^= v;
    h *= kPrime;
    h ^= h >> 29;
  };
  for (std::span<const uint64_t> words : {kernel, user}) {
    size_t i = 0;
    for (; next != 0 && i < words.size(); ++i, next = (next + 1) & 3) mix(lane[next], words[i]);
    for (; i + 4 <= words.size(); i += 4) {
      mix(lane[0], words[i]);
      mix(lane[1], words[i + 1]);
      mix(lane[2], words[i + 2]);
      mix(lane[3], words[i + 3]);
    }
    for (; i < words.size(); ++i, next = (next + 1) & 3) mix(lane[next], words[i]);
  }
  uint64_t h = lane[0];
  for (int k = 1; k < 4; ++k) mix(h, lane[k]);
  // splitmix64's finalizer: every bit of the result depends on every bit of the lanes.
  h ^= h >> 30;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 27;
  h *= 0x94D049BB133111EBULL;
  return h ^ (h >> 31);
}
}  // namespace

namespace {
// What a stack is found by: its frames and what its user leaf is (the same addresses with another leaf
// are another stack).
uint64_t stack_hash(std::span<const uint64_t> kernel, std::span<const uint64_t> user, UserLeaf user_leaf) {
  return hash_frames(kernel, user) ^ static_cast<uint64_t>(user_leaf);
}

constexpr size_t kFirstBlockWords = 512;
constexpr size_t kMaxBlockWords = size_t{1} << 20;  // 8 MiB
}  // namespace

uint32_t RawStackTable::append(RawStack s, std::span<const uint64_t> kernel, std::span<const uint64_t> user,
                               uint64_t hash) {
  const size_t n = kernel.size() + user.size();
  while (filling_ < blocks_.size() && blocks_[filling_].capacity() - blocks_[filling_].size() < n) ++filling_;
  if (filling_ == blocks_.size()) {
    const size_t grown =
        blocks_.empty() ? kFirstBlockWords : std::min(2 * blocks_.back().capacity(), kMaxBlockWords);
    blocks_.emplace_back().reserve(std::max(grown, n));
  }
  std::vector<uint64_t>& block = blocks_[filling_];
  s.block = static_cast<uint32_t>(filling_);
  s.offset = static_cast<uint32_t>(block.size());
  block.insert(block.end(), kernel.begin(), kernel.end());
  block.insert(block.end(), user.begin(), user.end());
  const auto index = static_cast<uint32_t>(stacks_.size());
  stacks_.push_back(s);
  by_hash_.insert(hash, index);
  return index;
}

uint32_t RawStackTable::intern(std::span<const uint64_t> kernel, std::span<const uint64_t> user,
                               UserLeaf user_leaf) {
  const size_t kMaxDepth = UINT16_MAX;
  if (kernel.size() > kMaxDepth) kernel = kernel.first(kMaxDepth);
  if (user.size() > kMaxDepth) user = user.first(kMaxDepth);
  const uint64_t h = stack_hash(kernel, user, user_leaf);
  const uint32_t found = by_hash_.find(h, [&](uint32_t index) {
    const RawStack& s = stacks_[index];
    if (s.kernel_depth != kernel.size() || s.user_depth != user.size() || s.user_leaf != user_leaf)
      return false;
    const uint64_t* frames = frames_of(s);
    return std::equal(kernel.begin(), kernel.end(), frames) &&
           std::equal(user.begin(), user.end(), frames + s.kernel_depth);
  });
  if (found != HashedIndexSet::kNone) return found;
  RawStack s;
  s.kernel_depth = static_cast<uint16_t>(kernel.size());
  s.user_depth = static_cast<uint16_t>(user.size());
  s.user_leaf = user_leaf;
  return append(s, kernel, user, h);
}

std::span<const uint64_t> RawStackTable::kernel_frames(uint32_t index) const {
  const RawStack& s = stacks_[index];
  return {frames_of(s), s.kernel_depth};
}

std::span<const uint64_t> RawStackTable::user_frames(uint32_t index) const {
  const RawStack& s = stacks_[index];
  return {frames_of(s) + s.kernel_depth, s.user_depth};
}

std::vector<uint64_t> RawStackTable::addresses() const {
  std::vector<uint64_t> all;
  for (const RawStack& s : stacks_)
    all.insert(all.end(), frames_of(s), frames_of(s) + s.kernel_depth + s.user_depth);
  return all;
}

size_t RawStackTable::address_bytes() const {
  size_t words = 0;
  for (const std::vector<uint64_t>& block : blocks_) words += block.capacity();
  return words * sizeof(uint64_t);
}

size_t RawStackTable::memory_bytes() const {
  return address_bytes() + blocks_.capacity() * sizeof(std::vector<uint64_t>) +
         stacks_.capacity() * sizeof(RawStack) + by_hash_.bytes();
}

size_t RawStackTable::used_bytes() const {
  size_t words = 0;
  for (const std::vector<uint64_t>& block : blocks_) words += block.size();
  return words * sizeof(uint64_t) + stacks_.size() * sizeof(RawStack) + by_hash_.used_bytes();
}

std::vector<uint32_t> RawStackTable::retain(const std::vector<bool>& keep) {
  std::vector<uint32_t> renumbered(stacks_.size(), kNoIndex);
  // The kept stacks and their addresses, copied out of the blocks they go back into.
  std::vector<std::pair<uint32_t, RawStack>> kept;
  std::vector<uint64_t> words;
  for (uint32_t i = 0; i < stacks_.size(); ++i) {
    if (i >= keep.size() || !keep[i]) continue;
    const RawStack& s = stacks_[i];
    kept.emplace_back(i, s);
    words.insert(words.end(), frames_of(s), frames_of(s) + s.kernel_depth + s.user_depth);
  }
  stacks_.clear();
  for (std::vector<uint64_t>& block : blocks_) block.clear();
  filling_ = 0;
  by_hash_.reset();
  const uint64_t* at = words.data();
  for (const auto& [old_index, s] : kept) {
    const std::span<const uint64_t> kernel(at, s.kernel_depth);
    const std::span<const uint64_t> user(at + s.kernel_depth, s.user_depth);
    at += s.kernel_depth + s.user_depth;
    renumbered[old_index] = append(s, kernel, user, stack_hash(kernel, user, s.user_leaf));
  }
  return renumbered;
}

uint32_t RawProfile::intern_module(const std::string& path, const std::string& build_id, bool is_kernel) {
  std::string key = path;
  key.push_back('\0');
  key += build_id;
  auto [it, inserted] = module_index_.try_emplace(std::move(key), static_cast<uint32_t>(modules.size()));
  if (inserted) {
    RawModule& m = modules.emplace_back();
    m.path = path;
    m.build_id = build_id;
    m.is_kernel = is_kernel;
  }
  return it->second;
}

RawProcess& RawProfile::process(int32_t pid) {
  auto [it, inserted] = process_index_.try_emplace(pid, processes.size());
  if (inserted) {
    processes.emplace_back();
    processes.back().pid = pid;
  }
  return processes[it->second];
}

const RawProcess* RawProfile::find_process(int32_t pid) const {
  auto it = process_index_.find(pid);
  return it == process_index_.end() ? nullptr : &processes[it->second];
}

namespace {
uint64_t thread_key(int32_t pid, int32_t tid) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(pid)) << 32) | static_cast<uint32_t>(tid);
}
}  // namespace

RawThread& RawProfile::thread(int32_t pid, int32_t tid) {
  auto [it, inserted] = thread_index_.try_emplace(thread_key(pid, tid), threads.size());
  if (inserted) {
    threads.emplace_back();
    threads.back().pid = pid;
    threads.back().tid = tid;
  }
  return threads[it->second];
}

const RawThread* RawProfile::find_thread(int32_t pid, int32_t tid) const {
  auto it = thread_index_.find(thread_key(pid, tid));
  return it == thread_index_.end() ? nullptr : &threads[it->second];
}

RawProfile::Forgotten RawProfile::forget_exited(uint64_t exited_before_ns) {
  Forgotten out;
  std::unordered_set<int32_t> sampled_pids;
  std::unordered_set<uint64_t> sampled_threads;
  for (const RawSample& s : samples) {
    sampled_pids.insert(s.pid);
    sampled_threads.insert(thread_key(s.pid, s.tid));
  }
  const auto over = [&](uint64_t end_ns) { return end_ns != 0 && end_ns < exited_before_ns; };
  std::unordered_set<int32_t> dropped;
  size_t kept = 0;
  for (RawProcess& p : processes) {
    if (over(p.end_ns) && !sampled_pids.contains(p.pid)) {
      dropped.insert(p.pid);
      out.pids.push_back(p.pid);
      continue;
    }
    if (&processes[kept] != &p) processes[kept] = std::move(p);
    ++kept;
  }
  processes.erase(processes.begin() + static_cast<ptrdiff_t>(kept), processes.end());
  out.threads.assign(threads.size(), kNoIndex);
  kept = 0;
  for (size_t i = 0; i < threads.size(); ++i) {
    RawThread& t = threads[i];
    if ((over(t.end_ns) || dropped.contains(t.pid)) && !sampled_threads.contains(thread_key(t.pid, t.tid))) {
      out.tids.push_back(t.tid);
      continue;
    }
    if (kept != i) threads[kept] = std::move(t);
    out.threads[i] = static_cast<uint32_t>(kept++);
  }
  threads.erase(threads.begin() + static_cast<ptrdiff_t>(kept), threads.end());
  process_index_.clear();
  for (size_t i = 0; i < processes.size(); ++i) process_index_.emplace(processes[i].pid, i);
  thread_index_.clear();
  for (size_t i = 0; i < threads.size(); ++i)
    thread_index_.emplace(thread_key(threads[i].pid, threads[i].tid), i);
  return out;
}

size_t RawProfile::release_unmapped_module_files() {
  std::vector<bool> mapped(modules.size(), false);
  for (const RawProcess& p : processes) {
    for (const RawMapping& m : p.mappings) {
      if (m.module < mapped.size()) mapped[m.module] = true;
    }
  }
  size_t released = 0;
  for (size_t i = 0; i < modules.size(); ++i) {
    if (mapped[i] || !modules[i].file) continue;
    modules[i].file.reset();
    ++released;
  }
  return released;
}

namespace {
uint64_t sum_key_hash(const RawSampleSum& s) {
  uint64_t h = thread_key(s.pid, s.tid) * 0x9E3779B97F4A7C15ULL;
  h ^= (static_cast<uint64_t>(s.stack) << 32 | static_cast<uint64_t>(s.epoch) << 4 |
        static_cast<uint64_t>(s.kind) << 2 | static_cast<uint64_t>(s.stack_end)) *
       0xC2B2AE3D27D4EB4FULL;
  return h ^ (h >> 29);
}

bool same_sum_key(const RawSampleSum& a, const RawSampleSum& b) {
  return a.pid == b.pid && a.tid == b.tid && a.stack == b.stack && a.kind == b.kind &&
         a.stack_end == b.stack_end && a.epoch == b.epoch;
}
}  // namespace

std::vector<uint32_t> RawProfile::forget_unused_stacks(std::span<const uint32_t> also) {
  std::vector<bool> used(stacks.size(), false);
  const auto mark = [&](uint32_t stack) {
    if (stack < used.size()) used[stack] = true;
  };
  for (const RawSample& s : samples) mark(s.stack);
  for (const RawSampleSum& s : released) mark(s.stack);
  for (const RawAllocation& a : allocations) mark(a.stack);
  for (const uint32_t stack : also) mark(stack);
  std::vector<uint32_t> renumbered = stacks.retain(used);
  const auto renumber = [&](uint32_t& stack) {
    if (stack < renumbered.size()) stack = renumbered[stack];
  };
  for (RawSample& s : samples) renumber(s.stack);
  for (RawAllocation& a : allocations) renumber(a.stack);
  if (!released.empty()) {
    released_index_.clear();
    for (uint32_t i = 0; i < released.size(); ++i) {
      renumber(released[i].stack);
      released_index_.insert(sum_key_hash(released[i]), i);
    }
  }
  return renumbered;
}

std::vector<uint32_t> RawProfile::forget_released_stacks(std::span<const uint32_t> also) {
  // The sums without their stacks, merged by their other key fields (in the order first released).
  std::vector<RawSampleSum> merged;
  HashedIndexSet index;
  for (RawSampleSum sum : released) {
    sum.stack = kNoIndex;
    const uint64_t hash = sum_key_hash(sum);
    const uint32_t found = index.find(hash, [&](uint32_t i) { return same_sum_key(merged[i], sum); });
    if (found == HashedIndexSet::kNone) {
      index.insert(hash, static_cast<uint32_t>(merged.size()));
      merged.push_back(sum);
      continue;
    }
    RawSampleSum& into = merged[found];
    into.samples += sum.samples;
    into.cpu_delta_ns += sum.cpu_delta_ns;
    into.off_cpu_ns += sum.off_cpu_ns;
    into.first_ns = std::min(into.first_ns, sum.first_ns);
    into.last_ns = std::max(into.last_ns, sum.last_ns);
    into.not_taken.add(sum.not_taken);
  }
  if (!released.empty()) released_stacks_forgotten = true;
  released = std::move(merged);
  released_index_ = std::move(index);
  kernel_addresses_let_go = kernel_addresses();
  std::vector<uint32_t> renumbered = forget_unused_stacks(also);
  ++stack_generation;
  return renumbered;
}

std::vector<uint64_t> RawProfile::kernel_addresses() const {
  std::vector<uint64_t> held;
  for (uint32_t i = 0; i < stacks.size(); ++i) {
    const auto kernel = stacks.kernel_frames(i);
    held.insert(held.end(), kernel.begin(), kernel.end());
  }
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  // Those let go are sorted and unique already: merged, not sorted again with each generation.
  std::vector<uint64_t> addresses;
  addresses.reserve(kernel_addresses_let_go.size() + held.size());
  std::set_union(kernel_addresses_let_go.begin(), kernel_addresses_let_go.end(), held.begin(), held.end(),
                 std::back_inserter(addresses));
  return addresses;
}

size_t RawProfile::stack_memory_bytes() const {
  return stacks.used_bytes() + released.size() * sizeof(RawSampleSum) + released_index_.used_bytes();
}

// How many of the distinct mapping times of the sample's process precede it (the epochs the symbolizer
// tells apart). `mapping_times`: per process seen so far, its distinct mapping times, sorted.
uint32_t RawProfile::epoch_of(const RawSample& s,
                              std::unordered_map<int32_t, std::vector<uint64_t>>& mapping_times) const {
  auto [times, added] = mapping_times.try_emplace(s.pid);
  if (added) {
    if (const RawProcess* process = find_process(s.pid); process != nullptr) {
      for (const RawMapping& m : process->mappings)
        if (m.time_ns != 0) times->second.push_back(m.time_ns);
    }
    std::sort(times->second.begin(), times->second.end());
    times->second.erase(std::unique(times->second.begin(), times->second.end()), times->second.end());
  }
  return static_cast<uint32_t>(std::upper_bound(times->second.begin(), times->second.end(), s.time_ns) -
                               times->second.begin());
}

void RawProfile::release_samples(ReleasedSums sums) {
  const uint64_t interval_ns = sampling_interval_ns(info);
  const bool by_stack = sums == ReleasedSums::kByStack;
  if (!by_stack && !samples.empty()) released_stacks_forgotten = true;
  std::unordered_map<int32_t, std::vector<uint64_t>> mapping_times;
  for (const RawSample& s : samples) {
    RawSampleSum key;
    key.pid = s.pid;
    key.tid = s.tid;
    key.kind = s.kind;
    key.stack_end = s.stack_end;
    if (by_stack) {
      key.stack = s.stack;
      key.epoch = epoch_of(s, mapping_times);
    }
    const uint64_t hash = sum_key_hash(key);
    uint32_t index = released_index_.find(hash, [&](uint32_t i) { return same_sum_key(released[i], key); });
    if (index == HashedIndexSet::kNone) {
      index = static_cast<uint32_t>(released.size());
      released_index_.insert(hash, index);
      key.first_ns = key.last_ns = s.time_ns;
      released.push_back(key);
    }
    RawSampleSum& sum = released[index];
    if (s.kind == SampleKind::kOnCpu) sum.not_taken.add(s.cpu_delta_ns, 1, interval_ns);
    ++sum.samples;
    sum.cpu_delta_ns += s.cpu_delta_ns;
    sum.off_cpu_ns += s.off_cpu_ns;
    sum.first_ns = std::min(sum.first_ns, s.time_ns);
    sum.last_ns = std::max(sum.last_ns, s.time_ns);
  }
  sample_offset += samples.size();
  samples.clear();
}

void RawProfile::restore_samples(std::vector<RawSample> released_samples) {
  released_samples.insert(released_samples.end(), samples.begin(), samples.end());
  samples = std::move(released_samples);
  sample_offset = 0;
  released.clear();
  released.shrink_to_fit();
  released_index_.clear();
}

}  // namespace hpd

namespace hpd {

uint64_t LatencyHistogram::bucket_low_ticks(uint32_t bucket) {
  // 16 sub-buckets per power of two above 16, one bucket per value below (preload_abi.h).
  constexpr uint32_t kSubBits = 4, kSub = 1u << kSubBits;
  if (bucket < kSub) return bucket;
  const uint32_t e = bucket / kSub + kSubBits - 1;
  if (e >= 63) return UINT64_MAX;
  return (uint64_t{1} << e) + (uint64_t{bucket % kSub} << (e - kSubBits));
}

uint32_t LatencyHistogram::bucket_of_ticks(uint64_t ticks) {
  constexpr uint32_t kSubBits = 4, kSub = 1u << kSubBits, kMaxExp = 47;
  if (ticks < kSub) return static_cast<uint32_t>(ticks);
  const uint32_t e = 63u - static_cast<uint32_t>(__builtin_clzll(ticks));
  if (e > kMaxExp) return (kMaxExp - kSubBits + 2) * kSub - 1;
  return (e - kSubBits + 1) * kSub + static_cast<uint32_t>((ticks >> (e - kSubBits)) & (kSub - 1));
}

double alloc_sample_scale(uint64_t size, uint64_t mean_bytes) {
  if (size == 0 || mean_bytes == 0) return 0;
  // -expm1(-x) = 1 - exp(-x), exact also for the small x of small blocks.
  const double p = -std::expm1(-double(size) / double(mean_bytes));
  return p > 0 ? 1.0 / p : 0;
}

uint64_t LatencyHistogram::count() const {
  uint64_t n = 0;
  for (const auto& [bucket, calls] : buckets) n += calls;
  return n;
}

uint64_t LatencyHistogram::quantile_ns(double q, uint64_t max_ns) const {
  const uint64_t n = count();
  if (n == 0 || ns_per_tick <= 0) return 0;
  // The rank of the quantile among the sorted calls (1-based), then where it falls in its bucket.
  const double rank = std::max(1.0, q * static_cast<double>(n));
  uint64_t below = 0;
  for (const auto& [bucket, calls] : buckets) {
    if (static_cast<double>(below + calls) >= rank) {
      const double low = static_cast<double>(bucket_low_ticks(bucket));
      const double high = static_cast<double>(bucket_low_ticks(bucket + 1));
      const double within = (rank - static_cast<double>(below)) / static_cast<double>(calls);
      const double ns = (low + (high - low) * within) * ns_per_tick;
      return std::min(max_ns, static_cast<uint64_t>(ns + 0.5));
    }
    below += calls;
  }
  return max_ns;
}

void LatencyHistogram::merge(const LatencyHistogram& other) {
  if (other.buckets.empty()) return;
  if (ns_per_tick <= 0) ns_per_tick = other.ns_per_tick;
  std::vector<std::pair<uint32_t, uint64_t>> out;
  out.reserve(buckets.size() + other.buckets.size());
  size_t i = 0, j = 0;
  while (i < buckets.size() || j < other.buckets.size()) {
    if (j == other.buckets.size() || (i < buckets.size() && buckets[i].first < other.buckets[j].first)) {
      out.push_back(buckets[i++]);
    } else if (i == buckets.size() || other.buckets[j].first < buckets[i].first) {
      out.push_back(other.buckets[j++]);
    } else {
      out.emplace_back(buckets[i].first, buckets[i].second + other.buckets[j].second);
      ++i, ++j;
    }
  }
  buckets = std::move(out);
}

std::optional<double> host_steal_share(const RecordingInfo& info) {
  if (!info.host_steal_known || info.end_mono_ns <= info.start_mono_ns || info.logical_cpus == 0)
    return std::nullopt;
  const double cpu_ns = static_cast<double>(info.end_mono_ns - info.start_mono_ns) * info.logical_cpus;
  return std::min(1.0, static_cast<double>(info.host_steal_ns) / cpu_ns);
}

std::string host_steal_note(const RecordingInfo& info) {
  const std::optional<double> share = host_steal_share(info);
  if (!share || *share < 0.005) return "";
  const double length_s = static_cast<double>(info.end_mono_ns - info.start_mono_ns) / 1e9;
  char length[32];
  if (length_s >= 1)
    std::snprintf(length, sizeof length, "%.1f s", length_s);
  else
    std::snprintf(length, sizeof length, "%.0f ms", length_s * 1e3);
  char text[320];
  std::snprintf(text, sizeof text,
                "the hypervisor took %.1f%% of this machine's CPU time during the recording (%.0f ms of the "
                "%u CPUs' %s); the sampling timer counts it as the running threads' time and their CPU "
                "clocks do not, so samples may exceed the threads' CPU time by up to that much",
                100.0 * *share, static_cast<double>(info.host_steal_ns) / 1e6, info.logical_cpus, length);
  return text;
}

void SamplesNotTaken::add(uint64_t cpu_ns, uint64_t n, uint64_t interval_ns) {
  if (interval_ns == 0 || n == 0) return;
  // Rounded to the nearest interval: a timer that fires a little late gives one sample a little more
  // than an interval and the next one a little less, neither a sample not taken.
  const uint64_t intervals = (cpu_ns + interval_ns / 2) / interval_ns;
  if (intervals <= n) return;
  samples += intervals - n;
  ns += cpu_ns > n * interval_ns ? cpu_ns - n * interval_ns : 0;
}

std::string samples_not_taken_note(const SamplesNotTaken& missed, uint64_t taken, const RecordingInfo& info) {
  if (!samples_not_taken_counted(info)) return "";
  if (missed.samples < 5 || missed.samples * 100 < taken) return "";
  const double share =
      100.0 * static_cast<double>(missed.samples) / static_cast<double>(missed.samples + taken);
  const bool perf = info.backend == "perf";
  const bool user_only = perf && !info.kernel_frames;
  // "At least": the CPU time after a thread's last sample (perf: its last on each CPU, the counter
  // being per thread and CPU) is its tail, a sample of its own, where it is known; a thread still
  // running at the end that was created during the recording has none (perf: its counts cannot be read).
  char text[720];
  std::snprintf(text, sizeof text,
                "at least %llu samples were not taken (%.1f%% of those the threads' CPU time called for, "
                "%.0f ms): %s; that time is in the CPU ms of each thread's next sample%s, not in the sample "
                "counts nor the shares made of them",
                static_cast<unsigned long long>(missed.samples), share, static_cast<double>(missed.ns) / 1e6,
                user_only ? "this recording sampled user mode only (the kernel's perf_event_paranoid refused "
                            "this user kernel samples), so no sample was taken while a thread ran in the "
                            "kernel; record as root or through hpd to sample it"
                          : "the sampling timer fired late or their records were lost",
                perf ? " on the same CPU (or of its tail, a sample without a stack at its end)" : "");
  return text;
}

bool samples_not_taken_counted(const RecordingInfo& info) {
  return target_scope(info.target) == TargetScope::kNamed && sampling_interval_ns(info) != 0;
}

TargetScope target_scope(std::string_view target) {
  if (target.starts_with(kAllProcessesTarget)) return TargetScope::kAllProcesses;
  if (target.starts_with(kCgroupTargetPrefix)) return TargetScope::kCgroup;
  if (target.starts_with(kContinuousTargetPrefix)) return TargetScope::kContinuous;
  return TargetScope::kNamed;
}

uint64_t sampling_interval_ns(const RecordingInfo& info) {
  if (info.interval_ns != 0) return info.interval_ns;
  return info.frequency_hz != 0 ? 1'000'000'000ull / info.frequency_hz : 0;
}

uint64_t interval_ns_or_assumed(const RecordingInfo& info) {
  const uint64_t known = sampling_interval_ns(info);
  return known != 0 ? known : kAssumedIntervalNs;
}

std::string samples_not_taken_note(const RawProfile& profile) {
  const RecordingInfo& info = profile.info;
  if (!samples_not_taken_counted(info)) return "";  // not a sample read for a note never said
  const uint64_t interval_ns = sampling_interval_ns(info);
  SamplesNotTaken missed;
  uint64_t taken = 0;
  for (const RawSample& s : profile.samples) {
    if (s.kind != SampleKind::kOnCpu) continue;
    missed.add(s.cpu_delta_ns, 1, interval_ns);
    ++taken;
  }
  for (const RawSampleSum& s : profile.released) {
    if (s.kind != SampleKind::kOnCpu) continue;
    missed.add(s.not_taken);  // counted sample by sample when they were released
    taken += s.samples;
  }
  return samples_not_taken_note(missed, taken, info);
}

}  // namespace hpd
