// Who may record what: the peer's credentials (SO_PEERCRED) against the target's owner.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "hpd/model/raw_profile.h"

namespace hpd::service {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// The credentials of the process at the other end of a connected Unix socket, as of connect().
std::optional<PeerCredentials> peer_credentials(int socket);

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

// Whether `peer` may record what `args` names. Privileged peers may record anything; others only
// processes whose real and effective uid are the peer's, never --all or --cgroup.
AccessDecision check_record_access(const PeerCredentials& peer, bool privileged, const std::string& group,
                                   const cli::RecordArgs& args);

// For a session of an unprivileged peer: why a recorded process is no longer the peer's to record,
// or "" when every one still is. A process that executed a set-user-ID or set-group-ID program, or one
// with file capabilities, gains privileges the peer lacks: it is caught while alive by its real and
// effective uid, and afterwards by the executable files it mapped (so one that ran briefly and exited
// between two checks is caught too).
std::string privilege_gained(const PeerCredentials& peer, const RawProfile& profile);

}  // namespace hpd::service
