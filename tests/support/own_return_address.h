// A return address in the calling test's own code, right after a call instruction: what the stack walks
// take for a caller when they step from code without unwind information (hpd/base/x86_call.h).
#pragma once

#include <cstdint>

namespace hpd::testing {

// Returns the address its call returns to. Not inlined (one copy for all callers), and not a tail call.
[[gnu::noinline]] inline uint64_t own_return_address() {
  const auto ra = reinterpret_cast<uint64_t>(__builtin_return_address(0));
  asm volatile("" ::: "memory");
  return ra;
}

}  // namespace hpd::testing
