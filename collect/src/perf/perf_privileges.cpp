// Capability and sysctl probing for perf_event.
#include "perf/perf_privileges.h"

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hpd/base/proc_files.h"

namespace hpd {

namespace {
bool has_effective_capability(int cap) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  const int word = cap / 32;
  if (word >= _LINUX_CAPABILITY_U32S_3) return false;
  return (data[word].effective & (1U << (cap % 32))) != 0;
}
}  // namespace

std::string PerfPrivileges::advice() const {
  std::string text = "perf_event_paranoid is ";
  text += paranoid == INT_MIN ? std::string("unreadable") : std::to_string(paranoid);
  text += "; run as root, grant CAP_PERFMON, or lower /proc/sys/kernel/perf_event_paranoid";
  return text;
}

PerfPrivileges probe_perf_privileges() {
  PerfPrivileges p;
  p.euid = ::geteuid();
  // CAP_PERFMON is 38; older kernels only know CAP_SYS_ADMIN, which implies it.
  constexpr int kCapPerfmon = 38;
  constexpr int kCapBpf = 39;
  p.cap_perfmon = has_effective_capability(kCapPerfmon) || has_effective_capability(CAP_SYS_ADMIN);
  p.cap_bpf = has_effective_capability(kCapBpf) || has_effective_capability(CAP_SYS_ADMIN);
  p.paranoid = read_int_file("/proc/sys/kernel/perf_event_paranoid").value_or(INT_MIN);
  if (p.paranoid == INT_MIN)
    p.paranoid = 2;  // the kernel default; the file is missing only without perf_event
  if (const auto max_stack = read_int_file("/proc/sys/kernel/perf_event_max_stack")) {
    if (*max_stack > 0 && *max_stack <= 65535) p.max_stack = *max_stack;
  }
  return p;
}

}  // namespace hpd
