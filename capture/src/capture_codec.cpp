// Capture file framing helpers: block names and checksums.
#include "capture_codec.h"

#include <zlib.h>

namespace hpd::capture {

const char* block_name(uint16_t type) {
  switch (static_cast<BlockType>(type)) {
    case BlockType::kInfo: return "info";
    case BlockType::kModules: return "modules";
    case BlockType::kProcesses: return "processes";
    case BlockType::kThreads: return "threads";
    case BlockType::kStacks: return "stacks";
    case BlockType::kSamples: return "samples";
    case BlockType::kCallEdges: return "call-edges";
    case BlockType::kLost: return "lost";
    case BlockType::kMip: return "mip";
    case BlockType::kModuleImages: return "module-images";
    case BlockType::kCallLatency: return "call-latency";
    case BlockType::kAllocations: return "allocations";
    case BlockType::kKernelSymbols: return "kernel-symbols";
    case BlockType::kStackGeneration: return "stack-generation";
    case BlockType::kEnd: return "end";
    case BlockType::kJitSymbols: return "jit-symbols";
  }
  return "unknown";
}

uint32_t block_crc(const uint8_t* header12, std::span<const uint8_t> payload) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, header12, 12);
  // zlib takes uInt lengths; blocks are bounded by kMaxBlockBytes, far below 4 GiB.
  crc = crc32(crc, payload.data(), static_cast<uInt>(payload.size()));
  return static_cast<uint32_t>(crc);
}

}  // namespace hpd::capture
