// Loading hpd's eBPF programs: libbpf's messages, the handles of what libbpf returns, the LoadConfig a
// recording's options fix the skeleton to, and the load itself. Internal to the eBPF backend.
#pragma once

#include <bpf/libbpf.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "bpf/bpf_recorder.h"
#include "hpd/collect/recorder.h"
#include "perf/perf_privileges.h"
#include "profile_event.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include "profile.skel.h"
#pragma GCC diagnostic pop

namespace hpd::bpf_recording {

// Captures libbpf's messages for the lifetime of the object: libbpf reports through one global
// callback; warnings of the current thread's attempt are kept for the error message, debug chatter is
// dropped (bpf_load.cpp). Out of line, beside the thread-local pointer they set: gcc 12 with UBSan
// miscompiled its null check inline here (the branch read flags no instruction had set, and reported
// a store to a null pointer whenever the variable had no TLS init function).
class LibbpfLogCapture {
 public:
  LibbpfLogCapture();
  ~LibbpfLogCapture();
  LibbpfLogCapture(const LibbpfLogCapture&) = delete;
  LibbpfLogCapture& operator=(const LibbpfLogCapture&) = delete;

  // The last lines, which name the failing program or map.
  [[nodiscard]] std::string tail() const {
    std::string t = text_;
    while (!t.empty() && t.back() == '\n') t.pop_back();
    size_t cut = t.size();
    for (int lines = 0; lines < 3 && cut != std::string::npos && cut > 0; ++lines)
      cut = t.rfind('\n', cut - 1);
    if (cut != std::string::npos && cut < t.size()) t = t.substr(cut + 1);
    return t;
  }

 private:
  std::string text_;
  std::string* previous_ = nullptr;
};

struct SkeletonDeleter {
  void operator()(profile_bpf* skel) const { profile_bpf__destroy(skel); }
};
using Skeleton = std::unique_ptr<profile_bpf, SkeletonDeleter>;

struct LinkDeleter {
  void operator()(bpf_link* link) const { bpf_link__destroy(link); }
};
using Link = std::unique_ptr<bpf_link, LinkDeleter>;

struct RingBufferDeleter {
  void operator()(ring_buffer* rb) const { ring_buffer__free(rb); }
};
using RingReader = std::unique_ptr<ring_buffer, RingBufferDeleter>;

std::string errno_text(int err);
std::string with_log(std::string text, const LibbpfLogCapture& log);

// Opens the skeleton; throws BpfUnavailable when libbpf cannot parse the embedded object.
Skeleton open_skeleton(const LibbpfLogCapture& log);
void load_skeleton(profile_bpf* skel, const LibbpfLogCapture& log);

// Everything a loaded skeleton is fixed to: its read-only configuration, the sizes of its maps, the
// programs loaded. Recordings with equal LoadConfigs can use programs loaded alike, ahead of time.
// The client's uid and gid are not in it: they are written after the load (.bss).
struct LoadConfig {
  uint32_t filter_mode = HPD_FILTER_PIDS;
  bool follow_children = false;
  bool capture_kernel = false;
  bool restrict_creds = false;
  uint64_t off_cpu_min_ns = 0;
  uint64_t sample_period_ns = 0;
  uint32_t ring_bytes = 0;
  uint32_t stack_copy = 0;
  uint32_t pending_copy = 0;  // cfi mode: the stack copied with samples whose tables were pending
  uint32_t copies_below = 0;  // stack copies are taken while the ring holds fewer bytes than this
  bool dwarf = false;
  bool cfi = false;
  uint32_t cfi_rows = 0;
  uint32_t cfi_index = 0;
  bool off_cpu = false;
  bool attach_state = false;  // hpd_attach_state loaded (pid targets with off-CPU samples)
  bool warm_ring = false;
  bool operator==(const LoadConfig&) const = default;
};

LoadConfig load_config_of(const RecordOptions& options, const PerfPrivileges& privileges, size_t cpus);

// Opens and loads the programs and maps for `c`. Throws BpfUnavailable when the object cannot be
// parsed or the kernel refuses it, RecordError for a map that cannot be sized.
Skeleton load_skeleton_for(const LoadConfig& c, const LibbpfLogCapture& log);

// Where this CPU's hypervisor steal clock (the per-CPU steal_time, a struct kvm_steal_time) lies from
// its run queue (the per-CPU runqueues), from vmlinux's BTF; empty when the kernel has either not (no
// KVM guest support, no BTF). Read once per process, on a thread of its own that the first
// load_skeleton_for starts, so that its 25 ms go by while the kernel verifies the programs; this
// waits for it. The programs read the clock only once the session has written this (profile.bpf.c).
std::optional<int64_t> steal_clock_from_run_queue();

}  // namespace hpd::bpf_recording
