// Huge pages for the main heap: malloc tuning plus MADV_HUGEPAGE on [heap] (see heap_pages.h).
#include "hpd/symbolizer/heap_pages.h"

#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "hpd/symbolizer/address_query.h"  // parse_proc_maps

namespace hpd {
namespace {

constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
// glibc refuses a larger M_MMAP_THRESHOLD (HEAP_MAX_SIZE / 2 on 64-bit).
constexpr int kMaxMmapThreshold = 32 << 20;

// The selected word of "always [madvise] never"; "" when the kernel has no THP.
std::string thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string text;
  if (!std::getline(f, text)) return {};
  const size_t open = text.find('['), close = text.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return {};
  return text.substr(open + 1, close - open - 1);
}

// The span of the [heap] mappings (one at first; advising part of it splits it in several).
bool heap_range(uintptr_t& start, uintptr_t& end) {
  std::ifstream in("/proc/self/maps");
  std::ostringstream text;
  text << in.rdbuf();
  start = end = 0;
  for (const ProcessMapping& m : parse_proc_maps(text.str())) {
    if (m.path != "[heap]") continue;
    if (end == 0 || m.start < start) start = m.start;
    end = std::max<uintptr_t>(end, m.end);
  }
  return end != 0;
}

}  // namespace

HeapPagesResult prefer_huge_pages_for_heap(size_t reserve_bytes) {
  HeapPagesResult r;
  const std::string mode = thp_mode();
  if (mode.empty() || mode == "never") {
    r.reason = mode.empty()
                   ? "the kernel has no transparent huge pages"
                   : "transparent huge pages are disabled (/sys/kernel/mm/transparent_hugepage/enabled)";
    return r;
  }
  const int pad = static_cast<int>(std::min<size_t>(reserve_bytes, INT_MAX / 2));
  // Large arrays from the heap too, so that they are covered; grow it in big steps; never trim it
  // back (giving pages back only to fault them in again is what this avoids).
  mallopt(M_MMAP_THRESHOLD, kMaxMmapThreshold);
  mallopt(M_TOP_PAD, pad);
  mallopt(M_TRIM_THRESHOLD, 2 * pad);
  // Make the heap grow by the pad now, unless its free top (keepcost) is already that large: ask
  // for more than the top holds. Volatile, or the compiler may drop the pair.
  const size_t top = mallinfo2().keepcost;
  if (top < static_cast<size_t>(pad)) {
    void* volatile block = std::malloc(top + kHugePage);
    std::free(block);
  }

  uintptr_t start = 0, end = 0;
  if (!heap_range(start, end)) {
    r.reason = "no [heap] mapping in /proc/self/maps";
    return r;
  }
  const uintptr_t first = (start + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t last = end & ~(kHugePage - 1);
  if (last <= first) {
    r.reason = "the heap holds no whole 2 MiB page";
    return r;
  }
  if (madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE) != 0) {
    r.reason = std::string("madvise(MADV_HUGEPAGE) on the heap failed: ") + std::strerror(errno);
    return r;
  }
  r.advised = true;
  r.advised_bytes = last - first;
  return r;
}

}  // namespace hpd
