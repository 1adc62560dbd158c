// libFuzzer target: the MIP decoder (map parsing, raw decoding, merging) must never crash on arbitrary bytes.
// Input: u32 little-endian map length, then the map bytes, then the raw section bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mip_internal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t map_len;
  std::memcpy(&map_len, data, 4);
  const std::span<const uint8_t> rest(data + 4, size - 4);
  const size_t split = map_len % (rest.size() + 1);
  const auto map_bytes = rest.subspan(0, split);
  const auto raw_bytes = rest.subspan(split);
  try {
    hpd::mip::parse_header(raw_bytes, hpd::mip::FileKind::kRaw);
  } catch (const hpd::mip::MipError&) {
  }
  try {
    const hpd::mip::Map map = hpd::mip::parse_map(map_bytes);
    const hpd::mip::Module m = hpd::mip::decode_records(raw_bytes, map);
    const hpd::mip::Module both[] = {m, m};
    const hpd::mip::Module merged = hpd::mip::merge(both);
    for (const auto& f : merged.functions) {
      if (f.blocks_covered() > f.blocks_total()) __builtin_trap();
    }
    (void)merged.call_order();
    (void)merged.never_called();
  } catch (const hpd::mip::MipError&) {
  }
  return 0;
}
