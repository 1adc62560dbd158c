// AllocProbes: uprobes on a running process's allocator (bpf/alloc.bpf.c, session mode), the ring of
// sampled allocations read by a thread of its own, and the records matched into the RawProfile.
#include "hpd/calls/alloc_probes.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "alloc.skel.h"
#include "alloc_event.h"
#include "hpd/base/proc_maps.h"
#include "hpd/base/unique_fd.h"
#include "hpd/calls/call_counter.h"
#include "uprobe_multi_link.h"

namespace hpd::calls {

static_assert(HPD_ALLOC_FN_MALLOC == uint32_t(AllocatorCall::kMalloc) &&
              HPD_ALLOC_FN_CALLOC == uint32_t(AllocatorCall::kCalloc) &&
              HPD_ALLOC_FN_REALLOC == uint32_t(AllocatorCall::kRealloc) &&
              HPD_ALLOC_FN_FREE == uint32_t(AllocatorCall::kFree) &&
              HPD_ALLOC_FN_POSIX_MEMALIGN == uint32_t(AllocatorCall::kPosixMemalign) &&
              HPD_ALLOC_FN_ALIGNED_ALLOC == uint32_t(AllocatorCall::kAlignedAlloc) &&
              HPD_ALLOC_FN_COUNT == 9);

namespace {

std::string path_in(int32_t pid, const std::string& path) {
  return "/proc/" + std::to_string(pid) + "/root" + path;
}

struct SkeletonDeleter {
  void operator()(alloc_bpf* skel) const { alloc_bpf__destroy(skel); }
};
struct RingDeleter {
  void operator()(ring_buffer* rb) const { ring_buffer__free(rb); }
};

constexpr uint64_t kLowestCode = 65536;

struct Sample {
  RawAllocation a;
  std::vector<uint64_t> ips;
};

}  // namespace

std::vector<AllocatorModule> find_allocators(int32_t pid) {
  std::vector<AllocatorModule> out;
  std::set<std::string> seen;
  for (const MapsEntry& m : read_proc_maps(pid)) {
    if (!m.executable || !m.is_file() || !seen.insert(m.path).second) continue;
    AllocatorModule module{m.path, module_allocators(path_in(pid, m.path))};
    const bool has = !module.allocators.others.empty() ||
                     std::any_of(module.allocators.standard.begin(), module.allocators.standard.end(),
                                 [](const auto& f) { return f.name == "malloc" || f.name == "free"; });
    if (has) out.push_back(std::move(module));
  }
  return out;
}

struct AllocProbes::Impl {
  int32_t pid = 0;
  uint64_t mean = 0;
  std::string description;
  std::unique_ptr<alloc_bpf, SkeletonDeleter> skel;
  std::mutex links_mutex;  // guards links: the reader thread takes the probes out at an exec
  std::vector<UniqueFd> links;
  bpf_link* exec_link = nullptr;  // hpd_alloc_exec, for a restricted client
  bool removed_at_exec = false;   // the probes were taken out when the target left at an exec
  std::unique_ptr<ring_buffer, RingDeleter> ring;
  std::thread reader;
  std::atomic<bool> stop{false};
  std::mutex mutex;  // guards the records (the reader thread appends, finish() reads)
  std::vector<Sample> samples;
  struct Free {
    int32_t pid, tid;
    uint64_t address, time_ns;
    size_t after;    // samples.size() when it came: records are in ring order
    uint32_t kind;   // HPD_ALLOC_BPF_FREE or HPD_ALLOC_BPF_REALLOC_FAILED
    uint32_t flags;  // HPD_ALLOC_FREE_BY_REALLOC
  };
  std::vector<Free> frees;
  uint64_t short_records = 0;
  std::vector<std::string> said;  // the summary's words for the allocators under other names

  static int on_record(void* ctx, void* data, size_t size) {
    auto* self = static_cast<Impl*>(ctx);
    uint32_t kind = 0;
    if (size < sizeof kind) return 0;
    std::memcpy(&kind, data, sizeof kind);
    std::lock_guard<std::mutex> lock(self->mutex);
    if ((kind == HPD_ALLOC_BPF_FREE || kind == HPD_ALLOC_BPF_REALLOC_FAILED) &&
        size >= sizeof(hpd_alloc_bpf_free)) {
      hpd_alloc_bpf_free f;
      std::memcpy(&f, data, sizeof f);
      self->frees.push_back(Free{f.pid, f.tid, f.address, f.time_ns, self->samples.size(), kind, f.flags});
    } else if ((kind == HPD_ALLOC_BPF_ALLOC || kind == HPD_ALLOC_BPF_ALLOC_UNTRACKED) &&
               size >= sizeof(hpd_alloc_bpf_sample)) {
      const auto* s = static_cast<const hpd_alloc_bpf_sample*>(data);
      Sample out;
      out.a.pid = s->pid;
      out.a.tid = s->tid;
      out.a.address = s->address;
      out.a.size = s->size;
      out.a.time_ns = s->time_ns;
      out.a.tracked = kind == HPD_ALLOC_BPF_ALLOC;
      // The frame-pointer walk past the allocator's caller, in code without frame pointers, reads
      // whatever the frame register holds (often 0 or a small count): the stack ends at the first
      // address below mmap_min_addr's default, where no code is mapped.
      const uint32_t frames = std::min<uint32_t>(s->frames, HPD_ALLOC_BPF_MAX_FRAMES);
      for (uint32_t i = 0; i < frames && s->ips[i] >= kLowestCode; ++i) out.ips.push_back(s->ips[i]);
      self->samples.push_back(std::move(out));
    } else {
      ++self->short_records;
    }
    return 0;
  }

  // Closing a link takes its breakpoints out of the target.
  void close_links() {
    std::lock_guard<std::mutex> lock(links_mutex);
    links.clear();
    if (exec_link != nullptr) bpf_link__destroy(exec_link);
    exec_link = nullptr;
  }

  // The reader's check after each poll: a target that left at an exec (hpd_alloc_exec) has its
  // probes taken out at once rather than at the end of the recording.
  void remove_probes_if_left() {
    if (removed_at_exec || __atomic_load_n(&skel->bss->left_at_exec, __ATOMIC_ACQUIRE) == 0) return;
    close_links();
    removed_at_exec = true;
  }

  void detach() {
    close_links();
    if (reader.joinable()) {
      stop = true;
      reader.join();
    }
    if (ring) ring_buffer__consume(ring.get());
  }

  uint64_t counter(uint32_t which) const {
    const int ncpu = libbpf_num_possible_cpus();
    if (ncpu <= 0) return 0;
    std::vector<uint64_t> values(static_cast<size_t>(ncpu));
    if (bpf_map_lookup_elem(bpf_map__fd(skel->maps.alloc_counters), &which, values.data()) != 0) return 0;
    uint64_t sum = 0;
    for (uint64_t v : values) sum += v;
    return sum;
  }
};

AllocProbes::AllocProbes(int32_t pid, uint64_t mean_bytes, AllocProbeClient client)
    : impl_(std::make_unique<Impl>()) {
  impl_->pid = pid;
  impl_->mean = mean_bytes;
  const std::vector<AllocatorModule> modules = find_allocators(pid);
  if (modules.empty()) {
    std::string names;
    for (size_t f = 0; f < kAllocatorFunctionCount; ++f)
      names += std::string(f == 0                             ? ""
                           : f + 1 == kAllocatorFunctionCount ? " or "
                                                              : ", ") +
               kAllocatorFunctions[f];
    throw CallCountError(
        "pid " + std::to_string(pid) + " maps no allocator hpd can probe: none of its modules defines " +
        names +
        " as a dynamic symbol, nor mimalloc's, tcmalloc's or a prefixed jemalloc's entry points (mi_malloc, "
        "tc_malloc, je_malloc, _rjem_malloc) in a symbol table (a static program, or an allocator hpd "
        "does not know)");
  }
  if (mean_bytes == 0 || mean_bytes > (uint64_t{1} << 40))
    throw CallCountError("the allocation sampling mean must be between 1 byte and 1 TiB");
  impl_->skel.reset(alloc_bpf__open());
  if (!impl_->skel)
    throw CallCountError(std::string("cannot open hpd's allocation eBPF object: ") + std::strerror(errno));
  impl_->skel->rodata->target_tgid = pid;
  impl_->skel->rodata->mean_bytes = mean_bytes;
  impl_->skel->rodata->client_uid = client.uid;
  impl_->skel->rodata->client_gid = client.gid;
  bpf_program__set_autoload(impl_->skel->progs.hpd_alloc_exec, client.restrict_to_client);
  uprobe_multi::set_expected_attach_types(impl_->skel->obj);
  if (const int err = alloc_bpf__load(impl_->skel.get()); err != 0)
    throw CallCountError(std::string("the kernel refused hpd's allocation eBPF program: ") +
                         std::strerror(-err) +
                         " (it needs Linux 6.13 or later for uprobe sessions, CAP_BPF and CAP_PERFMON)");
  impl_->ring.reset(
      ring_buffer__new(bpf_map__fd(impl_->skel->maps.alloc_ring), &Impl::on_record, impl_.get(), nullptr));
  if (!impl_->ring)
    throw CallCountError(std::string("cannot read the allocation ring: ") + std::strerror(errno));
  if (client.restrict_to_client) {
    // Before the uprobes: an exec between the two would otherwise go unseen.
    impl_->exec_link = bpf_program__attach(impl_->skel->progs.hpd_alloc_exec);
    if (impl_->exec_link == nullptr)
      throw CallCountError(std::string("cannot watch pid ") + std::to_string(pid) +
                           "'s execs (sched_process_exec): " + std::strerror(errno));
  }
  impl_->reader = std::thread([impl = impl_.get()] {
    while (!impl->stop) {
      ring_buffer__poll(impl->ring.get(), 100);
      impl->remove_probes_if_left();
    }
  });
  std::string where;
  for (const AllocatorModule& module : modules) {
    std::vector<uint64_t> offsets, cookies;
    for (const AllocatorFunction& f : module.allocators.standard) {
      offsets.push_back(f.offset);
      cookies.push_back(f.cookie | (f.wraps ? HPD_ALLOC_FN_WRAPS : 0));
    }
    // An allocator under other names: its entry points take the C library's arguments (AllocatorCall).
    // Where the module defines the C library's names too (an allocator that replaces malloc), those
    // call its own entry points (libmimalloc's posix_memalign calls mi_malloc_aligned): probing both
    // would count a call twice, so only the C library's names are probed there, whose aliases
    // (libmimalloc's mi_malloc is its malloc) are seen by them.
    const bool replaces_malloc = !module.allocators.standard.empty();
    for (const OtherAllocator& other : module.allocators.others) {
      std::vector<AllocatorFunction> probed, unprobed;
      for (const AllocatorFunction& f : other.functions) {
        if (!f.alias_of.empty()) continue;
        (replaces_malloc && !other.beside_malloc ? unprobed : probed).push_back(f);
      }
      for (const AllocatorFunction& f : probed) {
        offsets.push_back(f.offset);
        cookies.push_back(f.cookie | (f.wraps ? HPD_ALLOC_FN_WRAPS : 0));
      }
      if (!probed.empty())
        impl_->said.push_back("allocations: the entry points of " + other.family + " in " + module.path +
                              " (" + function_names(probed) +
                              ") were probed too: its allocations are counted with malloc's");
      if (!unprobed.empty())
        impl_->said.push_back(
            "allocations not seen: the entry points of " + other.family + " in " + module.path + " (" +
            function_names(unprobed) +
            ") were not probed: the C library's functions it defines, which are, may call them, and a call "
            "would count twice; calls the program makes to them directly were not counted");
    }
    const std::string path = path_in(pid, module.path);
    const int fd = uprobe_multi::link(bpf_program__fd(impl_->skel->progs.hpd_alloc_call),
                                      uprobe_multi::kAttachUprobeSession, path, offsets, cookies, pid);
    if (fd < 0) {
      const int e = errno;
      impl_->detach();
      throw CallCountError("cannot probe the allocator of pid " + std::to_string(pid) + " in " + module.path +
                           ": " + std::strerror(e) + " (uprobe sessions need Linux 6.13 or later)");
    }
    {
      std::lock_guard<std::mutex> lock(impl_->links_mutex);
      impl_->links.emplace_back(fd);
    }
    where += (where.empty() ? "" : ", ") + module.path;
  }
  impl_->description = "uprobes on pid " + std::to_string(pid) + "'s allocator in " + where;
}

AllocProbes::~AllocProbes() {
  impl_->detach();
}

const std::string& AllocProbes::description() const {
  return impl_->description;
}

std::vector<std::string> AllocProbes::finish(RawProfile& profile) {
  Impl& s = *impl_;
  s.detach();
  std::vector<std::string> messages;
  std::lock_guard<std::mutex> lock(s.mutex);
  RawAllocStats& stats = profile.alloc;
  stats.mean_bytes = s.mean;
  stats.processes += 1;
  // Matched in ring order, as AllocLog::read matches the runtime's log.
  struct Key {
    int32_t pid;
    uint64_t address;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>()(k.address ^ (uint64_t(k.pid) << 48));
    }
  };
  // A target that executed a program with credentials the client may not trace (a set-user-ID one,
  // for a user's session through hpd) is not followed from that exec on: the probes follow the pid
  // into the new program, and nothing they saw there is recorded, as no CPU sample of it is.
  uint64_t cut_ns = 0;
  for (const RawProcess& process : profile.processes)
    if (process.pid == s.pid && process.unfollowed_ns != 0) cut_ns = process.unfollowed_ns;
  if (cut_ns != 0) {
    std::erase_if(s.samples, [&](const Sample& x) { return x.a.time_ns >= cut_ns; });
    std::erase_if(s.frees, [&](const Impl::Free& f) { return f.time_ns >= cut_ns; });
    for (Impl::Free& f : s.frees) f.after = std::min(f.after, s.samples.size());
  }
  std::unordered_map<Key, size_t, KeyHash> live;
  // realloc's free of a sampled block, said at its entry, by thread: taken back when the thread's
  // next record says realloc failed (the block was not freed).
  struct Pending {
    uint64_t address;
    size_t allocation;  // kNoAllocation: the free matched no sample
  };
  constexpr size_t kNoAllocation = ~size_t{0};
  std::unordered_map<int64_t, Pending> realloc_frees;
  const auto thread_key = [](int32_t pid, int32_t tid) { return (int64_t(pid) << 32) | uint32_t(tid); };
  size_t next_free = 0;
  const auto apply_frees_until = [&](size_t samples_seen) {
    for (; next_free < s.frees.size() && s.frees[next_free].after <= samples_seen; ++next_free) {
      const Impl::Free& f = s.frees[next_free];
      if (f.kind == HPD_ALLOC_BPF_REALLOC_FAILED) {
        auto pending = realloc_frees.find(thread_key(f.pid, f.tid));
        if (pending == realloc_frees.end() || pending->second.address != f.address) continue;
        if (pending->second.allocation == kNoAllocation) {
          --stats.frees_unmatched;
        } else {
          RawAllocation& a = profile.allocations[pending->second.allocation];
          a.freed = false;
          a.free_time_ns = 0;
          a.free_tid = 0;
          live[Key{f.pid, f.address}] = pending->second.allocation;
        }
        realloc_frees.erase(pending);
        continue;
      }
      auto it = live.find(Key{f.pid, f.address});
      const bool by_realloc = (f.flags & HPD_ALLOC_FREE_BY_REALLOC) != 0;
      if (it == live.end()) {
        ++stats.frees_unmatched;
        if (by_realloc) realloc_frees[thread_key(f.pid, f.tid)] = Pending{f.address, kNoAllocation};
        continue;
      }
      RawAllocation& a = profile.allocations[it->second];
      a.freed = true;
      a.free_time_ns = f.time_ns;
      a.free_tid = f.tid;
      if (by_realloc) realloc_frees[thread_key(f.pid, f.tid)] = Pending{f.address, it->second};
      live.erase(it);
    }
  };
  for (size_t i = 0; i < s.samples.size(); ++i) {
    apply_frees_until(i);
    RawAllocation a = s.samples[i].a;
    a.stack = s.samples[i].ips.empty() ? kNoIndex
                                       : profile.stacks.intern({}, s.samples[i].ips, UserLeaf::kAfterSyscall);
    if (a.tracked) {
      auto [it, inserted] = live.try_emplace(Key{a.pid, a.address}, profile.allocations.size());
      if (!inserted) {
        profile.allocations[it->second].freed = true;
        it->second = profile.allocations.size();
      }
    } else {
      ++stats.untracked;
    }
    profile.allocations.push_back(a);
  }
  apply_frees_until(s.samples.size());
  const uint64_t ring_full = s.counter(HPD_ALLOC_RING_FULL);
  stats.dropped += ring_full;
  if (cut_ns != 0) {
    // The counters of the probes are the new program's too: not given.
    messages.push_back(
        "allocations: pid " + std::to_string(s.pid) +
        " executed a program that runs with credentials other than yours; its allocations "
        "from then on were not recorded" +
        std::string(s.removed_at_exec ? " (the probes were taken out of it at that exec)" : ""));
    s.samples.clear();
    s.frees.clear();
    return messages;
  }
  for (const std::string& m : s.said) messages.push_back(m);
  const uint64_t calls = s.counter(HPD_ALLOC_CALLS);
  const uint64_t frees = s.counter(HPD_ALLOC_FREES);
  messages.push_back("allocations: " + std::to_string(calls) + " allocating calls and " +
                     std::to_string(frees) + " frees of pid " + std::to_string(s.pid) +
                     " went through the probes");
  messages.push_back("allocations: " + std::to_string(s.counter(HPD_ALLOC_FREE_NULL)) + " free(NULL), " +
                     std::to_string(s.counter(HPD_ALLOC_FREE_UNSAMPLED)) +
                     " frees of addresses not sampled while recording (allocated before the attach, or not "
                     "sampled); blocks allocated before the attach are not counted as live");
  if (ring_full != 0)
    messages.push_back("allocations: the ring was full; " + std::to_string(ring_full) +
                       " samples and frees were dropped (a larger allocation mean samples less)");
  if (const uint64_t untracked = s.counter(HPD_ALLOC_UNTRACKED); untracked != 0)
    messages.push_back("allocations: " + std::to_string(untracked) +
                       " sampled allocations could not be watched until their free (too many live samples); "
                       "they count as allocated, not as live");
  if (const uint64_t overflow = s.counter(HPD_ALLOC_OVERFLOW); overflow != 0)
    messages.push_back("allocations: " + std::to_string(overflow) +
                       " calloc calls asked for more than 2^62 bytes and were not counted");
  if (const uint64_t no_state = s.counter(HPD_ALLOC_NO_STATE); no_state != 0)
    messages.push_back("allocations: " + std::to_string(no_state) +
                       " calls were not looked at (no per-thread state could be made)");
  if (s.short_records != 0)
    messages.push_back("allocations: " + std::to_string(s.short_records) +
                       " records of the ring were not understood");
  s.samples.clear();
  s.frees.clear();
  return messages;
}

}  // namespace hpd::calls
