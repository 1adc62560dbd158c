// Synthetic chunks for the continuous store's unit tests.
#include "chunk_testing.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include "hpd/capture/capture.h"
#include "hpd/continuous/continuous.h"

namespace hpd::testing {

namespace fs = std::filesystem;

RawProfile make_chunk(uint64_t start_unix_ns, uint64_t start_mono_ns, uint64_t seconds,
                      const std::vector<SyntheticProcess>& processes) {
  RawProfile p;
  p.info.start_unix_ns = start_unix_ns;
  p.info.start_mono_ns = start_mono_ns;
  p.info.end_mono_ns = start_mono_ns + seconds * kSec;
  p.info.frequency_hz = 19;
  p.info.interval_ns = kSec / 19;
  p.info.backend = "bpf";
  p.info.event = "cpu-clock";
  p.info.call_graph = "fp";
  p.info.target = "all processes";
  for (const SyntheticProcess& sp : processes) {
    RawProcess& proc = p.process(sp.pid);
    proc.name = sp.name;
    proc.exe = sp.exe;
    proc.start_ns = start_mono_ns + sp.start_offset_ns;
    proc.end_ns = sp.end_offset_ns != 0 ? start_mono_ns + sp.end_offset_ns : 0;
    const uint32_t module = p.intern_module(sp.exe, sp.module_build_id);
    proc.mappings.push_back(RawMapping{sp.map_start, sp.map_start + 0x10000, 0, module, 0, 0});
    RawThread& thread = p.thread(sp.pid, sp.pid);
    thread.name = sp.name;
    thread.start_ns = proc.start_ns;
    thread.end_ns = proc.end_ns;
    const uint64_t user[] = {sp.map_start + 0x10, sp.map_start + 0x20};
    const uint32_t stack = p.stacks.intern({}, user);
    for (uint64_t i = 0; i < seconds; ++i) {
      const uint64_t t = start_mono_ns + i * kSec + kSec / 2;
      if (t < proc.start_ns || (proc.end_ns != 0 && t > proc.end_ns)) continue;
      RawSample s;
      s.time_ns = t;
      s.pid = sp.pid;
      s.tid = sp.pid;
      s.stack = stack;
      s.cpu_delta_ns = p.info.interval_ns;
      s.stack_end = StackEnd::kComplete;
      p.samples.push_back(s);
    }
  }
  return p;
}

fs::path write_chunk(const fs::path& dir, const RawProfile& profile) {
  const fs::path path = dir / continuous::chunk_file_name(profile.info.start_unix_ns);
  write_capture_file(profile, path.string());
  set_mtime(path, profile.info.start_unix_ns + (profile.info.end_mono_ns - profile.info.start_mono_ns));
  return path;
}

void set_mtime(const fs::path& path, uint64_t unix_ns) {
  struct timespec times[2];
  times[0].tv_sec = 0;
  times[0].tv_nsec = UTIME_OMIT;
  times[1].tv_sec = static_cast<time_t>(unix_ns / kSec);
  times[1].tv_nsec = static_cast<long>(unix_ns % kSec);
  if (::utimensat(AT_FDCWD, path.c_str(), times, 0) != 0) throw std::runtime_error("utimensat failed");
}

std::vector<std::string> file_names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace hpd::testing
