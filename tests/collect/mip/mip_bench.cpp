// Benchmark: live snapshot + decode of a 10,000-function MIP fixture (goal: under 1 ms), and the size the
// instrumentation adds to the binary. Prints one line per figure; exits non-zero if a decode is wrong.
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "mip_internal.h"
#include "mip_test_support.h"

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

struct Stats {
  double min, median, p90, max;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v[v.size() * 9 / 10], v.back()};
}
void print(const char* what, const Stats& s) {
  std::printf("%-34s median %8.1f us  p90 %8.1f us  min %8.1f us  max %8.1f us\n", what, s.median, s.p90,
              s.min, s.max);
}

// Section sizes by name, and the file size.
std::map<std::string, uint64_t> section_sizes(const std::string& path, uint64_t* file_size) {
  std::map<std::string, uint64_t> out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  struct stat st {};
  fstat(fd, &st);
  *file_size = static_cast<uint64_t>(st.st_size);
  elf_version(EV_CURRENT);
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  size_t shstrndx = 0;
  if (elf && elf_getshdrstrndx(elf, &shstrndx) == 0) {
    for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
      GElf_Shdr sh;
      if (!gelf_getshdr(scn, &sh)) continue;
      if (const char* name = elf_strptr(elf, shstrndx, sh.sh_name)) out[name] = sh.sh_size;
    }
  }
  if (elf) elf_end(elf);
  close(fd);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 2000;
  for (int i = 1; i + 1 < argc; i++) {
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::max(1, std::atoi(argv[i + 1]));
  }
  using namespace hpd::mip;
  const std::string binary = test::fixture("mip_many");
  test::Child child(binary, {"LLVM_MIP_PROFILE_FILENAME=/dev/null"});
  if (!child.wait_for_line("ready", 30000)) {
    std::fprintf(stderr, "fixture did not start\n");
    return 1;
  }

  auto t0 = Clock::now();
  LiveReader reader(child.pid());
  reader.discover();
  const double discover_us = us_since(t0);
  LiveOptions plain_names;
  plain_names.demangle = false;
  t0 = Clock::now();
  LiveReader no_demangle(child.pid(), plain_names);
  no_demangle.discover();
  const double discover_plain_us = us_since(t0);
  t0 = Clock::now();
  Snapshot first = reader.snapshot();
  const double first_us = us_since(t0);
  if (first.modules.size() != 1 || first.modules[0].functions.size() != 10001) {
    std::fprintf(stderr, "unexpected snapshot: %zu modules\n", first.modules.size());
    return 1;
  }
  int wrong = 0;
  for (const Function& f : first.modules[0].functions) {
    if (f.name != "main" && f.call_count != std::stoull(f.name.substr(2)) % 7) wrong++;
  }
  if (wrong) {
    std::fprintf(stderr, "%d functions with wrong counts\n", wrong);
    return 1;
  }

  // Warm snapshots: process_vm_readv + decode + Module construction (what a periodic snapshot costs).
  std::vector<double> snap_us, read_only_us, decode_only_us;
  for (int i = 0; i < runs; i++) {
    t0 = Clock::now();
    Snapshot s = reader.snapshot();
    snap_us.push_back(us_since(t0));
  }
  // The same split into its two halves.
  const Module& m = first.modules[0];
  std::vector<uint8_t> buf(m.raw_section_size);
  const Map map = load_map(binary);
  for (int i = 0; i < runs; i++) {
    iovec local{buf.data(), buf.size()};
    iovec remote{reinterpret_cast<void*>(m.load_bias + m.raw_section_address), buf.size()};
    t0 = Clock::now();
    const ssize_t n = process_vm_readv(child.pid(), &local, 1, &remote, 1, 0);
    read_only_us.push_back(us_since(t0));
    if (n != static_cast<ssize_t>(buf.size())) return 1;
    t0 = Clock::now();
    Module d = decode_records(buf, map);
    decode_only_us.push_back(us_since(t0));
  }

  std::printf("MIP live snapshot, %zu functions, raw section %zu bytes, %d runs\n", m.functions.size(),
              static_cast<size_t>(m.raw_section_size), runs);
  std::printf("%-34s %8.1f us\n", "discover (maps + ELF + map parse)", discover_us);
  std::printf("%-34s %8.1f us\n", "discover without demangling", discover_plain_us);
  std::printf("%-34s %8.1f us\n", "first snapshot", first_us);
  print("snapshot (read + decode)", stats(snap_us));
  print("  process_vm_readv only", stats(read_only_us));
  print("  decode only", stats(decode_only_us));

  uint64_t size_mip = 0, size_plain = 0;
  auto mip = section_sizes(binary, &size_mip);
  auto plain = section_sizes(test::fixture("mip_many_plain"), &size_plain);
  std::printf("size: file %lu bytes instrumented vs %lu plain (+%.1f%%)\n",
              static_cast<unsigned long>(size_mip), static_cast<unsigned long>(size_plain),
              100.0 * (double(size_mip) - double(size_plain)) / double(size_plain));
  std::printf(
      "size: __llvm_mipraw %lu bytes (loaded, %.1f per function), __llvm_mipmap %lu bytes (file only, %.1f "
      "per function)\n",
      static_cast<unsigned long>(mip["__llvm_mipraw"]), double(mip["__llvm_mipraw"]) / 10001.0,
      static_cast<unsigned long>(mip["__llvm_mipmap"]), double(mip["__llvm_mipmap"]) / 10001.0);
  std::printf(
      "size: .text %lu bytes instrumented vs %lu plain (+%lu, %.1f per function for the entry probe)\n",
      static_cast<unsigned long>(mip[".text"]), static_cast<unsigned long>(plain[".text"]),
      static_cast<unsigned long>(mip[".text"] - plain[".text"]),
      double(mip[".text"] - plain[".text"]) / 10001.0);
  child.close_stdin();
  child.wait_exit();
  return 0;
}
