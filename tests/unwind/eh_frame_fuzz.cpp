// libFuzzer over the one-pass .eh_frame reader (unwind/src/eh_frame_rows.h): the input is a .eh_frame
// section at a fixed address; every FDE its entries name is read as the table compiler reads it (its
// start, then its rows), and the list of FDEs is read as for a module without .eh_frame_hdr. Run bounded in
// the tests (eh_frame_fuzz_bounded) under AddressSanitizer and UBSan: whatever the bytes, no read outside
// them, no undefined behaviour, no endless loop.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "eh_frame_rows.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr uint64_t kVaddr = 0x10000;
  const std::span<const uint8_t> section(data, size);
  hpd::unwind_detail::EhFrameRows reader(section, kVaddr);
  std::vector<hpd::unwind_detail::FrameRule> rows;
  std::string why;
  // As for a module without .eh_frame_hdr: every FDE found entry after entry.
  std::vector<hpd::unwind_detail::CfiModule::FdeRange> fdes;
  reader.all_fdes(&fdes, &why);
  for (const auto& fde : fdes) {
    if (fde.fde < kVaddr || fde.fde - kVaddr >= size || fde.end <= fde.start) __builtin_trap();  // never
  }
  size_t offset = 0;
  for (int entries = 0; entries < 64 && size - offset >= 8; ++entries) {
    uint32_t length = 0;
    uint32_t id = 0;
    std::memcpy(&length, data + offset, 4);
    std::memcpy(&id, data + offset + 4, 4);
    if (length == 0 || length > size - offset - 4) break;
    if (id != 0) {
      uint64_t start = 0;
      rows.clear();
      reader.clear_ops();
      if (reader.fde_start(kVaddr + offset, &start, &why)) reader.rows(kVaddr + offset, start, &rows, &why);
    }
    offset += 4 + length;
  }
  return 0;
}
