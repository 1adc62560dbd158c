// Small readers for /proc and /sys files: process identity, threads, state, system facts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpd {

// The whole file, read with plain read(2) (procfs files report size 0); nullopt if it cannot be opened.
std::optional<std::string> read_small_file(const std::string& path);

// The first line of a file without its newline; nullopt if unreadable.
std::optional<std::string> read_first_line(const std::string& path);

// The tids in /proc/PID/task, sorted; empty if the process is gone.
std::vector<int32_t> list_threads(int32_t pid);

// The pids in /proc, sorted.
std::vector<int32_t> list_processes();

// The child processes of process `pid` (forked by any of its threads), sorted: the kernel's
// /proc/PID/task/TID/children lists, or on a kernel built without them the processes whose parent
// (/proc/P/stat) is `pid`. Empty when it has none or is gone.
std::vector<int32_t> list_child_processes(int32_t pid);

// The thread's total CPU time (the kernel's sum_exec_runtime), the first field of
// /proc/PID/task/TID/schedstat; nullopt when the thread is gone or schedstats are not built in.
std::optional<uint64_t> read_thread_runtime_ns(int32_t pid, int32_t tid);

// The CPU time the hypervisor took from this machine's CPUs since boot (the "steal" column of
// /proc/stat's "cpu" line, summed over the CPUs), in ns; 1/USER_HZ (10 ms) resolution. nullopt when
// /proc/stat is unreadable or has no steal column. A thread whose virtual CPU is stolen while it runs
// gets no CPU time for it (PARAVIRT_TIME_ACCOUNTING) and no run delay either, but perf's cpu-clock and
// task-clock, the sampling timers, count it as that thread's.
std::optional<uint64_t> read_host_steal_ns();

// The hypervisor's steal (read_host_steal_ns) over a span: read at start() and at since_start().
class HostStealMeter {
 public:
  void start() { at_start_ = read_host_steal_ns(); }
  // nullopt when either reading failed (or the count went back).
  [[nodiscard]] std::optional<uint64_t> since_start() const {
    const std::optional<uint64_t> now = read_host_steal_ns();
    if (!at_start_ || !now || *now < *at_start_) return std::nullopt;
    return *now - *at_start_;
  }

 private:
  std::optional<uint64_t> at_start_;
};

// The thread's context switches so far (voluntary_ctxt_switches + nonvoluntary_ctxt_switches of
// /proc/PID/task/TID/status: the kernel's nvcsw + nivcsw); nullopt when the thread is gone.
std::optional<uint64_t> read_thread_context_switches(int32_t pid, int32_t tid);

std::string read_comm(int32_t pid);                      // /proc/PID/comm
std::string read_thread_comm(int32_t pid, int32_t tid);  // /proc/PID/task/TID/comm
std::string read_exe(int32_t pid);                       // /proc/PID/exe target, "" if unreadable
std::vector<std::string> read_cmdline(int32_t pid);

// The state letter from /proc/PID/stat ('R', 'S', 'Z', ...), or 0 when the process is gone.
char read_process_state(int32_t pid);
char read_thread_state(int32_t pid, int32_t tid);

// When the process now at `pid` started, on CLOCK_MONOTONIC (its /proc/PID/stat starttime, in clock
// ticks since boot, moved by CLOCK_BOOTTIME - CLOCK_MONOTONIC now): rounded down to a tick (10 ms), so
// never later than the true start. nullopt when the process is gone or the file is malformed.
std::optional<uint64_t> read_process_start_monotonic_ns(int32_t pid);

// The real uid of the process from /proc/PID/status, nullopt if gone.
std::optional<uint32_t> read_process_uid(int32_t pid);

// "Uid:" / "Gid:" of /proc/PID/status: real, effective, saved, filesystem.
struct StatusIds {
  std::vector<unsigned> uids;
  std::vector<unsigned> gids;
  std::vector<unsigned> groups;  // supplementary ("Groups:")
};
// Parses the text of /proc/PID/status; missing lines give empty vectors.
StatusIds parse_proc_status_ids(std::string_view status);
// /proc/PID/status read and parsed; nullopt when the process is gone.
std::optional<StatusIds> read_proc_status_ids(int32_t pid);

// Whether every id of the process in /proc/PID/status (real, effective, saved and filesystem uid and
// gid) is `uid` and `gid`: the credentials the kernel's PTRACE_MODE_READ check compares. False when the
// process is gone or its status cannot be read.
bool process_runs_as(int32_t pid, uint32_t uid, uint32_t gid);

// The cgroup a /proc/PID/cgroup text names: the path of its cgroup v2 line ("0::PATH"), unless that is
// the root "/" and systemd's name=systemd v1 line names another (a hybrid system, where systemd tracks
// units in its v1 tree); "" when neither line is there.
std::string cgroup_from_proc_text(std::string_view text);
// The same read from /proc/PID/cgroup; "" when the process is gone.
std::string read_cgroup(int32_t pid);

// Who a cgroup path belongs to, for labels. The systemd unit: the innermost component ending in
// ".service" or ".scope" ("/system.slice/foo.service/sub" -> "foo.service"). The container id: the
// innermost component that is a systemd container scope ("docker-ID.scope", "cri-containerd-ID.scope",
// "crio-ID.scope", "libpod-ID.scope") or, with the cgroupfs driver, a bare id (at least 12 lowercase
// hex digits, as "/docker/ID"). Either is "" when the path names none.
struct CgroupOwner {
  std::string systemd_unit;
  std::string container_id;
};
CgroupOwner cgroup_owner(std::string_view path);

// Where the cgroup v2 hierarchy is mounted: /sys/fs/cgroup on unified systems, often
// /sys/fs/cgroup/unified on hybrid ones; "" when it is not mounted.
std::string cgroup2_mount();

// The CPUs listed in a kernel cpulist such as "0-3,6,8-9".
std::vector<int> parse_cpu_list(const std::string& text);
// The online CPUs (/sys/devices/system/cpu/online).
std::vector<int> online_cpus();

std::optional<int> read_int_file(const std::string& path);

}  // namespace hpd
