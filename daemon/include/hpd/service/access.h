// Who may record what: the peer's credentials (SO_PEERCRED) against the target's owner.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hpd/model/raw_profile.h"
#include "hpd/session/record_request.h"

namespace hpd::service {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  // The connecting process's capability sets (CapEff, CapPrm of /proc/PID/status), read once through
  // a pidfd of that very process; 0 when it could not be read (it exited, or a recycled pid).
  uint64_t cap_effective = 0;
  uint64_t cap_permitted = 0;
};

// The credentials of the process at the other end of a connected Unix socket: ids as of connect(),
// capabilities read at once through a pidfd of the peer (SO_PEERPIDFD).
std::optional<PeerCredentials> peer_credentials(int socket);

// Capability numbers of <linux/capability.h> that decide what a client may see.
inline constexpr int kCapSysPtrace = 19;
inline constexpr int kCapSysAdmin = 21;
inline constexpr int kCapSyslog = 34;
inline constexpr int kCapPerfmon = 38;
[[nodiscard]] inline bool has_capability(uint64_t set, int cap) {
  return ((set >> cap) & 1) != 0;
}

// "Uid:" / "Gid:" of /proc/PID/status: real, effective, saved, filesystem.
struct StatusIds {
  std::vector<unsigned> uids;
  std::vector<unsigned> gids;
  std::vector<unsigned> groups;  // supplementary ("Groups:")
};
// Parses the text of /proc/PID/status; missing lines give empty vectors.
StatusIds parse_proc_status_ids(std::string_view status);
// /proc/PID/status read and parsed; nullopt when the process is gone.
std::optional<StatusIds> read_proc_status_ids(pid_t pid);

// Whether the peer is root or a member of `group` (its primary group or a supplementary group of the
// connecting process; when that process is gone, of the user's group list).
bool is_privileged_peer(const PeerCredentials& peer, const std::string& group);

struct AccessDecision {
  bool allowed = false;
  std::string reason;  // for a refusal: why, and what to do
};

// The kernel's PTRACE_MODE_READ decision (__ptrace_may_access, perf_event_open's check) for `peer`
// reading process `pid`: allowed with CAP_SYS_PTRACE; otherwise every one of the target's real,
// effective, saved and filesystem uids must be the peer's uid and every gid the peer's gid, the target
// must be dumpable (not prctl(PR_SET_DUMPABLE, 0), not a set-user-ID image), and its permitted
// capabilities a subset of the peer's. Judged through a pidfd: the answer is about the process that
// had `pid` when the pidfd was opened, and a process that exits meanwhile (its pid maybe reused) is
// refused. `pidfd`, when given, receives that descriptor (owned by the caller) for a later re-check.
AccessDecision may_read_process(const PeerCredentials& peer, pid_t pid, int* pidfd = nullptr);

// Whether `peer` may record what `request` names. Privileged peers may record anything; others only
// processes may_read_process() allows, never --all or --cgroup.
AccessDecision check_record_access(const PeerCredentials& peer, bool privileged, const std::string& group,
                                   const session::RecordRequest& request);

// For a session of an unprivileged peer: why a recorded process is no longer the peer's to record,
// or "" when every one still is. Every live process the recording follows (except those the recorder
// stopped following at an exec that changed their credentials) gets may_read_process() again. A
// process that executed a set-user-ID or set-group-ID program, or one with file capabilities, is also
// caught afterwards by the executable files it mapped (one that ran briefly and exited between two
// checks).
struct PrivilegeFinding {
  std::string reason;  // "" when every process is still the peer's
  // Nonzero when the finding is a live process's state, not something the recording holds: a process
  // in the middle of a set-user-ID execve is already not dumpable (and a moment later runs as another
  // uid) before the recorder has read the record that stops following it, so the caller confirms such
  // a finding on a later snapshot, or on the final one, before it acts.
  pid_t live_pid = 0;
};
PrivilegeFinding privilege_gained(const PeerCredentials& peer, const RawProfile& profile);

// Kernel call stacks and kernel addresses as the kernel would let `peer` have them: kernel samples
// need perf_event_paranoid <= 1 or CAP_PERFMON (or CAP_SYS_ADMIN); kernel addresses need what
// /proc/kallsyms asks (kptr_restrict 0 with perf_event_paranoid <= 1, or kptr_restrict <= 1 with
// CAP_SYSLOG). Kernel frames are given only when both hold. `paranoid` and `kptr_restrict` are the
// sysctl values (read_kernel_sysctl). Returns "" when allowed, else why not.
std::string kernel_frames_refusal(const PeerCredentials& peer, int paranoid, int kptr_restrict);
// An integer of /proc/sys (e.g. "kernel/perf_event_paranoid"); `fallback` when unreadable.
int read_kernel_sysctl(const char* name, int fallback);

}  // namespace hpd::service
