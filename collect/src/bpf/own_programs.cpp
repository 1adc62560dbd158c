// The BPF programs this process has loaded, named as /proc/kallsyms names them (own_programs.h).
#include "bpf/own_programs.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "hpd/symbolizer/symbolizer.h"

namespace hpd::bpf_recording {
namespace {

std::string tag_prefix(uint64_t tag) {
  char prefix[32];
  std::snprintf(prefix, sizeof prefix, "bpf_prog_%016llx", static_cast<unsigned long long>(tag));
  return prefix;
}

// The kernel's name for a function (bpf_get_prog_name): its function's name in the program's BTF when
// the program has function records, else the program's own (short) name for its main function.
std::string kernel_name(uint64_t tag, const char* function) {
  std::string name = tag_prefix(tag);
  if (function != nullptr && function[0] != '\0') {
    name += '_';
    name += function;
  }
  return name + " [bpf]";
}

struct BtfFree {
  void operator()(btf* b) const { btf__free(b); }
};
using BtfPtr = std::unique_ptr<btf, BtfFree>;

// The programs' BTF by id, each read from the kernel once (a skeleton's programs share one).
using BtfById = std::map<uint32_t, BtfPtr>;

std::vector<JitedFunction> functions_of(int fd, bool named, BtfById& types_by_id) {
  std::vector<JitedFunction> out;
  if (fd < 0) return out;
  bpf_prog_info info{};
  uint32_t length = sizeof info;
  if (bpf_obj_get_info_by_fd(fd, &info, &length) != 0 || info.nr_jited_ksyms == 0 ||
      info.nr_jited_func_lens != info.nr_jited_ksyms)
    return out;
  std::vector<uint64_t> starts(info.nr_jited_ksyms);
  std::vector<uint32_t> lengths(info.nr_jited_ksyms);
  std::vector<uint8_t> tags(info.nr_prog_tags == info.nr_jited_ksyms ? info.nr_prog_tags * BPF_TAG_SIZE : 0);
  std::vector<bpf_func_info> functions(named && info.btf_id != 0 ? info.nr_func_info : 0);
  bpf_prog_info asked{};
  asked.nr_jited_ksyms = static_cast<uint32_t>(starts.size());
  asked.jited_ksyms = reinterpret_cast<uintptr_t>(starts.data());
  asked.nr_jited_func_lens = static_cast<uint32_t>(lengths.size());
  asked.jited_func_lens = reinterpret_cast<uintptr_t>(lengths.data());
  if (!tags.empty()) {
    asked.nr_prog_tags = info.nr_prog_tags;
    asked.prog_tags = reinterpret_cast<uintptr_t>(tags.data());
  }
  if (!functions.empty()) {
    asked.nr_func_info = static_cast<uint32_t>(functions.size());
    asked.func_info_rec_size = sizeof(bpf_func_info);
    asked.func_info = reinterpret_cast<uintptr_t>(functions.data());
  }
  length = sizeof asked;
  if (bpf_obj_get_info_by_fd(fd, &asked, &length) != 0) return out;
  // The program's BTF, for its functions' names, as the kernel holds it.
  const btf* types = nullptr;
  if (!functions.empty() && asked.nr_func_info == functions.size()) {
    BtfPtr& read = types_by_id[info.btf_id];
    if (!read) read.reset(btf__load_from_kernel_by_id(info.btf_id));
    types = read.get();
  }
  for (size_t i = 0; i < starts.size() && i < asked.nr_jited_ksyms; ++i) {
    if (starts[i] == 0 || lengths[i] == 0) continue;
    JitedFunction f{starts[i], starts[i] + lengths[i], 0, {}};
    // The main function is named by the whole program's tag, a subprogram by its own.
    const uint8_t* tag = i == 0 ? info.tag : tags.empty() ? nullptr : &tags[i * BPF_TAG_SIZE];
    for (size_t b = 0; tag != nullptr && b < BPF_TAG_SIZE; ++b) f.tag = f.tag << 8 | tag[b];
    if (named && f.tag != 0) {
      const btf_type* type =
          types != nullptr && i < functions.size() ? btf__type_by_id(types, functions[i].type_id) : nullptr;
      if (type != nullptr)
        f.name = kernel_name(f.tag, btf__name_by_offset(types, type->name_off));
      else if (i == 0 && functions.empty())
        f.name = kernel_name(f.tag, info.name);
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace

std::vector<JitedFunction> jited_functions(int fd, bool named) {
  BtfById types;
  return functions_of(fd, named, types);
}

std::vector<JitedFunction> this_process_programs() {
  std::vector<JitedFunction> out;
  BtfById types;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  const int own = ::dirfd(dir);
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == own) continue;
    char target[64];
    const ssize_t n = ::readlinkat(own, entry->d_name, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (std::strcmp(target, "anon_inode:bpf-prog") != 0) continue;
    for (JitedFunction& f : functions_of(static_cast<int>(fd), true, types)) out.push_back(std::move(f));
  }
  ::closedir(dir);
  return out;
}

bool names_function(const KernelSymbols& symbols, const JitedFunction& f) {
  if (f.tag == 0) return false;
  const Location at = symbols.resolve(f.start);
  if (!at.found || at.symbol_address + symbols.base() != f.start || at.symbol_size < f.end - f.start)
    return false;
  return at.symbol.starts_with(tag_prefix(f.tag) + "_") || at.symbol == tag_prefix(f.tag) + " [bpf]";
}

std::vector<std::pair<uint64_t, uint64_t>> add_missing_functions(KernelSymbols& symbols,
                                                                 std::span<const JitedFunction> functions) {
  std::vector<std::pair<uint64_t, uint64_t>> added;
  for (const JitedFunction& f : functions) {
    if (f.name.empty() || symbols.empty() || names_function(symbols, f)) continue;
    symbols.replace_range(f.start, f.end, f.name);
    added.emplace_back(f.start, f.end);
  }
  return added;
}

}  // namespace hpd::bpf_recording
