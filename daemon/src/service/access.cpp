// Access control of hpd's requests: SO_PEERCRED and the kernel's PTRACE_MODE_READ rules through pidfds.
#include "hpd/service/access.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/nsfs.h>
#include <pwd.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "hpd/base/proc_files.h"
#include "hpd/base/process.h"
#include "hpd/base/unique_fd.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5; older headers lack it
#endif

namespace hpd::service {
namespace {

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

// The hexadecimal value after `key` in a /proc/PID/status text; 0 when absent.
uint64_t status_hex(std::string_view status, std::string_view key) {
  const size_t at = status.find(key);
  if (at == std::string_view::npos) return 0;
  return std::strtoull(std::string(status.substr(at + key.size(), 32)).c_str(), nullptr, 16);
}

// What /proc/PID says of one process, read through a directory descriptor opened while `pidfd` named
// the same process: checked after the reads, a live pidfd proves the pid was not reused meanwhile.
struct ProcessView {
  std::string status;    // /proc/PID/status (of a live thread, when the main thread has exited)
  uid_t dump_owner = 0;  // owner of that status file: the euid when dumpable, root when not
  bool dump_owner_known = false;
  // Every thread is exiting or a zombie: its memory is gone, so its /proc files belong to root
  // whatever it was, and it has nothing left to read.
  bool exited = false;
  // Its user namespace (/proc/PID/ns/user), opened after the status was read; invalid when it could
  // not be.
  UniqueFd user_ns;
};

constexpr unsigned long kPfExiting = 0x4;  // PF_EXITING in /proc/PID/stat's flags

// One task's status file, its owner, and whether it is exiting, from the task's /proc directory.
struct TaskView {
  std::string status;
  uid_t owner = 0;
  bool owner_known = false;
  bool exiting = false;
};

// Whether the task has begun to exit (PF_EXITING, or a zombie); nullopt when its stat is unreadable. A
// thread that has begun to exit has dropped, or is about to drop, its memory: the kernel then gives its
// /proc files to root as if it were not dumpable (task_dump_owner).
std::optional<bool> task_exiting(int dirfd) {
  UniqueFd stat_fd(::openat(dirfd, "stat", O_RDONLY | O_CLOEXEC));
  if (!stat_fd) return std::nullopt;
  char buffer[4096];
  const ssize_t got = ::read(stat_fd.get(), buffer, sizeof buffer - 1);
  if (got <= 0) return std::nullopt;
  const std::string_view stat(buffer, static_cast<size_t>(got));
  // After the command's closing parenthesis: state ppid pgrp session tty_nr tpgid flags.
  const size_t paren = stat.rfind(')');
  if (paren == std::string_view::npos) return std::nullopt;
  std::istringstream fields{std::string(stat.substr(paren + 1))};
  std::string state;
  std::string skip;
  fields >> state;
  for (int i = 0; i < 5; ++i) fields >> skip;
  unsigned long flags = 0;
  if (!(fields >> flags)) return std::nullopt;
  return (flags & kPfExiting) != 0 || state == "Z" || state == "X";
}

std::optional<TaskView> read_task_view(int dirfd) {
  TaskView view;
  const std::optional<bool> exiting = task_exiting(dirfd);
  if (!exiting) return std::nullopt;
  view.exiting = *exiting;
  UniqueFd status(::openat(dirfd, "status", O_RDONLY | O_CLOEXEC));
  if (!status) return std::nullopt;
  // Files under /proc/PID (not the directory itself, which keeps the euid for ps) belong to root
  // while the process is not dumpable (task_dump_owner).
  struct stat st {};
  if (::fstat(status.get(), &st) == 0) {
    view.owner = st.st_uid;
    view.owner_known = true;
  }
  char buffer[4096];
  ssize_t n = 0;
  while ((n = ::read(status.get(), buffer, sizeof buffer)) > 0)
    view.status.append(buffer, static_cast<size_t>(n));
  // A task that began to exit after its flags were read and before its status file's owner was taken
  // has that file owned by root already: it is exiting, not a process that made itself undumpable (CI
  // saw a launched command judged so as it exited at the end of its recording, which was discarded).
  if (!view.exiting) view.exiting = task_exiting(dirfd).value_or(true);
  return view;
}

std::optional<ProcessView> read_process_view(int pidfd, pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  UniqueFd dirfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dirfd) return std::nullopt;
  std::optional<TaskView> task = read_task_view(dirfd.get());
  if (!task) return std::nullopt;
  if (task->exiting) {
    // The main thread is gone; another thread may still run the process and hold its memory.
    task.reset();
    UniqueFd tasks_fd(::openat(dirfd.get(), "task", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    DIR* tasks = tasks_fd ? ::fdopendir(tasks_fd.release()) : nullptr;
    while (tasks != nullptr && !task) {
      const dirent* entry = ::readdir(tasks);
      if (entry == nullptr) break;
      if (entry->d_name[0] < '1' || entry->d_name[0] > '9' || std::to_string(pid) == entry->d_name) continue;
      UniqueFd thread_dir(::openat(::dirfd(tasks), entry->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!thread_dir) continue;
      std::optional<TaskView> thread = read_task_view(thread_dir.get());
      if (thread && !thread->exiting) task = std::move(thread);
    }
    if (tasks != nullptr) ::closedir(tasks);
  }
  ProcessView view;
  // After the status: a process that enters a new user namespace between the two reads is judged with
  // the capabilities it had before and the namespace it has now, never with a new namespace's
  // capabilities taken for the old one's.
  view.user_ns.reset(::openat(dirfd.get(), "ns/user", O_RDONLY | O_CLOEXEC));
  if (task) {
    view.status = std::move(task->status);
    view.dump_owner = task->owner;
    view.dump_owner_known = task->owner_known;
  } else {
    view.exited = true;
  }
  // The directory was opened after the pidfd; if the pidfd's process is still alive, both are the same
  // process. A dead one may have left its pid to another.
  if (!pidfd_alive(pidfd)) return std::nullopt;
  return view;
}

const char* kIdNames[4] = {"real", "effective", "saved", "filesystem"};

uint64_t inode_of(int fd) {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

// hpd's own user namespace: the one whose capabilities are the system's for hpd's decisions.
uint64_t own_user_ns() {
  static const uint64_t ns = [] {
    UniqueFd fd(::open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC));
    return inode_of(fd.get());
  }();
  return ns;
}

// Namespaces nest at most 32 deep (the kernel's limit); a few more for safety.
constexpr int kMaxUserNsDepth = 40;

}  // namespace

uint64_t initial_namespace_caps(const PeerCredentials& peer) {
  return peer.initial_user_ns ? peer.cap_effective : 0;
}

bool peer_capable_in(const PeerCredentials& peer, int ns_fd, int cap) {
  if (peer.user_ns == 0 || ns_fd < 0) return false;
  UniqueFd ns(::fcntl(ns_fd, F_DUPFD_CLOEXEC, 0));
  for (int depth = 0; ns && depth < kMaxUserNsDepth; ++depth) {
    if (inode_of(ns.get()) == peer.user_ns) return has_capability(peer.cap_effective, cap);
    // Up one level; EPERM at the initial namespace (or above hpd's own): the peer's is no ancestor.
    UniqueFd parent(::ioctl(ns.get(), NS_GET_PARENT));
    if (!parent) return false;
    if (inode_of(parent.get()) == peer.user_ns) {
      // The namespace's creator (by effective uid, as hpd's namespace sees it) holds every capability
      // in it when the peer is in its parent: the kernel's cap_capable().
      uid_t owner = 0;
      if (::ioctl(ns.get(), NS_GET_OWNER_UID, &owner) == 0 && owner == peer.uid) return true;
    }
    ns = std::move(parent);
  }
  return false;
}

std::optional<PeerCredentials> peer_credentials(int socket) {
  ucred cred{};
  socklen_t size = sizeof cred;
  if (getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0 || size != sizeof cred)
    return std::nullopt;
  PeerCredentials peer{cred.pid, cred.uid, cred.gid};
  // The peer's capabilities and user namespace, from the very process that connected (a pidfd the
  // kernel took at connect); without one, none are assumed.
  int pidfd = -1;
  socklen_t pidfd_size = sizeof pidfd;
  if (getsockopt(socket, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &pidfd_size) == 0 && pidfd >= 0) {
    UniqueFd owned(pidfd);
    if (const auto view = read_process_view(owned.get(), cred.pid)) {
      const StatusIds ids = parse_proc_status_ids(view->status);
      // SO_PEERCRED's ids are the effective ones at connect(): a process that executed another program
      // since (a set-user-ID one) has capabilities that are not the connecting program's.
      const bool same_ids =
          ids.uids.size() >= 2 && ids.gids.size() >= 2 && ids.uids[1] == cred.uid && ids.gids[1] == cred.gid;
      if (same_ids) {
        peer.cap_effective = status_hex(view->status, "CapEff:");
        peer.cap_permitted = status_hex(view->status, "CapPrm:");
      }
      peer.user_ns = inode_of(view->user_ns.get());
      peer.initial_user_ns = peer.user_ns != 0 && peer.user_ns == own_user_ns();
    }
  }
  return peer;
}

AccessDecision may_read_process(const PeerCredentials& peer, pid_t pid, int* pidfd_out) {
  const std::string who = "pid " + std::to_string(pid);
  if (pid <= 0) return {false, "no process with pid " + std::to_string(pid)};
  UniqueFd pidfd = open_pidfd(pid);
  if (!pidfd) return {false, "no process with pid " + std::to_string(pid)};
  const auto view = read_process_view(pidfd.get(), pid);
  if (!view || view->exited) return {false, "no process with pid " + std::to_string(pid) + " (it exited)"};
  if (pidfd_out != nullptr) *pidfd_out = pidfd.release();
  // CAP_SYS_PTRACE in the target's user namespace overrides every rule below, as in the kernel: a
  // peer in a child namespace holds none over processes outside it.
  if (peer_capable_in(peer, view->user_ns.get(), kCapSysPtrace)) return {true, ""};
  const StatusIds ids = parse_proc_status_ids(view->status);
  if (ids.uids.size() < 4 || ids.gids.size() < 4) return {false, "cannot read the credentials of " + who};
  for (size_t i = 0; i < 4; ++i) {
    if (ids.uids[i] != peer.uid) {
      return {false, who + " runs with " + kIdNames[i] + " uid " + std::to_string(ids.uids[i]) +
                         ", not yours (" + std::to_string(peer.uid) + ")"};
    }
  }
  for (size_t i = 0; i < 4; ++i) {
    if (ids.gids[i] != peer.gid) {
      return {false, who + " runs with " + kIdNames[i] + " gid " + std::to_string(ids.gids[i]) +
                         ", not your primary group (" + std::to_string(peer.gid) + ")"};
    }
  }
  if (!view->dump_owner_known || view->dump_owner != peer.uid) {
    return {false, who +
                       " is not dumpable (it called prctl(PR_SET_DUMPABLE, 0) or changed its credentials), "
                       "so the kernel lets no other process of yours read it either"};
  }
  // cap_ptrace_access_check: the subset rule holds only between processes of one user namespace; a
  // process outside the peer's (its own, if the peer made a namespace) needs CAP_SYS_PTRACE there.
  const uint64_t target_ns = inode_of(view->user_ns.get());
  if (target_ns == 0 || target_ns != peer.user_ns) {
    return {false, who +
                       " is in another user namespace than yours, and you lack CAP_SYS_PTRACE in its "
                       "namespace, so the kernel would not let you trace it either"};
  }
  const uint64_t target_caps = status_hex(view->status, "CapPrm:");
  if ((target_caps & ~peer.cap_permitted) != 0) {
    return {false, who + " holds capabilities you do not have"};
  }
  return {true, ""};
}

int read_kernel_sysctl(const char* name, int fallback) {
  std::ifstream in(std::string("/proc/sys/") + name);
  int value = 0;
  if (!(in >> value)) return fallback;
  return value;
}

std::string kernel_frames_refusal(const PeerCredentials& peer, int paranoid, int kptr_restrict) {
  const uint64_t caps = initial_namespace_caps(peer);
  const bool perfmon = has_capability(caps, kCapPerfmon) || has_capability(caps, kCapSysAdmin);
  if (!perfmon && paranoid > 1) {
    return "perf_event_paranoid is " + std::to_string(paranoid) +
           " and you lack CAP_PERFMON, so the kernel would give you no kernel samples";
  }
  // As /proc/kallsyms decides whether to show a reader real addresses (kallsyms_show_value).
  const bool syslog = has_capability(caps, kCapSyslog);
  const bool addresses = (kptr_restrict == 0 && paranoid <= 1) || (kptr_restrict <= 1 && syslog);
  if (!addresses) {
    return "kptr_restrict is " + std::to_string(kptr_restrict) + (syslog ? "" : " and you lack CAP_SYSLOG") +
           ", so the kernel would show you no kernel addresses";
  }
  return "";
}

bool is_privileged_peer(const PeerCredentials& peer, const std::string& group) {
  // Root of a user namespace of its own (even one root made) is not root here.
  if (peer.uid == 0 && peer.initial_user_ns) return true;
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
                                   const session::RecordRequest& request, std::vector<UniqueFd>* pidfds) {
  if (pidfds != nullptr) pidfds->clear();
  if (privileged) {
    // Bound to the processes that have these pids now, as for anyone.
    if (pidfds != nullptr) {
      for (const int32_t pid : request.target.pids) pidfds->push_back(pid > 0 ? open_pidfd(pid) : UniqueFd());
    }
    return {true, ""};
  }
  if (request.target.all_processes) {
    return {false, "recording every process (--all) is reserved to root and the '" + group + "' group; " +
                       join_group_advice(group)};
  }
  if (!request.target.cgroup.empty()) {
    return {false, "recording a cgroup (--cgroup) is reserved to root and the '" + group + "' group; " +
                       join_group_advice(group)};
  }
  if (!request.target.command.empty()) {
    return {false,
            "hpd does not start commands for a client: hpctl starts the command itself and asks hpd to "
            "record its pid (update hpctl)"};
  }
  for (const int32_t pid : request.target.pids) {
    int pidfd = -1;
    const AccessDecision target = may_read_process(peer, pid, &pidfd);
    UniqueFd checked(pidfd);
    if (target.allowed) {
      if (pidfds != nullptr) pidfds->push_back(std::move(checked));
      continue;
    }
    if (pidfds != nullptr) pidfds->clear();
    if (target.reason.starts_with("no process")) return target;
    return {false, "you (uid " + std::to_string(peer.uid) +
                       ") may only record your own processes, as the kernel would let you trace them: " +
                       target.reason + "; " + join_group_advice(group)};
  }
  return {true, ""};
}

PrivilegeFinding privilege_gained(const PeerCredentials& peer, const RawProfile& profile) {
  for (const RawProcess& process : profile.processes) {
    const std::string who = "process " + std::to_string(process.pid) + " (" + process.name + ")";
    // The recorder stopped following it where its credentials changed; nothing after that is kept.
    if (process.unfollowed_ns != 0) continue;
    // Judged alive only when the process at its pid is the one the recorder saw: one that started
    // after the recorder first saw this pid is another process at a reused pid (the recorder has not
    // read the exit yet), not one of the client's that gained privileges; this one is judged by its
    // mappings below as an exited one. (The start is rounded down to a tick: a pid reused within a
    // tick of being first seen is still judged alive, and refused.)
    const auto reused = [&] {
      const std::optional<uint64_t> started = read_process_start_monotonic_ns(process.pid);
      return process.start_ns != 0 && started && *started > process.start_ns;
    };
    if (process.end_ns == 0 && !reused()) {
      const AccessDecision now = may_read_process(peer, process.pid);
      // A process that exited since is judged by its mappings below.
      if (!now.allowed && !now.reason.starts_with("no process"))
        return {who + ": " + now.reason, process.pid};
    }
    for (const RawMapping& mapping : process.mappings) {
      if (mapping.module >= profile.modules.size()) continue;
      const RawModule& module = profile.modules[mapping.module];
      if (module.is_kernel || module.path.empty() || module.path.front() != '/') continue;
      struct stat st {};
      if (::stat(module.path.c_str(), &st) != 0) continue;
      if ((st.st_mode & S_ISUID) != 0 && st.st_uid != peer.uid) {
        return {who + " executed " + module.path + ", a set-user-ID program of uid " +
                std::to_string(st.st_uid)};
      }
      if ((st.st_mode & S_ISGID) != 0 && (st.st_mode & S_IXGRP) != 0 && st.st_gid != peer.gid) {
        return {who + " executed " + module.path + ", a set-group-ID program of gid " +
                std::to_string(st.st_gid)};
      }
      if (::getxattr(module.path.c_str(), "security.capability", nullptr, 0) > 0) {
        return {who + " executed " + module.path + ", a program with file capabilities"};
      }
    }
  }
  return {};
}

}  // namespace hpd::service
