// The perf_event ring buffer: an owning mmap (PerfRingBuffer) and a reader that works on any memory
// laid out like one (RingView), so wrap-around can be tested on synthetic buffers.
#pragma once

#include <linux/perf_event.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace hpd {

// A header page followed by a data area of `size` bytes (a power of two).
struct RingView {
  perf_event_mmap_page* header = nullptr;
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

struct DrainStats {
  size_t records = 0;
  size_t bytes = 0;
  bool corrupt = false;  // a record header made no sense; the rest of the data was skipped
};

// Hands every complete record between data_tail and data_head to `on_record` (header included, 8-byte
// aligned storage), then publishes the new data_tail so the kernel may reuse the space. A record that
// wraps around the end of the data area is first copied into `scratch`.
DrainStats drain_ring(const RingView& ring, std::vector<uint8_t>& scratch,
                      const std::function<void(std::span<const uint8_t>)>& on_record);

// A record read without freeing its space: its bytes, its position in the ring (data_tail counts),
// and whether the bytes are the ring's own (else a copy in the scratch buffer, valid for the call).
struct RingRecord {
  std::span<const uint8_t> bytes;
  uint64_t position = 0;
  bool in_ring = true;
};

// Reads the complete records from position `from` (at or after data_tail) to data_head, as drain_ring,
// but leaves data_tail alone: the records stay in the ring until release_ring() frees their space.
// Returns where the next read starts (data_head; after a corrupt header, where it was seen).
uint64_t read_ring(const RingView& ring, uint64_t from, std::vector<uint8_t>& scratch, DrainStats& stats,
                   const std::function<void(const RingRecord&)>& on_record);
// Publishes data_tail = `tail`: the kernel may reuse the space before it.
void release_ring(const RingView& ring, uint64_t tail);

// Owns the mmap of one perf event fd: 1 header page + 2^n data pages.
class PerfRingBuffer {
 public:
  // Throws std::system_error when mmap fails (errno kept, e.g. EPERM for the mlock limit).
  static PerfRingBuffer map(int fd, size_t data_pages);

  PerfRingBuffer() = default;
  PerfRingBuffer(const PerfRingBuffer&) = delete;
  PerfRingBuffer& operator=(const PerfRingBuffer&) = delete;
  PerfRingBuffer(PerfRingBuffer&& other) noexcept;
  PerfRingBuffer& operator=(PerfRingBuffer&& other) noexcept;
  ~PerfRingBuffer();

  [[nodiscard]] RingView view() const;
  [[nodiscard]] bool mapped() const { return base_ != nullptr; }
  [[nodiscard]] size_t data_size() const { return length_ == 0 ? 0 : length_ - page_size_; }

 private:
  PerfRingBuffer(void* base, size_t length, size_t page_size)
      : base_(base), length_(length), page_size_(page_size) {}
  void unmap();

  void* base_ = nullptr;
  size_t length_ = 0;
  size_t page_size_ = 0;
};

}  // namespace hpd
