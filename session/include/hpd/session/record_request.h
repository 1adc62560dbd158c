// RecordRequest: one recording as hpctl's command line and hpd's protocol both ask for it, typed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hpd/collect/record_choices.h"
#include "hpd/collect/record_target.h"

namespace hpd::session {

// The target (RecordTarget) and the choices (Switch, SamplingEvent, Backend, CallGraph, CallCounterKind)
// and their words are the recorder's own (hpd/collect/record_target.h, record_choices.h): RecordOptions
// takes them as they are.
struct RecordRequest {
  // What is recorded ("pids", "command", "all", "cgroup" in the protocol): a command is launched and
  // recorded by hpctl; hpd never gets one (hpctl starts it and sends its pid).
  RecordTarget target;
  double duration_s = 0;                   // seconds; 0 = until the targets exit or a stop
  uint32_t frequency_hz = 999;             // samples per second per thread
  std::string output = "profile.json.gz";  // a path; hpd only reads the format from its suffix
  SamplingEvent event = SamplingEvent::kTaskClock;
  Switch kernel = Switch::kAuto;
  Backend backend = Backend::kAuto;
  Switch off_cpu = Switch::kAuto;
  uint32_t off_cpu_min_us = 0;  // off-CPU intervals shorter than this are not recorded
  bool follow_children = true;
  CallGraph call_graph = CallGraph::kAuto;
  uint32_t stack_size = 0;  // dwarf: bytes of user stack copied per sample (0 = the recorder's default)
  uint32_t cfi_rows = 0;    // cfi: rows of the eBPF CFI row map (0 = the recorder's default)
  Switch mip = Switch::kAuto;
  bool calls = false;  // exact call counts through mcount/__fentry__
  CallCounterKind calls_counter = CallCounterKind::kAuto;
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

}  // namespace hpd::session
