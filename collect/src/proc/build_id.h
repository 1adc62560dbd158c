// ELF build-id (NT_GNU_BUILD_ID) reading, for files mapped into live processes.
#pragma once

#include <sys/resource.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hpd/base/elf.h"
#include "hpd/base/unique_fd.h"
#include "hpd/model/raw_profile.h"

namespace hpd {

// read_elf_build_id, build_id_from_raw_notes and build_id_of_image are in hpd/base/elf.h.

// The running kernel's build-id, from /sys/kernel/notes.
std::string kernel_build_id();

// Which file a descriptor is open on, as the caches of unwind tables tell files apart: the same
// device and inode, size and modification time is the same file (one rewritten in place is not).
struct FileIdentity {
  uint64_t dev = 0;
  uint64_t ino = 0;
  int64_t size = -1;  // -1: unknown (no file was reached)
  int64_t mtime_ns = 0;
  [[nodiscard]] bool known() const { return size >= 0; }
  auto operator<=>(const FileIdentity&) const = default;
};

// What a live process tells about one of its executable mappings.
struct MappedModule {
  std::string build_id;                  // "" when the module has none or could not be read
  std::shared_ptr<const HeldFile> file;  // the file as the process reached it, held open; null if not
  FileIdentity identity;                 // of the file the build-id was read from (unknown for [vdso])
  std::vector<uint8_t> image;            // for "[vdso]": its ELF image, read from /proc/PID/mem
  std::string error;                     // why the vDSO image could not be read (else empty)
};

// This process's own vDSO image (empty if it has none): the kernel maps one image per ABI into every
// process, so it stands for a process's vDSO of the same size or build-id.
const std::vector<uint8_t>& own_vdso();

// The bytes of [start, end) of a live process's memory (/proc/PID/mem; needs ptrace access, so
// CAP_SYS_PTRACE for other users' processes); empty and a reason in *error when it cannot be read.
std::vector<uint8_t> read_process_memory(int32_t pid, uint64_t start, uint64_t end, std::string* error);

// Reads build-ids of mapped files while their process is alive and remembers them per inode,
// so a library mapped into many processes is read once.
class BuildIdReader {
 public:
  // Tries /proc/PID/map_files/START-END (works for deleted files; needs CAP_SYS_ADMIN or
  // CAP_CHECKPOINT_RESTORE), then /proc/PID/root/PATH (the process's mount namespace), then PATH
  // (the build-id and identity, no file held: that file is this process's view, maybe not the
  // target's). Each is opened once. For "[vdso]",
  // the image the process mapped; when it can no longer be read, this process's own vDSO if the
  // mapping has its size (the kernel maps the same image into every process of one ABI).
  MappedModule for_mapping(int32_t pid, uint64_t start, uint64_t end, const std::string& path);
  // Files are held open only while at least this many descriptors stay free below RLIMIT_NOFILE.
  static constexpr rlim_t kSpareDescriptors = 512;

 private:
  // What is known of one inode: its build-id, and its file while someone (a RawModule) holds it. Not
  // held here: a file whose modules let it go is closed (RawProfile::release_unmapped_module_files).
  struct Known {
    std::string build_id;
    std::weak_ptr<const HeldFile> file;
  };
  // The inodes known at most, before those whose files nobody holds are forgotten (a recording that
  // outlives what it records meets every program the system runs).
  static constexpr size_t kMaxKnown = 4096;
  // The build-id of the file open on `fd`, read once per inode, and its identity; with `hold`, its
  // HeldFile too: the inode's, or a new one taking the descriptor over when it has none (else the
  // descriptor is closed).
  MappedModule read_cached(UniqueFd fd, bool hold);
  // What is known of a file: its build-id and identity, and with `hold` its HeldFile if someone holds it.
  static MappedModule answer(const std::pair<const FileIdentity, Known>& known, bool hold);
  // The file at `name` as read_cached tells it, without opening it when its identity is known (and,
  // with `hold`, its file held); nothing when it cannot be reached.
  std::optional<MappedModule> reach(const std::string& name, bool hold);
  std::map<FileIdentity, Known> by_inode_;
};

}  // namespace hpd
