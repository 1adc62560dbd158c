// libFuzzer target: DwarfIndex::open() and lookup() on arbitrary bytes must never crash or leak.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "dwarf_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = memfd_create("hpd-dwarf-fuzz", MFD_CLOEXEC);
  if (fd < 0) return 0;
  size_t done = 0;
  while (done < size) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  std::string error;
  auto index = hpd::DwarfIndex::open("/proc/self/fd/" + std::to_string(fd), &error);
  if (index) {
    // Addresses where small test binaries keep their code, and the edges.
    for (uint64_t a = 0x1000; a < 0x2000; a += 0x1f) index->lookup(a);
    for (uint64_t a : {uint64_t{0}, uint64_t{1}, UINT64_MAX, UINT64_MAX - 1}) index->lookup(a);
    index->memory_bytes();
  }
  close(fd);
  return 0;
}
