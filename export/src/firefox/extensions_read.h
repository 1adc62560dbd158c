// The read halves of hpd's extensions of the Firefox format (firefox_format.h), each defined in the
// extension's file beside its write half (extensions_write.h): firefox/calls_extension.cpp,
// latency_extension.cpp, mip_extension.cpp, off_cpu_extension.cpp, tail_call_extension.cpp,
// allocations_extension.cpp.
// firefox_reader.cpp calls them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "firefox/json_path.h"
#include "firefox/json_read.h"
#include "hpd/model/profile.h"

namespace hpd::firefox {

// Calls (calls_extension.cpp): a calls track read into p.call_edges (and its latency markers into
// p.call_latency); `stack_map`: the stack table's rows as p's stacks.
void read_calls_thread(Profile& p, const nlohmann::json& t, const JsonPath& where,
                       const std::vector<uint32_t>& stack_map);

// Call latency (latency_extension.cpp): marker `i` of the calls track of `pid` into p.call_latency.
void read_latency_marker(Profile& p, const Table& markers, size_t i, int32_t pid);

// MIP (mip_extension.cpp): marker `i` of a thread of `pid` into p.mip_counts; `func_map` and
// `string_values`: the func table's rows as p's functions, and the string array.
void read_mip_marker(Profile& p, const Table& markers, size_t i, int32_t pid,
                     const std::vector<uint32_t>& func_map,
                     const std::vector<const std::string*>& string_values);

// Off-CPU (off_cpu_extension.cpp): marker `i` of a thread whose samples are `samples`; false when it
// is not an off-CPU marker.
bool read_off_cpu_marker(const Table& markers, size_t i, std::vector<Sample>& samples);

// Tail calls (tail_call_extension.cpp): marker `i` marks the stacks it lists as tail-call edges;
// `stack_map`: the stack table's rows as p's stacks, `leaf_rows`: the rows of off-CPU leaf frames
// (no stack of p), `string_values`: the string array.
void read_tail_call_marker(Profile& p, const Table& markers, size_t i, const std::vector<uint32_t>& stack_map,
                           const std::vector<bool>& leaf_rows,
                           const std::vector<const std::string*>& string_values);

// Allocations (allocations_extension.cpp): a meta.extra entry of the allocation sampling's section
// into p.meta.alloc (other labels are left alone); the nativeAllocations table of thread object `t`
// (pid `pid`, tid `tid`), if it has one, appended to p.allocations, each deallocation marking the
// allocation of its address before it freed; then, once every thread is read, p.allocations in time
// order (the log's, as the recording had them, up to allocations logged at the same time).
void read_allocation_extra(RawAllocStats& alloc, const std::string& label, uint64_t count);
void read_native_allocations(Profile& p, const nlohmann::json& t, const JsonPath& where, int32_t pid,
                             int32_t tid, const std::vector<uint32_t>& stack_map);
void order_allocations(Profile& p);

}  // namespace hpd::firefox
