// What this process may do with perf_event: capabilities and perf_event_paranoid.
#pragma once

#include <sys/types.h>

#include <climits>
#include <string>

namespace hpd {

struct PerfPrivileges {
  uid_t euid = 0;
  bool cap_perfmon = false;  // CAP_PERFMON or CAP_SYS_ADMIN in the effective set
  bool cap_bpf = false;      // CAP_BPF or CAP_SYS_ADMIN in the effective set
  int paranoid = INT_MIN;    // /proc/sys/kernel/perf_event_paranoid; INT_MIN when unreadable
  int max_stack = 127;       // /proc/sys/kernel/perf_event_max_stack

  // Unprivileged users may sample their own processes (user space only) when paranoid <= 2.
  [[nodiscard]] bool may_profile_own_processes() const { return cap_perfmon || paranoid <= 2; }
  [[nodiscard]] bool may_profile_other_users() const { return cap_perfmon; }
  [[nodiscard]] bool may_see_kernel() const { return cap_perfmon || paranoid <= 1; }
  // "perf_event_paranoid is 2; run as root, grant CAP_PERFMON, or lower /proc/sys/kernel/perf_event_paranoid"
  [[nodiscard]] std::string advice() const;
  // Loading tracing BPF programs and reading kernel memory from them.
  [[nodiscard]] bool may_use_bpf() const { return cap_bpf && cap_perfmon; }
};

PerfPrivileges probe_perf_privileges();

}  // namespace hpd
