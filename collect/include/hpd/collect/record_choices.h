// The choices of a recording, one set from the engine up: RecordOptions (hpd/collect/recorder.h) holds
// them, and so do RecordRequest (hpd/session/record_request.h), hpctl's flags and hpd's protocol,
// which carry them as the words below (never as numbers, so the JSON does not depend on the order).
// No dependency beyond the standard library: library hpd_record_choices, which the protocol's
// vocabulary (hpd_session_request) links without the engine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpd {

// auto|on|off: RecordOptions::kernel and ::off_cpu (--kernel/--no-kernel, --off-cpu/--no-off-cpu) and
// RecordRequest::mip (--mip/--no-mip). Auto leaves the choice to the recorder (what the permissions,
// the backend and the targets allow; RecordOptions says what each one's auto does).
enum class Switch { kAuto, kOn, kOff };

// -e: which clock drives the samples (thread CPU time or wall time on a CPU).
enum class SamplingEvent { kTaskClock, kCpuClock };

// -b. kAuto: the eBPF backend when it is available (privileges, kernel BTF, built in), else perf_event.
enum class Backend { kAuto, kBpf, kPerf };

// --call-graph: how user call stacks are captured. kCfi (eBPF only): unwound inside the eBPF programs,
// on and off the CPU, with tables compiled from each module's .eh_frame/.debug_frame (frame pointers
// for modules without CFI). kFp: a frame-pointer walk, plus the caller of a frameless leaf (read from
// a small copy of the stack top). kDwarf: a copy of the top of the user stack and the user registers
// per on-CPU sample, unwound in user space from DWARF CFI (either backend; the eBPF backend's off-CPU
// stacks are frame-pointer walks then). kAuto: cfi with the eBPF backend; with perf_event, dwarf when
// a target's executable was built without frame pointers, else fp (always fp for --all and --cgroup);
// hpctl decides it for a command it starts for hpd.
enum class CallGraph { kAuto, kFp, kDwarf, kCfi };

// --calls-counter: what counts the calls of RecordOptions::count_calls (--calls).
enum class CallCounterKind : uint8_t { kAuto = 0, kRuntime = 1, kUprobes = 2 };

// The words of the command line and of the protocol for each choice ("auto", "on", "cfi", ...).
const char* to_string(Switch value);
const char* to_string(SamplingEvent value);
const char* to_string(Backend value);
const char* to_string(CallGraph value);
const char* to_string(CallCounterKind value);

// The choice a word names; nullopt for any other word (the caller says which words are allowed, and
// `*_words()` lists them for its message).
std::optional<Switch> parse_switch(std::string_view word);
std::optional<SamplingEvent> parse_sampling_event(std::string_view word);
std::optional<Backend> parse_backend(std::string_view word);
std::optional<CallGraph> parse_call_graph(std::string_view word);
std::optional<CallCounterKind> parse_call_counter(std::string_view word);
// "auto, on or off": the words of one choice, for error messages.
std::string switch_words();
std::string sampling_event_words();
std::string backend_words();
std::string call_graph_words();
std::string call_counter_words();
// The same words one by one, in that order: the set a command-line parser checks a value against
// (hpctl's CLI::IsMember, whose refusal lists them: "not in {auto,bpf,perf}").
std::vector<std::string> sampling_event_word_list();
std::vector<std::string> backend_word_list();
std::vector<std::string> call_graph_word_list();
std::vector<std::string> call_counter_word_list();

}  // namespace hpd
