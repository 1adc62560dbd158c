// eBPF recording: load the programs, point them at the targets, drive them with perf events (per
// thread task-clock for pid and command targets, per-CPU cpu-clock for --all and --cgroup), and
// turn their ring-buffer records into a RawProfile.
//
// Resources are owned by RAII members declared in the order they must be released in reverse:
// the skeleton (programs, maps, tracepoint links) outlives the perf-event links and the ring-buffer
// reader that refer to its maps and programs.
#include "bpf/bpf_recorder.h"

#include <sys/stat.h>

#include <string>

#ifdef HPD_HAVE_BPF
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <vector>

#include "bpf/bpf_load.h"
#include "bpf/bpf_preloader.h"
#include "bpf/bpf_session.h"
#include "bpf/own_programs.h"
#include "hpd/base/proc_files.h"
#include "hpd/base/process.h"
#include "kernel_symbols_kept.h"
#endif

namespace hpd {

bool needs_bpf(const RecordOptions& options) {
  return options.target.is_system_wide() || options.call_graph == CallGraph::kCfi;
}

bool off_cpu_enabled(const RecordOptions& options) {
  if (options.off_cpu == Switch::kAuto) return !options.target.all_processes;
  return options.off_cpu == Switch::kOn;
}

std::string bpf_unavailable_reason(const PerfPrivileges& privileges) {
#ifndef HPD_HAVE_BPF
  (void)privileges;
  return "hpd was built without the eBPF backend (clang, bpftool or libbpf were missing at build time)";
#else
  struct stat st;
  if (::stat("/sys/kernel/btf/vmlinux", &st) != 0) {
    return "the kernel has no BTF type information (/sys/kernel/btf/vmlinux is missing; it needs "
           "CONFIG_DEBUG_INFO_BTF=y)";
  }
  if (!privileges.may_use_bpf()) {
    return "loading eBPF programs needs CAP_BPF and CAP_PERFMON (or root)";
  }
  return "";
#endif
}

#ifndef HPD_HAVE_BPF

std::string bpf_load_check() {
  return bpf_unavailable_reason(PerfPrivileges{});
}

RecordResult record_with_bpf(const RecordOptions&, const PerfPrivileges& privileges) {
  throw BpfUnavailable("the eBPF backend cannot be used: " + bpf_unavailable_reason(privileges));
}

void bpf_prepare(const RecordOptions&, const PerfPrivileges&) {}

bool bpf_prepare_now(const RecordOptions&, const PerfPrivileges&) {
  return false;
}

PreparedRecordingStatus bpf_prepared_status() {
  return {};
}

void bpf_release_prepared() {}

// Without the eBPF backend no recording has CFI maps.
CfiMapsStatus cfi_maps_status() {
  return {};
}

// Nor keeps a table: the bound is only remembered.
namespace {
uint64_t kept_limit_bytes = kDefaultKeptCfiTablesBytes;
}  // namespace

KeptCfiTablesStatus kept_cfi_tables_status() {
  KeptCfiTablesStatus out;
  out.limit_bytes = kept_limit_bytes;
  return out;
}

uint64_t set_kept_cfi_tables_limit(uint64_t bytes) {
  kept_limit_bytes = bytes;
  return 0;
}

#else

namespace bpf_recording {

namespace {

constexpr int kPollTimeoutMs = 100;
// The loop's timeout while the kernel's symbols are read in the background.
constexpr int kKallsymsPollMs = 5;
// Records held for a second walk at most (BpfEventDecoder::hold_pending_walks): a few seconds of samples
// of a CPU; beyond, they keep the programs' walk.
constexpr size_t kMaxHeldBytes = 64u << 20;
// How long a recording that forgets what exited (hpd's continuous collection: forget_before) holds a
// record for its tables: less than the 10 s after which the collection forgets a process, so that no
// held record reaches it after its process. Without it, the records of a process whose tables had not
// come (one that exited before they were published, likely) were held until kMaxHeldBytes: hpd's
// working memory rose 7 -> 105 MiB beside a CI run (docs/performance.md "Memory of the push").
constexpr uint64_t kMaxHeldNsWhenForgetting = 5'000'000'000ULL;
// At the end of a recording, how long held samples wait for the tables they need.
constexpr int kFinalTablesWaitMs = 3000;
// After the attach, how long the session's own heavy work waits for the targets' first sample.
constexpr uint64_t kFirstSampleWaitNs = 100'000'000;

// Returns once the sampling program took its first sample of a target (its per-CPU sample counter,
// `counters_fd`, of a set loaded for this session: it starts at 0) or `wait_ns` passed, whichever
// comes first. It looks every millisecond: each look is a map read.
void wait_for_first_sample(int counters_fd, uint64_t wait_ns) {
  const int possible = libbpf_num_possible_cpus();
  if (possible <= 0 || counters_fd < 0) return;
  std::vector<uint64_t> per_cpu(static_cast<size_t>(possible));
  const uint32_t key = HPD_COUNTER_SAMPLES;
  const auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(wait_ns);
  while (std::chrono::steady_clock::now() < end) {
    if (bpf_map_lookup_elem(counters_fd, &key, per_cpu.data()) != 0) return;
    for (const uint64_t v : per_cpu)
      if (v != 0) return;
    ::usleep(1000);
  }
}

}  // namespace

// The programs and maps: the ones hpd loaded ahead (or reset after an earlier recording) when they were
// loaded alike, else loaded now. hpd's sessions give them back at their end (~BpfSession).
void BpfSession::load() {
  skel_ = Preloader::instance().take(config_, &cfi_arrays_, &globals_);
  result_.bpf_loaded_ahead = skel_ != nullptr;
  if (!skel_) {
    skel_ = load_skeleton_for(config_, log_);
    if (options_.load_next_ahead) globals_ = globals_at_load(skel_.get());
  }
  if (options_.load_next_ahead) Preloader::instance().expect_back(config_);
  sample_prog_at_start_ = program_stats(skel_->progs.hpd_on_cpu);
  switch_prog_at_start_ = program_stats(skel_->progs.hpd_sched_switch);
  wakeup_prog_at_start_ = program_stats(skel_->progs.hpd_sched_wakeup);
  // Not part of the load: the same loaded programs serve any client.
  skel_->bss->client_uid = options_.client_uid;
  skel_->bss->client_gid = options_.client_gid;
  // Nor is the steal clock's place, read beside the verifier (steal_clock_from_run_queue).
  const std::optional<int64_t> steal_clock =
      options_.read_steal_clock ? steal_clock_from_run_queue() : std::nullopt;
  skel_->bss->steal_clock_known = steal_clock ? 1 : 0;
  skel_->bss->steal_clock_from_rq = steal_clock.value_or(0);
}

// hpd's session (whether it ended or failed): what refers to the skeleton's programs and maps goes first
// (the perf events, the uprobes, the call counter's programs, which write its map of timed entries, the
// ring's reader, the row and index arrays' users), its programs are detached, and the Preloader resets
// every map of it for the next recording of its kind.
BpfSession::~BpfSession() {
  if (!skel_ || !options_.load_next_ahead) return;
  calls_.reset();
  sampling_.clear();
  calls_announce_.reset();
  ring_.reset();
  rewalk_.reset();
  CfiMaps::MappedArrays arrays = cfi_maps_ ? cfi_maps_->release_arrays() : std::move(cfi_arrays_);
  cfi_maps_.reset();
  profile_bpf__detach(skel_.get());
  Preloader::instance().give_back(config_, std::move(skel_), std::move(arrays), std::move(globals_));
}

RecordResult BpfSession::run() {
  timing_mark("bpf-session");
  // A launched command starts once the kernel's symbols are read (below): they are read while the
  // programs load, and completed with them once every one is loaded (a table read before a program was
  // loaded lacks it, and would misname the timer samples that land in it).
  if (!options_.target.command.empty() && kernel_frames_) {
    kallsyms_ = std::async(std::launch::async, [loaded = programs_loaded_.get_future()]() mutable {
      std::shared_ptr<SchedulerFrames> sched;
      auto symbols = recording_kernel_symbols([&](KernelSymbols& table) {
        sched = std::make_shared<SchedulerFrames>(SchedulerFrames::from_symbols(table));
        loaded.get();  // throws when the recording failed before then
        const std::vector<JitedFunction> programs = this_process_programs();
        if (std::any_of(programs.begin(), programs.end(),
                        [](const JitedFunction& f) { return f.name.empty(); })) {
          // A name the programs do not give (their BTF unreadable without CAP_SYS_ADMIN): read again.
          timing_mark("kallsyms-read-again");
          table.load();
          sched = std::make_shared<SchedulerFrames>(SchedulerFrames::from_symbols(table));
          return;
        }
        for (const auto& [start, end] : add_missing_functions(table, programs)) sched->add(start, end);
      });
      return sched ? KernelTable{std::move(symbols), std::move(sched)} : kernel_table(std::move(symbols));
    });
  }
  load();  // the only step that throws BpfUnavailable: nothing has been started yet
  timing_mark("bpf-loaded");
  // Before anything reads or attaches by pid: the processes the targets are now (or were at the caller's
  // check).
  std::vector<UniqueFd> bound = bind_targets(options_);

  snapshot_switches();
  RawProfile& profile = result_.profile;
  take_clock_pair(profile.info.start_mono_ns, profile.info.start_unix_ns);
  steal_.start();
  RecordingInfo& info = profile.info;
  info.interval_ns = period_ns_;
  info.frequency_hz = options_.frequency_hz;
  info.backend = to_string(Backend::kBpf);
  info.call_graph = to_string(dwarf_ ? CallGraph::kDwarf : cfi_ ? CallGraph::kCfi : CallGraph::kFp);
  info.kernel_frames = kernel_frames_;
  info.logical_cpus = static_cast<uint32_t>(cpus_.size());
  describe_recording(options_, info);
  result_.cpu_time_source = CpuTimeSource::kSchedRuntimeAtSample;
  if (kernel_frames_) profile.intern_module("[kernel.kallsyms]", kernel_build_id(), true);

  decoder_ = std::make_unique<BpfEventDecoder>(stack_copy_);
  if (dwarf_ && off_cpu_) decoder_->expect_switch_stacks();
  // cfi mode: samples taken before their tables were published wait for them (walk_held); their process
  // counts as sampled, so that system-wide its tables are compiled.
  if (cfi_)
    decoder_->hold_pending_walks(
        [this](int32_t pid) {
          if (!cfi_maps_) return;
          cfi_maps_->sampled(pid);
          cfi_maps_->waiting(pid);
        },
        kMaxHeldBytes, options_.forget_before ? kMaxHeldNsWhenForgetting : 0);
  builder_ = std::make_unique<RawProfileBuilder>(
      profile, BuilderConfig{TrackerConfig{profile.info.start_mono_ns}, dwarf_},
      SystemLookups{[](int32_t pid) { return read_proc_maps(pid); },
                    [this](int32_t pid, uint64_t start, uint64_t end, const std::string& path) {
                      return build_ids_.for_mapping(pid, start, end, path);
                    },
                    [this](RawProcess& process) { describe_process(process); }});
  builder_->set_unwinder(&unwinder_);
  // The ring's events also keep cfi mode's per-process tables current (forks, exits, sampled processes).
  to_builder_ = [this](const Event& event) {
    if (cfi_maps_) note_for_cfi(event);
    builder_->on_event(event);
  };

  ring_.reset(ring_buffer__new(bpf_map__fd(skel_->maps.events), on_ring_record, this, nullptr));
  if (!ring_) throw RecordError("cannot read the eBPF ring buffer: " + errno_text(errno));
  warm_ring();
  timing_mark("ring-ready");

  // Before the fork: the counter decides whether the command starts with hpd's runtime preloaded.
  calls_ = std::make_unique<RecordingCallCounter>(options_, bpf_map__fd(skel_->maps.timed_entries));
  // Timed calls' entries kept by the timing program: the walks take a return address from there while
  // the kernel's entry probe holds it (calls_unwind.bpf.h).
  if (calls_->writes_timed_entries()) skel_->bss->timed_entries_shared = 1;
  attach_calls_unwind(calls_->runtime_in_use());
  programs_loaded_.set_value();
  if (!options_.target.command.empty())
    command_ = launch_command(options_.target.command, calls_->launch_environment());
  set_targets();
  timing_mark("targets-set");
  open_mmap_watch();
  timing_mark("mmap-watch-open");
  load_initial_tables();
  timing_mark("tables-ready");
  attach_sampling();
  timing_mark("sampling-attached");
  info.event = to_string(per_task_ ? SamplingEvent::kTaskClock : SamplingEvent::kCpuClock);
  seed_cpu_baselines();
  if (command_) seed_thread(command_->pid(), command_->pid());
  for (const int32_t pid : options_.target.pids) describe_initial(pid);
  for (const int32_t pid : descendants_) describe_initial(pid);
  read_attach_state();
  timing_mark("attach-state-read");

  if (command_) calls_->add_launched(command_->pid(), options_.target.command.front());
  for (const int32_t pid : options_.target.pids) {
    if (options_.pid_held_at_exec)
      calls_->add_held_at_exec(pid);
    else
      calls_->add_process(pid);
  }

  // Everything keyed by pid is in place: each target must still be the bound process, and running, so
  // that its exit hook (which takes it out of the targets) is yet to come.
  check_targets_running(options_.target.pids, bound);
  // /proc/kallsyms, read once for the recording (in hpd, once for many: kernel_symbols_kept.h): the
  // symbolization of its kernel frames uses the same table (RecordResult::kernel_symbols), rather than
  // reading and parsing it again. Only the builder needs it, for the scheduler's and the tracepoints' frames
  // in front of off-CPU and exit stacks (every recording with kernel frames has exit stacks: the CPU after a
  // thread's last sample is put where it exited), when it reads the first records: with pid targets it is
  // read after sampling began (their tables are loaded), so that the first sample does not wait for it; a
  // launched command is released after it, because the loop that compiles the tables of the program it execs
  // runs only after it (else 35% of a 0.3 s command's samples were walked by frame pointer while 0.3-0.5 s of
  // kallsyms were read), so it is read beside the programs' load (at the top). A command its launcher holds
  // at its exec (hpctl through hpd) is released by on_attached: its symbols are read on another thread
  // meanwhile, and the loop publishes its tables and walks its blocked threads again from its first
  // microseconds (read here first, a thread that blocked in them kept its frame-pointer walk, which lacks its
  // callers in a library without frame pointers). In hpd the table an earlier recording read is kept, and
  // taken here at once (kernel_symbols_kept.h).
  const auto load_kallsyms = [] { return kernel_table(recording_kernel_symbols()); };
  auto read_kallsyms = [&] {
    if (!kernel_frames_) return;
    use_kallsyms(load_kallsyms());
  };
  if (options_.pid_held_at_exec && !command_ && kernel_frames_)
    kallsyms_ = std::async(std::launch::async, load_kallsyms);
  if (command_) {
    kallsyms_ready(true);
    targets_.push_back(WatchedTarget{command_->pid(), open_pidfd(command_->pid()), false});
  } else {
    for (size_t i = 0; i < options_.target.pids.size(); ++i)
      targets_.push_back(WatchedTarget{options_.target.pids[i], std::move(bound[i]), false});
  }
  released_ns_ = release_command(command_.get(), options_, *builder_);
  if (options_.on_attached) options_.on_attached();
  timing_mark("started");
  // Sampling runs: what follows is needed only once the first records are read. /proc/kallsyms is read
  // now, not before the targets' first sample (within kFirstSampleWaitNs): reading it takes about 100 ms
  // of CPU, which on a busy machine the targets need to reach their first sample (bench/first_sample.sh,
  // docs/performance.md "Time to the first sample"). (hpd loads no programs for the next recording
  // meanwhile: this session's are given back at its end, ~BpfSession.)
  if (!command_ && !kallsyms_.valid() && kernel_frames_) {
    wait_for_first_sample(bpf_map__fd(skel_->maps.counters), kFirstSampleWaitNs);
    timing_mark("first-sample-seen");
  }
  if (!command_ && !kallsyms_.valid()) read_kallsyms();

  std::vector<pollfd> pfds;
  pfds.push_back(pollfd{ring_buffer__epoll_fd(ring_.get()), POLLIN, 0});
  const size_t first_target = pfds.size();
  for (const WatchedTarget& t : targets_) pfds.push_back(pollfd{t.pidfd ? t.pidfd.get() : -1, POLLIN, 0});
  // cfi mode, pid and command targets: a new mapping wakes the loop, so that the process's tables are
  // published within milliseconds rather than at the next 100 ms poll.
  if (cfi_ && filter_ == HPD_FILTER_PIDS) {
    for (const int fd : mmap_watch_.fds()) pfds.push_back(pollfd{fd, POLLIN, 0});
  }
  // cfi mode: a table compiled by the worker is loaded and published at once.
  if (cfi_maps_) pfds.push_back(pollfd{cfi_maps_->ready_fd(), POLLIN, 0});

  const uint64_t loop_cpu_start = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  const uint64_t start = profile.info.start_mono_ns;
  RecordingTicker ticker(options_, start);
  ticker.set_forget([this](uint64_t exited_before_ns) { builder_->forget_exited(exited_before_ns); });
  ticker.set_forget_stacks([this] { builder_->forget_released_stacks(); });
  bool stopped_early = false;
  const int ring_fd = pfds[0].fd;
  for (;;) {
    // While the kernel's symbols are read, the ring's records wait: its descriptor would wake the loop
    // at once, so it is left out, and the loop looks every few milliseconds whether they are read.
    const bool reading_kallsyms = kallsyms_.valid();
    pfds[0].fd = reading_kallsyms ? -1 : ring_fd;
    const int n = ::poll(pfds.data(), pfds.size(), reading_kallsyms ? kKallsymsPollMs : kPollTimeoutMs);
    if (n < 0 && errno != EINTR) throw RecordError(std::string("poll failed: ") + std::strerror(errno));
    drain();
    calls_->poll();
    const auto outcome = ticker.tick(update_targets_exited(targets_, pfds, first_target, command_.get()),
                                     builder_->samples(), profile);
    if (outcome == RecordingTicker::Outcome::kTargetsExited) {
      result_.target_exited = true;
      break;
    }
    if (outcome == RecordingTicker::Outcome::kStopped) {
      stopped_early = true;
      break;
    }
  }
  profile.info.end_mono_ns = mono_now();
  profile.info.state_host_steal(steal_.since_start());
  await_cpu_tails();
  // Stop every source before the last drain, so the ring holds everything that will ever come.
  sampling_.clear();
  profile_bpf__detach(skel_.get());
  drain(false);
  if (cfi_maps_ && decoder_->walks_held() != 0) {
    // The samples taken last may wait for tables still being loaded or compiled: each is walked once the
    // tables its own stack needs are in, and the end waits (bounded) for no other table.
    const uint64_t mappings_read_at = mono_now();
    drain_mmaps();
    cfi_maps_->poll();
    release_held(mappings_read_at, false);
    const uint64_t deadline = mono_now() + uint64_t{kFinalTablesWaitMs} * 1'000'000;
    while (decoder_->walks_held() != 0) {
      const uint64_t now = mono_now();
      if (now >= deadline ||
          !cfi_maps_->wait_for_next_table(static_cast<int>((deadline - now) / 1'000'000) + 1))
        break;
      release_held(mappings_read_at, false);
    }
  }
  if (decoder_->holding()) release_held(~uint64_t{0}, true);
  collect_leftovers();
  calls_->finish(result_);
  result_.collection_cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - loop_cpu_start;
  finish_command(command_.get(), options_, released_ns_, stopped_early, result_);
  summarize();
  return std::move(result_);
}

}  // namespace bpf_recording

using bpf_recording::BpfSession;
using bpf_recording::LibbpfLogCapture;
using bpf_recording::load_config_of;
using bpf_recording::load_skeleton;
using bpf_recording::open_skeleton;
using bpf_recording::Preloader;
using bpf_recording::Skeleton;

std::string bpf_load_check() {
  try {
    LibbpfLogCapture log;
    Skeleton skel = open_skeleton(log);
    load_skeleton(skel.get(), log);
    return "";
  } catch (const RecordError& e) {
    return e.what();
  }
}

RecordResult record_with_bpf(const RecordOptions& options, const PerfPrivileges& privileges) {
  if (const std::string why = bpf_unavailable_reason(privileges); !why.empty())
    throw BpfUnavailable("the eBPF backend cannot be used: " + why);
  BpfSession session(options, privileges);
  return session.run();
}

void bpf_prepare(const RecordOptions& options, const PerfPrivileges& privileges) {
  if (!bpf_unavailable_reason(privileges).empty()) return;
  Preloader::instance().want(load_config_of(options, privileges, online_cpus().size()));
}

bool bpf_prepare_now(const RecordOptions& options, const PerfPrivileges& privileges) {
  if (!bpf_unavailable_reason(privileges).empty()) return false;
  return Preloader::instance().load_now(load_config_of(options, privileges, online_cpus().size()));
}

PreparedRecordingStatus bpf_prepared_status() {
  return Preloader::instance().status();
}

void bpf_release_prepared() {
  Preloader::instance().stop();
}

#endif  // HPD_HAVE_BPF

}  // namespace hpd