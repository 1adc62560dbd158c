// UnitCallSites: one compile unit's DWARF call sites (DW_TAG_call_site, DW_TAG_GNU_call_site) by
// return address, each with the code of the function it names, for telling tail calls apart.
#pragma once

#include <elfutils/libdw.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hpd {

// An address range [first, second) of a function's code (ELF vaddrs).
using CodeRange = std::pair<uint64_t, uint64_t>;

// Read with libdw in two steps, so that a unit costs little more than its top-level DIEs: when
// made, the code of the unit's out-of-line subprograms (its top-level DW_TAG_subprogram DIEs with
// addresses), keyed by the DIEs a call site may name; on the first question about a function, the
// call sites in its subtree.
class UnitCallSites {
 public:
  UnitCallSites(Dwarf* dwarf, uint64_t cu_die_offset);

  // The code of the function the call returning to `return_pc` calls: that of the out-of-line
  // subprogram its DW_AT_call_origin (DW_AT_abstract_origin for DW_TAG_GNU_call_site) is, or is
  // named by through DW_AT_abstract_origin or DW_AT_specification (a concrete instance of an
  // abstract or declared function; clones of one function together), hot and cold parts. Empty
  // when unknown: no call site returns there, the call is indirect (DW_AT_call_target), or the
  // function named has no code in this unit (declared here, defined in another unit or module).
  std::vector<CodeRange> callee_code(uint64_t return_pc);

  size_t memory_bytes() const;

 private:
  struct Function {
    uint64_t low, high;
    uint64_t die_offset;
  };
  void read_call_sites(uint64_t function_die);

  Dwarf* dwarf_;
  std::vector<Function> functions_;                               // one per range, sorted by low
  std::unordered_map<uint64_t, std::vector<CodeRange>> code_of_;  // DIE offset -> code ranges
  std::unordered_map<uint64_t, bool> read_;                       // function DIEs whose call sites were read
  std::unordered_map<uint64_t, uint64_t> callee_of_;  // return pc -> DIE named as callee; 0 = not known
};

}  // namespace hpd
