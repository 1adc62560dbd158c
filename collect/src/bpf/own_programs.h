// The BPF programs this process has loaded, as /proc/kallsyms names their JIT-compiled functions: a
// table of the kernel's symbols read while they were being loaded (a launched command's recording reads
// it beside the programs' load) is completed from them, and a table kept from before is checked against
// them (RecordResult::kernel_code_named). Internal to the eBPF backend.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace hpd {

class KernelSymbols;

namespace bpf_recording {

// A loaded program's JIT-compiled function (its main one or a subprogram): its kernel addresses
// [start, end), its tag, which the kernel's name for it carries, and that name as a read of
// /proc/kallsyms gives it ("bpf_prog_<tag>_<function> [bpf]"; empty when not asked for or not known).
struct JitedFunction {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t tag = 0;  // the 8 tag bytes, in order, as one big-endian number; 0 when the kernel gave none
  std::string name;
};

// The JIT-compiled functions of the loaded program `fd`, or none (not loaded, not JIT-compiled, or the
// addresses hidden). `named`: with the kernel's names for them (the program's BTF, read from the kernel).
std::vector<JitedFunction> jited_functions(int fd, bool named = false);

// Every function, named, of every program this process holds open now (its descriptors of BPF programs:
// a recording's skeleton, the call counter's, those loaded ahead for the next recording).
std::vector<JitedFunction> this_process_programs();

// Whether `symbols` names the whole of `f` as /proc/kallsyms would now: one symbol that starts where it
// does and reaches its end, named bpf_prog_<its tag>_..., that is, the same code at the same address
// when the table was read.
bool names_function(const KernelSymbols& symbols, const JitedFunction& f);

// Adds to `symbols` each named function of `functions` it does not name (names_function): a table read
// before or while they were loaded then names them as a read now would. Returns the ranges added.
std::vector<std::pair<uint64_t, uint64_t>> add_missing_functions(KernelSymbols& symbols,
                                                                 std::span<const JitedFunction> functions);

}  // namespace bpf_recording
}  // namespace hpd
