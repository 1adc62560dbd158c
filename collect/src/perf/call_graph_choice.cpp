// Frame-pointer detection from function prologues, and the --call-graph auto decision.
#include "hpd/collect/call_graph_choice.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string_view>

#include "hpd/base/elf.h"
#include "hpd/base/proc_files.h"
#include "hpd/base/proc_maps.h"
#include "proc/program_modules.h"

namespace hpd {

namespace {

int32_t read_s32(const uint8_t* p) {
  int32_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Function starts from .eh_frame_hdr's binary-search table, in the one encoding linkers write
// (datarel|sdata4 pairs after a udata4 count). Empty for anything else.
std::vector<uint64_t> starts_from_eh_frame_hdr(Elf_Scn* scn, const GElf_Shdr& shdr) {
  std::vector<uint64_t> starts;
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (data == nullptr || data->d_buf == nullptr || data->d_size < 4) return starts;
  const auto* p = static_cast<const uint8_t*>(data->d_buf);
  const size_t size = data->d_size;
  constexpr uint8_t kUdata4 = 0x03, kSdata4 = 0x0b, kPcrelSdata4 = 0x1b, kDatarelSdata4 = 0x3b;
  if (p[0] != 1 || p[2] != kUdata4 || p[3] != kDatarelSdata4) return starts;
  if (p[1] != kUdata4 && p[1] != kSdata4 && p[1] != kPcrelSdata4) return starts;
  if (size < 12) return starts;
  uint32_t count = 0;
  std::memcpy(&count, p + 8, sizeof count);
  const size_t available = (size - 12) / 8;
  count = static_cast<uint32_t>(std::min<size_t>(count, available));
  starts.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    starts.push_back(shdr.sh_addr + static_cast<uint64_t>(static_cast<int64_t>(read_s32(p + 12 + 8 * i))));
  }
  return starts;
}

// Rust's standard library ships precompiled with frame pointers, and it is most of a small Rust
// binary's functions; the program's own code, built without them, would be outvoted.
bool is_std_crate(std::string_view crate) {
  return crate == "std" || crate == "core" || crate == "alloc" || crate == "hashbrown" ||
         crate == "rustc_demangle" || crate == "std_detect" || crate == "panic_unwind" || crate == "gimli" ||
         crate == "addr2line" || crate == "miniz_oxide" || crate == "object" || crate == "memchr" ||
         crate == "adler" || crate == "adler2" || crate == "___rustc" || crate == "__rustc" ||
         crate == "unwind" || crate == "libc";
}

// The crate of a Rust symbol: legacy _ZN<len><crate>..., or v0 _R... whose first crate root is
// C[s<base62>_]<len>[_]<crate> (v0 puts a '_' between the length and a name that starts with a
// digit or '_': rustc's allocator shims are crate "__rustc", spelled "7___rustc").
std::string_view rust_crate(std::string_view name) {
  auto length_prefixed = [](std::string_view s, bool v0) -> std::string_view {
    size_t len = 0, i = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9' && len < 1000) len = len * 10 + size_t(s[i++] - '0');
    if (i == 0) return {};
    if (v0 && i < s.size() && s[i] == '_') ++i;
    if (i + len > s.size()) return {};
    return s.substr(i, len);
  };
  if (name.starts_with("_ZN")) return length_prefixed(name.substr(3), false);
  if (!name.starts_with("_R")) return {};
  for (size_t at = name.find('C', 2); at != std::string_view::npos; at = name.find('C', at + 1)) {
    std::string_view rest = name.substr(at + 1);
    if (rest.starts_with("s")) {
      const size_t underscore = rest.find('_');
      if (underscore == std::string_view::npos) return {};
      rest = rest.substr(underscore + 1);
    }
    if (!rest.empty() && rest[0] >= '0' && rest[0] <= '9') return length_prefixed(rest, true);
  }
  return {};
}

// Code whose frame setup says nothing about how the program was compiled: crt's helpers (never a
// frame), and Rust's standard library, which ships precompiled with frame pointers and is most of a
// small Rust binary's functions (the program's own code would be outvoted).
bool is_not_the_programs_code(const char* name) {
  static constexpr std::string_view kCrt[] = {"_start",
                                              "_init",
                                              "_fini",
                                              "deregister_tm_clones",
                                              "register_tm_clones",
                                              "__do_global_dtors_aux",
                                              "frame_dummy",
                                              "_dl_relocate_static_pie",
                                              "__libc_csu_init",
                                              "__libc_csu_fini"};
  const std::string_view n(name);
  for (const std::string_view crt : kCrt) {
    if (n == crt) return true;
  }
  // Rust's standard library also exports a few unmangled functions (its personality routine, the
  // allocator and panic entry points of older releases).
  if (n == "rust_eh_personality" || n == "rust_begin_unwind" || n == "rust_panic" ||
      n.starts_with("__rust_") || n.starts_with("__rdl_") || n.starts_with("__rg_"))
    return true;
  return is_std_crate(rust_crate(n));
}

void starts_from_symbols(Elf* elf, Elf_Scn* scn, const GElf_Shdr& shdr, std::vector<uint64_t>& starts,
                         std::vector<uint64_t>& excluded) {
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (data == nullptr || shdr.sh_entsize == 0) return;
  const size_t n = shdr.sh_size / shdr.sh_entsize;
  for (size_t i = 0; i < n; ++i) {
    GElf_Sym sym;
    if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) continue;
    if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_value == 0 || sym.st_shndx == SHN_UNDEF) continue;
    const char* name = elf_strptr(elf, shdr.sh_link, sym.st_name);
    (name != nullptr && is_not_the_programs_code(name) ? excluded : starts).push_back(sym.st_value);
  }
}

// The length of a profiling hook at `code` that -pg -mfentry (or -fpatchable-function-entry) puts
// before the prologue, or 0: call __fentry__ (e8 rel32; ff 15 disp32 through the GOT in PIE
// code), or the 5-byte nop it is built or patched into (-mnop-mcount, ftrace-style patching).
size_t entry_hook_length(const uint8_t* code, size_t n) {
  if (n >= 5 && code[0] == 0xe8) return 5;
  if (n >= 6 && code[0] == 0xff && code[1] == 0x15) return 6;
  if (n >= 5 && code[0] == 0x0f && code[1] == 0x1f && code[2] == 0x44 && code[3] == 0x00 && code[4] == 0x00)
    return 5;
  return 0;
}

// push %rbp (after an optional endbr64 and profiling hook), then mov %rsp,%rbp (either encoding)
// among the next bytes: gcc -O2 schedules independent instructions between the two (up to 32 bytes
// seen in the tests' cpu_split), clang puts the mov right after the push. gcc may also load a global
// before the push: such a function is not counted (a leaf of cpu_split that read its length from a
// global was not), which the threshold of a third leaves room for. A function built without frame
// pointers that saves %rbp as an ordinary register (rustc -O pushes it first of the callee-saved
// ones) copies some other register into it, or nothing.
bool sets_up_frame(const uint8_t* code, size_t n) {
  size_t i = 0;
  if (n >= 4 && code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && code[3] == 0xfa) i = 4;
  i += entry_hook_length(code + i, n - i);
  if (n < i + 4 || code[i] != 0x55) return false;
  for (size_t at = i + 1; at + 3 <= n; ++at) {
    const uint8_t* mov = code + at;
    if (mov[0] == 0x48 && ((mov[1] == 0x89 && mov[2] == 0xe5) || (mov[1] == 0x8b && mov[2] == 0xec)))
      return true;
  }
  return false;
}

}  // namespace

bool FramePointerProbe::built_with_frame_pointers() const {
  // Compilers told to keep frame pointers set one up in every function that calls others (gcc skips
  // leaves unless -mno-omit-leaf-frame-pointer), which is most of them; without the option hardly any
  // do (only functions with variable-sized or over-aligned stack frames: a few percent). A third
  // separates the two with room on both sides.
  return functions_checked > 0 && with_frame_setup * 3 >= functions_checked;
}

FramePointerProbe probe_frame_pointers(const std::string& path, size_t max_functions) {
  FramePointerProbe probe;
  const OpenedElf elf = OpenedElf::open(path, ELF_C_READ_MMAP);
  if (elf.open_errno() != 0) {
    probe.error = std::string("cannot open it: ") + std::strerror(elf.open_errno());
    return probe;
  }
  GElf_Ehdr ehdr;
  if (!elf || gelf_getehdr(elf.get(), &ehdr) == nullptr) {
    probe.error = "not an ELF file";
    return probe;
  }
  if (ehdr.e_machine != EM_X86_64) {
    probe.error = "not an x86-64 executable";
    return probe;
  }
  // Code is read from the executable segments only.
  std::vector<ElfSegment> segments = elf.view().load_segments();
  std::erase_if(segments, [](const ElfSegment& s) { return !s.executable; });
  if (!elf.view().has_section_names()) {
    probe.error = "no section name table";
    return probe;
  }
  std::vector<uint64_t> starts;
  std::vector<uint64_t> symbol_starts;
  std::vector<uint64_t> excluded;
  uint64_t text_begin = 0, text_end = 0;
  for (const ElfSection& section : elf.view().sections()) {
    Elf_Scn* scn = section.scn;
    const GElf_Shdr& shdr = section.header;
    const char* name = section.name;
    if (name == nullptr) continue;
    if (std::strcmp(name, ".eh_frame") == 0 && shdr.sh_type != SHT_NOBITS && shdr.sh_size > 0) {
      probe.has_eh_frame = true;
    } else if (std::strcmp(name, ".text") == 0) {
      text_begin = shdr.sh_addr;
      text_end = shdr.sh_addr + shdr.sh_size;
    } else if (std::strcmp(name, ".eh_frame_hdr") == 0 && shdr.sh_type != SHT_NOBITS) {
      starts = starts_from_eh_frame_hdr(scn, shdr);
    } else if (shdr.sh_type == SHT_SYMTAB || shdr.sh_type == SHT_DYNSYM) {
      starts_from_symbols(elf.get(), scn, shdr, symbol_starts, excluded);
    }
  }
  // Both sources: .eh_frame_hdr covers stripped files, symbols cover code built without unwind tables.
  starts.insert(starts.end(), symbol_starts.begin(), symbol_starts.end());
  std::sort(excluded.begin(), excluded.end());
  std::erase_if(starts, [&](uint64_t a) { return std::binary_search(excluded.begin(), excluded.end(), a); });
  // Compiled functions only: PLT stubs have CFI too but never a frame.
  if (text_end > text_begin) {
    std::erase_if(starts, [&](uint64_t a) { return a < text_begin || a >= text_end; });
  }
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  probe.readable = true;
  if (starts.empty() || max_functions == 0) return probe;
  // Evenly spread over the file, so that one library statically linked in does not decide alone.
  const size_t step = std::max<size_t>(1, starts.size() / max_functions);
  for (size_t i = 0; i < starts.size() && probe.functions_checked < max_functions; i += step) {
    const auto offset = offset_of_vaddr(segments, starts[i]);
    if (!offset) continue;
    uint8_t code[64];
    const ssize_t n = ::pread(elf.fd(), code, sizeof code, static_cast<off_t>(*offset));
    if (n < 8) continue;
    ++probe.functions_checked;
    probe.with_frame_setup += sets_up_frame(code, static_cast<size_t>(n)) ? 1 : 0;
  }
  return probe;
}

CallGraphTarget call_graph_target_of(const std::string& executable) {
  CallGraphTarget target{executable, likely_modules(executable)};
  std::erase(target.libraries, executable);
  return target;
}

CallGraphTarget call_graph_target_of(int32_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  CallGraphTarget target{proc + "/exe", {}};
  const std::string exe = read_exe(pid);
  for (const MapsEntry& m : read_proc_maps(pid)) {
    if (!m.executable || !m.is_file() || m.path == exe) continue;
    const std::string path = proc + "/root" + m.path;
    if (std::find(target.libraries.begin(), target.libraries.end(), path) == target.libraries.end())
      target.libraries.push_back(path);
  }
  return target;
}

namespace {

// A file as the user knows it: without the /proc/PID/root a running process's files are read through.
std::string shown(const std::string& path) {
  if (!path.starts_with("/proc/")) return path;
  const size_t root = path.find("/root/");
  if (root == std::string::npos || path.find_first_not_of("0123456789", 6) != root) return path;
  return path.substr(root + 5);
}

std::string counts_of(const FramePointerProbe& probe) {
  return std::to_string(probe.with_frame_setup) + " of " + std::to_string(probe.functions_checked) +
         " functions checked set up a frame";
}

// Code a frame-pointer walk cannot pass: its functions keep no frame, and CFI can.
bool needs_dwarf(const FramePointerProbe& probe) {
  return probe.readable && probe.functions_checked > 0 && !probe.built_with_frame_pointers() &&
         probe.has_eh_frame;
}

}  // namespace

CallGraphChoice choose_call_graph(const std::vector<CallGraphTarget>& targets) {
  CallGraphChoice choice;
  std::string fp_notes;
  std::set<std::string> libraries_seen;
  for (const CallGraphTarget& target : targets) {
    const std::string& exe = target.executable;
    const FramePointerProbe probe = probe_frame_pointers(exe);
    std::string note;
    if (!probe.readable) {
      note = exe + " could not be inspected (" + probe.error + ")";
    } else if (probe.functions_checked == 0) {
      note = exe + " has no functions to inspect";
    } else if (probe.built_with_frame_pointers()) {
      note = exe + " was built with frame pointers (" + counts_of(probe) + ")";
    } else if (!probe.has_eh_frame) {
      note = exe + " has neither frame pointers nor .eh_frame (" + counts_of(probe) + ")";
    } else {
      choice.mode = CallGraph::kDwarf;
      choice.reason = exe + " was built without frame pointers (" + counts_of(probe) + ")";
      return choice;
    }
    // Its libraries: one without frame pointers hides every caller of its functions (qsort's
    // comparator, strtod) from a frame-pointer walk, whatever the executable was built with.
    size_t unreadable = 0;
    for (const std::string& library : target.libraries) {
      if (!libraries_seen.insert(library).second) continue;
      const FramePointerProbe lib = probe_frame_pointers(library);
      unreadable += lib.readable ? 0 : 1;
      if (needs_dwarf(lib)) {
        choice.mode = CallGraph::kDwarf;
        choice.reason = note + ", but " + shown(library) + ", whose code it runs, was not (" +
                        counts_of(lib) + "): a frame-pointer walk would lose the callers of its functions";
        return choice;
      }
    }
    if (!target.libraries.empty()) {
      note += "; none of its " + std::to_string(target.libraries.size()) +
              " libraries lacks frame pointers where CFI could unwind";
      if (unreadable > 0) note += " (" + std::to_string(unreadable) + " could not be inspected)";
    }
    if (!fp_notes.empty()) fp_notes += "; ";
    fp_notes += note;
  }
  choice.mode = CallGraph::kFp;
  choice.reason = fp_notes.empty() ? "no executable to inspect" : fp_notes;
  return choice;
}

CallGraphChoice choose_call_graph(const std::vector<std::string>& executables) {
  std::vector<CallGraphTarget> targets;
  targets.reserve(executables.size());
  for (const std::string& exe : executables) targets.push_back(call_graph_target_of(exe));
  return choose_call_graph(targets);
}

}  // namespace hpd
