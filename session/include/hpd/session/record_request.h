// RecordRequest: one recording as hpctl's command line and hpd's protocol both ask for it, typed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpd::session {

// The choices below are the recorder's (hpd/collect/recorder.h: KernelFrames and OffCpu for Switch,
// Backend, CallGraph, CallCounterKind), in the recorder's order (record_pipeline.cpp asserts it); they
// travel as words (to_string below), never as numbers, so the JSON does not depend on the order.

// auto|on|off: --kernel/--no-kernel, --off-cpu/--no-off-cpu, --mip/--no-mip. Auto leaves the choice
// to the recorder (what the permissions and the backend allow).
enum class Switch { kAuto, kOn, kOff };
// -e: which clock drives the samples (thread CPU time or wall time on a CPU).
enum class SamplingEvent { kTaskClock, kCpuClock };
// -b: auto picks eBPF when permitted, else perf_event.
enum class BackendChoice { kAuto, kBpf, kPerf };
// --call-graph: how user stacks are walked; auto is decided by the recorder (or by hpctl for a command
// it starts for hpd).
enum class CallGraphMode { kAuto, kFp, kDwarf, kCfi };
// --calls-counter: which counter counts calls with --calls.
enum class CallCounterChoice { kAuto, kRuntime, kUprobes };

struct RecordRequest {
  std::vector<int32_t> pids;
  std::vector<std::string> command;        // launched and recorded; hpd never gets one (hpctl starts it)
  double duration_s = 0;                   // seconds; 0 = until the targets exit or a stop
  uint32_t frequency_hz = 999;             // samples per second per thread
  std::string output = "profile.json.gz";  // a path; hpd only reads the format from its suffix
  SamplingEvent event = SamplingEvent::kTaskClock;
  Switch kernel = Switch::kAuto;
  BackendChoice backend = BackendChoice::kAuto;
  bool all = false;    // every process of the system
  std::string cgroup;  // a cgroup v2 path, or "" for none
  Switch off_cpu = Switch::kAuto;
  uint32_t off_cpu_min_us = 0;  // off-CPU intervals shorter than this are not recorded
  bool follow_children = true;
  CallGraphMode call_graph = CallGraphMode::kAuto;
  uint32_t stack_size = 0;  // dwarf: bytes of user stack copied per sample (0 = the recorder's default)
  uint32_t cfi_rows = 0;    // cfi: rows of the eBPF CFI row map (0 = the recorder's default)
  Switch mip = Switch::kAuto;
  bool calls = false;  // exact call counts through mcount/__fentry__
  CallCounterChoice calls_counter = CallCounterChoice::kAuto;
  // --call-latency: with uprobes, also time the functions probed at their first instruction (a
  // return probe each: more cost per call, and sampled stacks lose their root while one is pending).
  // Travels as "call_latency"; a client that does not send it gets counting only.
  bool call_latency = false;
  // Sampled allocations (--alloc, --alloc-mean BYTES; 0 = the default mean). For --pid targets they
  // travel as "alloc" and "alloc_mean" (hpd probes the targets' allocator); for a launched command
  // hpctl makes the runtime's log, hands it over ("alloc_log") and sends "alloc": false.
  bool alloc = false;
  uint64_t alloc_mean = 0;
};

// The words of the command line and of the protocol for each choice ("auto", "on", "cfi", ...).
const char* to_string(Switch value);
const char* to_string(SamplingEvent value);
const char* to_string(BackendChoice value);
const char* to_string(CallGraphMode value);
const char* to_string(CallCounterChoice value);

// The choice a word names; nullopt for any other word (the caller says which words are allowed, and
// `*_words()` lists them for its message).
std::optional<Switch> parse_switch(std::string_view word);
std::optional<SamplingEvent> parse_sampling_event(std::string_view word);
std::optional<BackendChoice> parse_backend(std::string_view word);
std::optional<CallGraphMode> parse_call_graph(std::string_view word);
std::optional<CallCounterChoice> parse_call_counter(std::string_view word);
// "auto, on or off": the words of one choice, for error messages.
std::string switch_words();
std::string sampling_event_words();
std::string backend_words();
std::string call_graph_words();
std::string call_counter_words();

}  // namespace hpd::session
