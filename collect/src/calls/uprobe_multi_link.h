// BPF_LINK_CREATE of a uprobe_multi or uprobe-session link, by hand: Debian 12's headers and
// libbpf 1.1 predate both. The call counter (uprobe_multi) and the allocation probes (sessions) share it.
#pragma once

#include <bpf/libbpf.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace hpd::uprobe_multi {

inline constexpr int kBpfLinkCreate = 28;
inline constexpr uint32_t kAttachUprobeMulti = 48;    // BPF_TRACE_UPROBE_MULTI, Linux 6.6
inline constexpr uint32_t kAttachUprobeSession = 57;  // BPF_TRACE_UPROBE_SESSION, Linux 6.13

// The multi-site uprobe programs of hpd's BPF objects and the attach type each is loaded for. libbpf 1.1
// knows neither type from a section name, so they are declared SEC("uprobe") and set here before the
// load: the kernel checks a link's type against the program's expected one.
struct ProgramAttachType {
  const char* program;
  uint32_t attach_type;
};
inline constexpr ProgramAttachType kProgramAttachTypes[] = {
    {"hpd_count_call", kAttachUprobeMulti},    // calls.bpf.c: exact call counts
    {"hpd_time_call", kAttachUprobeSession},   // calls.bpf.c: timed calls (entry and return)
    {"hpd_alloc_call", kAttachUprobeSession},  // alloc.bpf.c: the allocator's calls
};

// Sets the expected attach type of each program of `object` that kProgramAttachTypes names (call it
// between the open and the load).
inline void set_expected_attach_types(bpf_object* object) {
  bpf_program* program = nullptr;
  bpf_object__for_each_program(program, object) {
    for (const ProgramAttachType& entry : kProgramAttachTypes) {
      if (std::strcmp(bpf_program__name(program), entry.program) == 0)
        bpf_program__set_expected_attach_type(program, static_cast<bpf_attach_type>(entry.attach_type));
    }
  }
}

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
