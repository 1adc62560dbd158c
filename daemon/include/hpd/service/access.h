// Who may record what: the peer's credentials (SO_PEERCRED) against the target's owner.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hpd/base/unique_fd.h"
#include "hpd/model/raw_profile.h"
#include "hpd/session/record_request.h"

namespace hpd::service {

struct PeerCredentials {
  pid_t pid = 0;
  // Ids as hpd's user namespace (the initial one) sees them: a client that is root in a user namespace
  // of its own has its real user's uid here.
  uid_t uid = 0;
  gid_t gid = 0;
  // The connecting process's capability sets (CapEff, CapPrm of /proc/PID/status), read once through
  // a pidfd of that very process; 0 when it could not be read (it exited, or a recycled pid), or when
  // it no longer runs with the effective ids it connected with (it executed another program since).
  // They are capabilities in the peer's own user namespace (`user_ns`), and count only over what that
  // namespace owns (peer_capable_in).
  uint64_t cap_effective = 0;
  uint64_t cap_permitted = 0;
  // The peer's user namespace (the inode of /proc/PID/ns/user), 0 when unknown; whether it is hpd's
  // own. Only then do its capabilities count for what hpd reserves to the privileged (--all,
  // --cgroup, kernel frames, the continuous profile), as the kernel's capable() asks of perf.
  uint64_t user_ns = 0;
  bool initial_user_ns = false;
};

// The credentials of the process at the other end of a connected Unix socket: ids as of connect(),
// capabilities and user namespace read at once through a pidfd of the peer (SO_PEERPIDFD).
std::optional<PeerCredentials> peer_credentials(int socket);

// The peer's capabilities that count system-wide: its effective set when it is in hpd's user
// namespace, none when it is in another (a child namespace's capabilities are not the system's).
[[nodiscard]] uint64_t initial_namespace_caps(const PeerCredentials& peer);

// Capability numbers of <linux/capability.h> that decide what a client may see.
inline constexpr int kCapSysPtrace = 19;
inline constexpr int kCapSysAdmin = 21;
inline constexpr int kCapSyslog = 34;
inline constexpr int kCapPerfmon = 38;
[[nodiscard]] inline bool has_capability(uint64_t set, int cap) {
  return ((set >> cap) & 1) != 0;
}

// Whether the peer is root of hpd's user namespace (uid 0 there; not the root of a namespace of its
// own) or a member of `group` (its primary group or a supplementary group of the connecting process;
// when that process is gone, of the user's group list).
bool is_privileged_peer(const PeerCredentials& peer, const std::string& group);

struct AccessDecision {
  bool allowed = false;
  std::string reason;  // for a refusal: why, and what to do
};

// Whether `peer` holds capability `cap` in the user namespace `ns_fd` (an open /proc/PID/ns/user), as
// the kernel's ns_capable() decides: the peer's effective set counts when that namespace is the
// peer's own, and the owner (by effective uid) of a namespace whose parent is the peer's holds every
// capability in it and below; a namespace the peer's is not an ancestor of gives it none.
bool peer_capable_in(const PeerCredentials& peer, int ns_fd, int cap);

// The kernel's PTRACE_MODE_READ decision (__ptrace_may_access and cap_ptrace_access_check,
// perf_event_open's check) for `peer` reading process `pid`: allowed with CAP_SYS_PTRACE in the
// target's user namespace (peer_capable_in); otherwise every one of the target's real, effective,
// saved and filesystem uids must be the peer's uid and every gid the peer's gid, the target must be
// dumpable (not prctl(PR_SET_DUMPABLE, 0), not a set-user-ID image), it must be in the peer's own user
// namespace, and its permitted capabilities a subset of the peer's. Judged through a pidfd: the
// answer is about the process that had `pid` when the pidfd was opened, and a process that exits
// meanwhile (its pid maybe reused) is refused. `pidfd`, when given, receives that descriptor (owned by
// the caller) for a later re-check.
AccessDecision may_read_process(const PeerCredentials& peer, pid_t pid, int* pidfd = nullptr);

// Whether `peer` may record what `request` names. Privileged peers may record anything; others only
// processes may_read_process() allows, never --all or --cgroup. `pidfds`, when given, receives a pidfd
// of each process of request.target.pids, in order, opened at the check (-1 where none could be): the
// recording is bound to those processes, not to their numbers (RecordOptions::pid_fds).
AccessDecision check_record_access(const PeerCredentials& peer, bool privileged, const std::string& group,
                                   const session::RecordRequest& request,
                                   std::vector<UniqueFd>* pidfds = nullptr);

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
// CAP_SYSLOG). Capabilities count only in hpd's user namespace (initial_namespace_caps), as the
// kernel's perfmon_capable() and kallsyms_show_value() ask them of the initial one. Kernel frames are given
// only when both hold. `paranoid` and `kptr_restrict` are the sysctl values (read_kernel_sysctl). Returns ""
// when allowed, else why not.
std::string kernel_frames_refusal(const PeerCredentials& peer, int paranoid, int kptr_restrict);
// An integer of /proc/sys (e.g. "kernel/perf_event_paranoid"); `fallback` when unreadable.
int read_kernel_sysctl(const char* name, int fallback);

}  // namespace hpd::service
