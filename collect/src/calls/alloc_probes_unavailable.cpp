// AllocProbes without the BPF toolchain: `--alloc --pid` reports itself unavailable.
#include "hpd/calls/alloc_probes.h"
#include "hpd/calls/call_counter.h"

namespace hpd::calls {

std::vector<AllocatorModule> find_allocators(int32_t) {
  return {};
}

struct AllocProbes::Impl {};

AllocProbes::AllocProbes(int32_t, uint64_t, AllocProbeClient) {
  throw CallCountError(
      "this hpd was built without the eBPF backend, which sampling the allocations of a running process "
      "needs");
}

AllocProbes::~AllocProbes() = default;

const std::string& AllocProbes::description() const {
  static const std::string none;
  return none;
}

std::vector<std::string> AllocProbes::finish(RawProfile&) {
  return {};
}

}  // namespace hpd::calls
