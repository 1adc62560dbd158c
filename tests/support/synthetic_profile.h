// A small hand-built Profile for exporter tests: two threads in one process, an inlined call, a
// kernel frame, an off-CPU sample, a library with a build-id and one without.
#pragma once

#include "hpd/model/profile.h"

namespace hpd::testing {

// The build-id of the synthetic executable (20 bytes, as a GNU build-id usually is).
inline constexpr const char* kSyntheticBuildId = "0123456789abcdeffedcba98765432100a0b0c0d";

// Samples, by thread:
//   main (tid 100):   4 x main->compute->inline_helper (inlined, depth 1)   cpu 1 ms each
//                     2 x main->compute                                    cpu 1 ms each
//                     1 x main->compute->compute (recursion)               cpu 1 ms
//                     1 x main->do_syscall->sys_read [kernel]              cpu 0.5 ms
//                     1 x no stack                                         cpu 1 ms
//   worker (tid 101): 3 x worker_loop->memcpy                              cpu 2 ms each
//                     1 x off-CPU worker_loop->futex_wait [Idle]           off-CPU 5 ms
// Interval 1 ms; recording from t0 = 1,000,000,000 ns monotonic for 20 ms.
Profile make_synthetic_profile();

// Gives the first off-CPU sample of `p` `ns` of CPU time, as the eBPF backend gives a wait for a CPU
// after a wakeup what the scheduler charged for it. False when `p` has no off-CPU sample.
bool charge_first_off_cpu_sample(Profile& p, uint64_t ns);

}  // namespace hpd::testing
