// BPF_LINK_CREATE of a uprobe_multi or uprobe-session link, by hand: Debian 12's headers and
// libbpf 1.1 predate both. The call counter (uprobe_multi) and the allocation probes (sessions) share it.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hpd::uprobe_multi {

inline constexpr int kBpfLinkCreate = 28;
inline constexpr uint32_t kAttachUprobeMulti = 48;    // BPF_TRACE_UPROBE_MULTI, Linux 6.6
inline constexpr uint32_t kAttachUprobeSession = 57;  // BPF_TRACE_UPROBE_SESSION, Linux 6.13

// The BPF_LINK_CREATE part of union bpf_attr for uprobe_multi links.
struct LinkAttr {
  uint32_t prog_fd;
  uint32_t target_fd;
  uint32_t attach_type;
  uint32_t flags;
  uint64_t path;
  uint64_t offsets;
  uint64_t ref_ctr_offsets;
  uint64_t cookies;
  uint32_t cnt;
  uint32_t multi_flags;
  uint32_t pid;
  uint32_t pad;
};

// One link of the program `prog_fd` on `offsets` of the file at `path`, each with its cookie; in the
// process `pid` only, or in every process when pid is 0. Its descriptor, or -1 (errno set).
inline int link(int prog_fd, uint32_t attach_type, const std::string& path,
                const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& cookies, int32_t pid = 0) {
  LinkAttr attr{};
  attr.prog_fd = static_cast<uint32_t>(prog_fd);
  attr.attach_type = attach_type;
  attr.path = reinterpret_cast<uint64_t>(path.c_str());
  attr.offsets = reinterpret_cast<uint64_t>(offsets.data());
  attr.cookies = reinterpret_cast<uint64_t>(cookies.data());
  attr.cnt = static_cast<uint32_t>(offsets.size());
  attr.pid = static_cast<uint32_t>(pid);
  return static_cast<int>(::syscall(SYS_bpf, kBpfLinkCreate, &attr, sizeof attr));
}

}  // namespace hpd::uprobe_multi
