// Output files: the one way hpd and hpctl open a path they write (profiles, captures, conversions),
// so that nobody else can point the writer at a file, FIFO or device through its output's name; and
// the write loop that waits for a slow reader of a non-blocking descriptor, but not forever.
#pragma once

#include <cstddef>
#include <string>

namespace hpd {

// Writes all `size` bytes; on a non-blocking descriptor, waits while the reader takes nothing, up to
// the stall timeout (read again every 100 ms, so that lowering it ends a wait already begun). Throws
// std::runtime_error (prefixed by `what`) on an error or a stall. Returns the bytes written (== size).
size_t write_output_fully(int fd, const void* data, size_t size, const char* what);

// How long a reader may take no data before a write gives up (milliseconds; default 10000).
void set_output_stall_timeout_ms(int timeout_ms);
int output_stall_timeout_ms();

// How a regular file at the output path is written.
enum class OutputWrite {
  // Into a new temporary file beside it, renamed over the path by commit(): the path holds either
  // the old file or the complete new one.
  kReplace,
  // At the path itself, created or truncated (a capture streamed while recording).
  kInPlace,
};

// The rules, one place for every writer. The output's directory is "shared" when someone other
// than the writer (its effective uid) and root may change its entries: it is writable by its group
// or by everyone (sticky or not, like /tmp), or it belongs to another user. In a shared directory,
// as the kernel's protected_symlinks/protected_fifos/protected_regular rules do for sticky ones but
// stricter (the directory's owner counts as another user):
// - a symbolic link as the last component is followed only when the writer owns it;
// - an existing FIFO, device or socket is written only when the writer owns it;
// - an existing regular file is written in place (kInPlace) only when the writer owns it and it has
//   no other hard link; replacing it by rename (kReplace) never writes into it.
// Elsewhere the writer's own links are followed and a device it names (-o /dev/null) is written in
// place, never truncated or replaced. A FIFO is opened without blocking: with no process reading
// it, the open fails at once ("no process reads it"), never waits. A socket is refused. Every
// refusal is a std::runtime_error that names the path and the reason. What is opened is checked
// again through the descriptor, so a name swapped between the check and the open is refused too.
class OutputFile {
 public:
  OutputFile(std::string path, OutputWrite how, unsigned mode = 0666);
  // Without commit() or keep(): the temporary file, or a regular file this object created or
  // truncated at the path, is removed (when the path still names it).
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  [[nodiscard]] int fd() const { return fd_; }
  [[nodiscard]] const std::string& path() const { return path_; }
  // An existing FIFO or device, written in place (never truncated, replaced or removed).
  [[nodiscard]] bool special() const { return special_; }
  // Whether the output is written at its path as it goes (kInPlace, or a FIFO or device).
  [[nodiscard]] bool in_place() const { return temp_name_.empty(); }

  // write_output_fully with an error that names the path.
  void write(const void* data, size_t size);
  // The descriptor passes to its caller (who closes it); commit() and keep() then only finish the name.
  int release_fd();
  // Closes the file; a temporary file is synced and renamed over the path. Throws on failure.
  void commit();
  // Keeps what was written in place so far (an incomplete capture), without commit's rename.
  void keep();

 private:
  [[noreturn]] void fail(const std::string& what, int err) const;
  void close_fd();

  std::string path_;
  std::string base_;  // the last component
  int dir_fd_ = -1;   // the directory, held from the checks to the rename
  int fd_ = -1;
  std::string temp_name_;  // kReplace: the temporary file's name in the directory
  bool special_ = false;
  bool done_ = false;      // committed or kept: nothing is removed
  unsigned long dev_ = 0;  // the regular file written in place, removed only if the path still names it
  unsigned long ino_ = 0;
};

// The checks of OutputFile made without writing anything: the directory exists, a new file can be
// created in it (probed), and what the path names may be written by these rules. A FIFO's reader is
// not looked for (opening it would end the reader's input). Throws std::runtime_error.
void check_output_path(const std::string& path, OutputWrite how);

}  // namespace hpd
