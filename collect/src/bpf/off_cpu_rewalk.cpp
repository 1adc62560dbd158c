// OffCpuRewalk: off-CPU stacks walked again once their process's tables are published (see the header).
#include "bpf/off_cpu_rewalk.h"

#include <bpf/bpf.h>
#include <sys/uio.h>

#include <utility>

#include "bpf/bpf_event_decoder.h"
#include "bpf/cfi_maps.h"
#include "profile_event.h"

namespace hpd {
namespace {

// Stack read from the blocked thread's sp up: first a part that holds most threads' frames, then, when
// the walk ran past it, as deep as the programs' walks go (256 frames); a frame beyond that ends the
// walk as a read fault, as a slot the programs could not read does.
constexpr size_t kFirstStackBytes = 32 * 1024;
constexpr size_t kMaxStackBytes = 256 * 1024;
constexpr uint64_t kScanIntervalNs = 50'000'000;

}  // namespace

bool OffCpuRewalk::read_stack(const hpd_pending_walk& w, int32_t tid, size_t bytes) {
  stack_.resize(bytes);
  const iovec local{stack_.data(), bytes};
  const iovec remote{reinterpret_cast<void*>(w.sp), bytes};
  // Partial up to the first page that cannot be read: the end of the stack mapping.
  const ssize_t got = ::process_vm_readv(w.pid, &local, 1, &remote, 1, 0);
  if (got <= 0) return false;
  stack_.resize(static_cast<size_t>(got));
  // The thread has not run since its switch-out (its entry goes at its switch-in, before it runs), so
  // the bytes just read are its stack as it blocked.
  hpd_pending_walk again{};
  if (bpf_map_lookup_elem(fd_, &tid, &again) != 0 || again.time_ns != w.time_ns) return false;
  ++stacks_read_;
  return true;
}

void OffCpuRewalk::poll(CfiMaps& maps, BpfEventDecoder& decoder, uint64_t mappings_read_at, uint64_t now_ns) {
  const uint64_t publications = maps.publications();
  if (publications == last_publications_ && now_ns - last_scan_ns_ < kScanIntervalNs) return;
  last_scan_ns_ = now_ns;
  last_publications_ = publications;

  std::vector<std::pair<int32_t, hpd_pending_walk>> waiting;
  int32_t key = 0, next = 0;
  bool first = true;
  while (bpf_map_get_next_key(fd_, first ? nullptr : &key, &next) == 0) {
    first = false;
    key = next;
    hpd_pending_walk w{};
    if (bpf_map_lookup_elem(fd_, &key, &w) == 0) waiting.emplace_back(key, w);
  }
  std::unordered_map<int32_t, CfiMaps::WalkTried> still_tried;
  for (const auto& [tid, w] : waiting) {
    if (lazy_) maps.sampled(w.pid);
    // Its mappings may not all be read yet: tried again at the next poll, whose read comes after it.
    if (w.time_ns > mappings_read_at) {
      last_publications_ = ~0ull;
      continue;
    }
    const CfiMaps::Published published = maps.published(w.pid);
    if (published.at == 0 || published.tables_pending) continue;  // nothing better to walk with yet
    const CfiMaps::WalkTried tried{w.time_ns, tid, published.at};
    if (const auto it = tried_.find(tid); it != tried_.end() && it->second == tried) {
      still_tried.emplace(tid, tried);  // its process was not published again since
      continue;
    }
    if (!read_stack(w, tid, kFirstStackBytes)) continue;
    CfiMaps::StackWalk walk = maps.walk_stack(w.pid, w.ip, w.sp, w.bp, stack_, w.di);
    if (walk.end == HPD_USER_END_READ_FAULT && stack_.size() == kFirstStackBytes) {
      if (!read_stack(w, tid, kMaxStackBytes)) continue;
      walk = maps.walk_stack(w.pid, w.ip, w.sp, w.bp, stack_, w.di);
    }
    if (walk.pending) {
      still_tried.emplace(tid, tried);
      continue;
    }
    decoder.replace_off_cpu_user_stack(tid, w.time_ns, std::move(walk.ips), walk.end, walk.fp_frames);
    bpf_map_delete_elem(fd_, &tid);
  }
  tried_ = std::move(still_tried);
}

}  // namespace hpd
