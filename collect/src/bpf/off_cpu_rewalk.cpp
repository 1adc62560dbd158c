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

// Stack read from the blocked thread's sp up: the programs' walks go as deep (256 frames); a frame
// beyond it ends the walk as a read fault, as a slot the programs could not read does.
constexpr size_t kStackBytes = 256 * 1024;
constexpr uint64_t kScanIntervalNs = 50'000'000;

}  // namespace

void OffCpuRewalk::poll(CfiMaps& maps, BpfEventDecoder& decoder, uint64_t now_ns) {
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
  std::unordered_map<int32_t, Tried> still_tried;
  for (const auto& [tid, w] : waiting) {
    if (lazy_) maps.sampled(w.pid);
    if (const auto it = tried_.find(tid);
        it != tried_.end() && it->second.time_ns == w.time_ns && it->second.publications == publications) {
      still_tried.emplace(tid, it->second);  // nothing published since it was tried
      continue;
    }
    stack_.resize(kStackBytes);
    const iovec local{stack_.data(), stack_.size()};
    const iovec remote{reinterpret_cast<void*>(w.sp), stack_.size()};
    // Partial up to the first page that cannot be read: the end of the stack mapping.
    const ssize_t got = ::process_vm_readv(w.pid, &local, 1, &remote, 1, 0);
    if (got <= 0) continue;
    // The thread has not run since its switch-out (its entry goes at its switch-in, before it runs),
    // so the bytes just read are its stack as it blocked.
    hpd_pending_walk again{};
    if (bpf_map_lookup_elem(fd_, &tid, &again) != 0 || again.time_ns != w.time_ns) continue;
    ++stacks_read_;
    CfiMaps::StackWalk walk =
        maps.walk_stack(w.pid, w.ip, w.sp, w.bp, std::span<const uint8_t>(stack_.data(), size_t(got)));
    if (walk.pending) {
      still_tried.emplace(tid, Tried{w.time_ns, publications});
      continue;
    }
    decoder.replace_off_cpu_user_stack(tid, w.time_ns, std::move(walk.ips), walk.end, walk.fp_frames);
    bpf_map_delete_elem(fd_, &tid);
  }
  tried_ = std::move(still_tried);
}

}  // namespace hpd
