// CallCounter for builds without the BPF toolchain: construction fails with the reason.
#include "hpd/calls/call_counter.h"

namespace hpd::calls {

namespace {
constexpr const char* kWhy =
    "hpd was built without the eBPF toolchain (clang, bpftool or libbpf were missing)";
}

class CallCounter::Impl {};

CallCounter::CallCounter(CallCounterOptions) {
  throw CallCountError(kWhy);
}
CallCounter::~CallCounter() = default;
void CallCounter::add_launched(int32_t, const std::string&, const std::string&) {}
void CallCounter::add_process(int32_t) {}
void CallCounter::add_child(int32_t) {}
void CallCounter::rescan(uint32_t) {}
CallCountStats CallCounter::finish(RawProfile&) {
  return {};
}
const CallCountStats& CallCounter::stats() const {
  static const CallCountStats none;
  return none;
}
bool CallCounter::writes_timed_entries() const {
  return false;
}

std::string call_counter_unavailable_reason() {
  return kWhy;
}

}  // namespace hpd::calls
