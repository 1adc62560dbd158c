// Writing a profile: into a descriptor that may be non-blocking (a pipe or socket hpd writes for a
// client), waiting for the reader but not forever; and opening output paths safely.
#pragma once

#include <cstddef>
#include <string>

namespace hpd {

// Writes all `size` bytes; on a non-blocking descriptor, waits up to the stall timeout each time the
// reader takes nothing. Throws std::runtime_error (prefixed by `what`) on an error or a stall.
// Returns the bytes written (== size).
size_t write_output_fully(int fd, const void* data, size_t size, const char* what);

// How long a reader may take no data before a write gives up (milliseconds; default 10000).
void set_output_stall_timeout_ms(int timeout_ms);
int output_stall_timeout_ms();

// What an output path names before it is written.
struct OutputPlace {
  // It exists and is not a regular file (a device such as /dev/null, a FIFO, a socket): it is written
  // in place, never replaced by a renamed temporary file.
  bool special = false;
  // Its directory may be written by others (e.g. /tmp): a symbolic link there may have been planted,
  // so the output's last component is never followed.
  bool shared_directory = false;
};
OutputPlace inspect_output(const std::string& path);

// Opens `path` for writing with `flags` (O_CREAT, O_TRUNC, ...; O_WRONLY and O_CLOEXEC are added),
// adding O_NOFOLLOW in a shared directory and dropping O_TRUNC for a special file; `mode` (before the
// umask) for a file it creates. Throws std::runtime_error saying what went wrong (a symbolic link it
// refused to follow included).
int open_output(const std::string& path, int flags, const OutputPlace& place, unsigned mode = 0666);

}  // namespace hpd
