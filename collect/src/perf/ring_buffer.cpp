// Ring-buffer reading and the owning mmap.
#include "perf/ring_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

namespace hpd {

namespace {
// Copies `n` bytes starting at ring position `pos`, continuing at the start of the data area if needed.
void copy_from_ring(const RingView& ring, uint64_t pos, uint8_t* out, size_t n) {
  const uint64_t mask = ring.size - 1;
  const uint64_t offset = pos & mask;
  const size_t first = static_cast<size_t>(std::min<uint64_t>(n, ring.size - offset));
  std::memcpy(out, ring.data + offset, first);
  if (first < n) std::memcpy(out + first, ring.data, n - first);
}
}  // namespace

uint64_t read_ring(const RingView& ring, uint64_t from, std::vector<uint8_t>& scratch, DrainStats& stats,
                   const std::function<void(const RingRecord&)>& on_record) {
  if (ring.header == nullptr || ring.size == 0 || (ring.size & (ring.size - 1)) != 0) return from;
  // Acquire pairs with the kernel's store of data_head: the record bytes before it are visible.
  const uint64_t head = __atomic_load_n(&ring.header->data_head, __ATOMIC_ACQUIRE);
  uint64_t tail = from;
  const uint64_t mask = ring.size - 1;
  if (head - ring.header->data_tail > ring.size || head - tail > ring.size) {
    // Cannot happen with a writable mapping (the kernel never overwrites unread data); treat as corruption.
    stats.corrupt = true;
    return head;
  }
  while (tail < head) {
    const uint64_t available = head - tail;
    perf_event_header header;
    if (available < sizeof header) {
      stats.corrupt = true;
      break;
    }
    copy_from_ring(ring, tail, reinterpret_cast<uint8_t*>(&header), sizeof header);
    if (header.size < sizeof header || header.size > available) {
      stats.corrupt = true;
      break;
    }
    const uint64_t offset = tail & mask;
    if (offset + header.size <= ring.size && offset % 8 == 0) {
      on_record(RingRecord{{ring.data + offset, header.size}, tail, true});
    } else {
      scratch.resize(header.size);
      copy_from_ring(ring, tail, scratch.data(), header.size);
      on_record(RingRecord{{scratch.data(), header.size}, tail, false});
    }
    tail += header.size;
    ++stats.records;
    stats.bytes += header.size;
  }
  return stats.corrupt ? head : tail;
}

void release_ring(const RingView& ring, uint64_t tail) {
  if (ring.header == nullptr) return;
  // Release orders our reads of the records before the kernel sees the space as free.
  __atomic_store_n(&ring.header->data_tail, tail, __ATOMIC_RELEASE);
}

DrainStats drain_ring(const RingView& ring, std::vector<uint8_t>& scratch,
                      const std::function<void(std::span<const uint8_t>)>& on_record) {
  DrainStats stats;
  if (ring.header == nullptr || ring.size == 0 || (ring.size & (ring.size - 1)) != 0) return stats;
  const uint64_t end = read_ring(ring, ring.header->data_tail, scratch, stats,
                                 [&](const RingRecord& record) { on_record(record.bytes); });
  release_ring(ring, end);
  return stats;
}

PerfRingBuffer PerfRingBuffer::map(int fd, size_t data_pages) {
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  if (data_pages == 0 || (data_pages & (data_pages - 1)) != 0) {
    throw std::system_error(EINVAL, std::generic_category(), "ring buffer pages must be a power of two");
  }
  const size_t length = (data_pages + 1) * page;
  void* base = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap of perf ring buffer");
  return PerfRingBuffer(base, length, page);
}

PerfRingBuffer::PerfRingBuffer(PerfRingBuffer&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      length_(std::exchange(other.length_, 0)),
      page_size_(std::exchange(other.page_size_, 0)) {}

PerfRingBuffer& PerfRingBuffer::operator=(PerfRingBuffer&& other) noexcept {
  if (this != &other) {
    unmap();
    base_ = std::exchange(other.base_, nullptr);
    length_ = std::exchange(other.length_, 0);
    page_size_ = std::exchange(other.page_size_, 0);
  }
  return *this;
}

PerfRingBuffer::~PerfRingBuffer() {
  unmap();
}

void PerfRingBuffer::unmap() {
  if (base_ != nullptr) ::munmap(base_, length_);
  base_ = nullptr;
  length_ = 0;
}

RingView PerfRingBuffer::view() const {
  if (base_ == nullptr) return {};
  auto* header = static_cast<perf_event_mmap_page*>(base_);
  // data_offset/data_size are filled by kernels since 4.1; the classic layout is the fallback.
  const uint64_t offset = header->data_offset != 0 ? header->data_offset : page_size_;
  const uint64_t size = header->data_size != 0 ? header->data_size : length_ - page_size_;
  return RingView{header, static_cast<const uint8_t*>(base_) + offset, size};
}

}  // namespace hpd
