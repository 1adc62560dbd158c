// Access control of hpd's requests from SO_PEERCRED and /proc/PID/status.
#include "hpd/service/access.h"

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace hpd::service {
namespace {

std::vector<unsigned> numbers_after(std::string_view line) {
  std::vector<unsigned> out;
  std::istringstream in{std::string(line)};
  unsigned long n = 0;
  while (in >> n) {
    if (n > 0xffffffffUL) break;
    out.push_back(static_cast<unsigned>(n));
  }
  return out;
}

std::optional<gid_t> group_id(const std::string& name) {
  group entry{};
  group* found = nullptr;
  std::vector<char> buffer(16384);
  if (getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) {
    return std::nullopt;
  }
  return found->gr_gid;
}

std::string join_group_advice(const std::string& group) {
  return "ask an administrator to add you to the '" + group +
         "' group (then log in again), or run hpctl as root";
}

}  // namespace

std::optional<PeerCredentials> peer_credentials(int socket) {
  ucred cred{};
  socklen_t size = sizeof cred;
  if (getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0 || size != sizeof cred)
    return std::nullopt;
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

StatusIds parse_proc_status_ids(std::string_view status) {
  StatusIds ids;
  while (!status.empty()) {
    const size_t eol = status.find('\n');
    const std::string_view line = status.substr(0, eol);
    status = eol == std::string_view::npos ? std::string_view() : status.substr(eol + 1);
    if (line.starts_with("Uid:"))
      ids.uids = numbers_after(line.substr(4));
    else if (line.starts_with("Gid:"))
      ids.gids = numbers_after(line.substr(4));
    else if (line.starts_with("Groups:"))
      ids.groups = numbers_after(line.substr(7));
  }
  return ids;
}

std::optional<StatusIds> read_proc_status_ids(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  StatusIds ids = parse_proc_status_ids(text.str());
  if (ids.uids.size() < 2) return std::nullopt;
  return ids;
}

bool is_privileged_peer(const PeerCredentials& peer, const std::string& group) {
  if (peer.uid == 0) return true;
  const std::optional<gid_t> gid = group_id(group);
  if (!gid) return false;
  if (peer.gid == *gid) return true;
  // The connecting process's own groups: what its login gave it (a user added to the group since
  // has to log in again, as for any group).
  if (peer.pid > 0) {
    if (const auto ids = read_proc_status_ids(peer.pid)) {
      return std::find(ids->groups.begin(), ids->groups.end(), *gid) != ids->groups.end();
    }
  }
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (getpwuid_r(peer.uid, &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr)
    return false;
  int count = 64;
  std::vector<gid_t> groups(static_cast<size_t>(count));
  if (getgrouplist(found->pw_name, found->pw_gid, groups.data(), &count) < 0) {
    groups.resize(static_cast<size_t>(count));
    if (getgrouplist(found->pw_name, found->pw_gid, groups.data(), &count) < 0) return false;
  }
  groups.resize(static_cast<size_t>(count));
  return std::find(groups.begin(), groups.end(), *gid) != groups.end();
}

AccessDecision check_record_access(const PeerCredentials& peer, bool privileged, const std::string& group,
                                   const cli::RecordArgs& args) {
  if (privileged) return {true, ""};
  if (args.all) {
    return {false, "recording every process (--all) is reserved to root and the '" + group + "' group; " +
                       join_group_advice(group)};
  }
  if (!args.cgroup.empty()) {
    return {false, "recording a cgroup (--cgroup) is reserved to root and the '" + group + "' group; " +
                       join_group_advice(group)};
  }
  if (!args.command.empty()) {
    return {false,
            "hpd does not start commands for a client: hpctl starts the command itself and asks hpd to "
            "record its pid (update hpctl)"};
  }
  for (const int32_t pid : args.pids) {
    const auto ids = pid > 0 ? read_proc_status_ids(pid) : std::nullopt;
    if (!ids) return {false, "no process with pid " + std::to_string(pid)};
    const unsigned real = ids->uids[0];
    const unsigned effective = ids->uids[1];
    if (real != peer.uid || effective != peer.uid) {
      return {false, "you (uid " + std::to_string(peer.uid) +
                         ") may only record your own processes, and pid " + std::to_string(pid) +
                         " runs as uid " + std::to_string(real) +
                         (effective != real ? " (effective uid " + std::to_string(effective) + ")" : "") +
                         "; " + join_group_advice(group)};
    }
  }
  return {true, ""};
}

std::string privilege_gained(const PeerCredentials& peer, const RawProfile& profile) {
  for (const RawProcess& process : profile.processes) {
    const std::string who = "process " + std::to_string(process.pid) + " (" + process.name + ")";
    if (process.end_ns == 0) {
      if (const auto ids = read_proc_status_ids(process.pid);
          ids && ids->uids.size() >= 2 && (ids->uids[0] != peer.uid || ids->uids[1] != peer.uid)) {
        return who + " now runs as uid " + std::to_string(ids->uids[1]) + " (real uid " +
               std::to_string(ids->uids[0]) + ")";
      }
    }
    for (const RawMapping& mapping : process.mappings) {
      if (mapping.module >= profile.modules.size()) continue;
      const RawModule& module = profile.modules[mapping.module];
      if (module.is_kernel || module.path.empty() || module.path.front() != '/') continue;
      struct stat st {};
      if (::stat(module.path.c_str(), &st) != 0) continue;
      if ((st.st_mode & S_ISUID) != 0 && st.st_uid != peer.uid) {
        return who + " executed " + module.path + ", a set-user-ID program of uid " +
               std::to_string(st.st_uid);
      }
      if ((st.st_mode & S_ISGID) != 0 && (st.st_mode & S_IXGRP) != 0 && st.st_gid != peer.gid) {
        return who + " executed " + module.path + ", a set-group-ID program of gid " +
               std::to_string(st.st_gid);
      }
      if (::getxattr(module.path.c_str(), "security.capability", nullptr, 0) > 0) {
        return who + " executed " + module.path + ", a program with file capabilities";
      }
    }
  }
  return "";
}

}  // namespace hpd::service
