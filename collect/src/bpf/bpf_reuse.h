// hpd's programs and maps used again by the next recording (Preloader::give_back): every map of a
// skeleton put back as it was right after its load, so that nothing of one client's recording reaches
// the next one's. Internal to the eBPF backend.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bpf/bpf_load.h"
#include "bpf/cfi_maps.h"

namespace hpd::bpf_recording {

// The bytes of a skeleton's writable global sections (.data, .bss) right after its load, by map name.
struct GlobalsAtLoad {
  std::vector<std::pair<std::string, std::vector<uint8_t> > > sections;
};
GlobalsAtLoad globals_at_load(const profile_bpf* skel);

// cfi mode's maps of `skel`, loaded for `c`, for CfiMaps.
CfiMaps::Fds cfi_map_fds(const profile_bpf* skel, const LoadConfig& c);

// Puts every map of `skel`, loaded for `c` and detached, back as it was after its load: hash, LRU and
// stack maps emptied, arrays zeroed (cfi mode's row, rule and index arrays through `arrays`, mapped here
// when they are not yet), .data and .bss given their bytes of `globals` back, descriptor arrays'
// slots cleared, the ring's records read and dropped (.rodata is frozen: it is part of `c`). Returns
// "" when all of it was done, else why not: the skeleton must then not be used again.
std::string reset_for_reuse(profile_bpf* skel, const LoadConfig& c, const GlobalsAtLoad& globals,
                            CfiMapArrays& arrays);

}  // namespace hpd::bpf_recording
