// hpctl: the command line of the hpd profiler.
#include <CLI/CLI.hpp>
#include <cmath>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "commands.h"
#include "hpd/collect/recorder.h"
#include "hpd/service/config.h"
#include "hpd/session/record_pipeline.h"
#include "hpd/symbolizer/heap_pages.h"
#include "record_problem_words.h"
#include "suggest.h"

#ifndef HPD_VERSION
#define HPD_VERSION "unknown"
#endif

namespace {

// A duration in seconds, 0 or more; the message names the value and what is meant (CLI11's own range
// check printed the largest double).
CLI::Validator seconds_validator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          size_t used = 0;
          const double value = std::stod(text, &used);
          if (used == text.size() && value >= 0 && std::isfinite(value)) return "";
        } catch (const std::exception&) {
        }
        return "expected seconds, 0 or more (none: until the target exits or Ctrl-C), not '" + text + "'";
      },
      "SECONDS");
}

}  // namespace

namespace {

// CLI11's help names a flag with a value as it was declared ("--kernel{on},--no-kernel{off}"); the
// help says "--kernel,--no-kernel". The subcommands take the formatter of the app they are added to.
class PlainFlagNames : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
    if (is_positional) return CLI::Formatter::make_option_name(opt, true);
    std::string names;
    for (const std::string& s : opt->get_snames()) names += (names.empty() ? "-" : ",-") + s;
    for (const std::string& l : opt->get_lnames()) names += (names.empty() ? "--" : ",--") + l;
    return names.empty() ? CLI::Formatter::make_option_name(opt, false) : names;
  }
};

}  // namespace

int main(int argc, char** argv) {
  hpd::timing_mark("hpctl-main");
  CLI::App app{"hpctl: record and inspect profiles of native programs (C, C++, Rust) on Linux"};
  app.formatter(std::make_shared<PlainFlagNames>());
  app.set_version_flag("--version", std::string("hpctl ") + HPD_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);

  hpd::cli::DaemonArgs daemon;
  app.add_option("--socket", daemon.socket, "The hpd socket (default: $HPD_SOCKET or /run/hpd/hpd.sock)");
  // --daemon and --local: before the verb or after `record`; the last one given wins, both is an error.
  int daemon_flags = 0, local_flags = 0;
  const auto add_mode_flags = [&](CLI::App* cmd) {
    cmd->add_flag_callback(
        "--daemon",
        [&] {
          daemon.mode = "daemon";
          ++daemon_flags;
        },
        "Record through hpd; fail when it does not answer");
    cmd->add_flag_callback(
        "--local",
        [&] {
          daemon.mode = "local";
          ++local_flags;
        },
        "Record in this process, not through hpd");
  };
  add_mode_flags(&app);

  hpd::cli::RecordArgs rec;
  CLI::App* record = app.add_subcommand(
      "record", "Record a running process (--pid) or a command (after --), then write a profile");
  record->add_option("-p,--pid", rec.target.pids, "Process to record with all its threads (repeatable)")
      ->check(CLI::PositiveNumber);
  record
      ->add_option("-d,--duration", rec.duration_s,
                   "Seconds to record; default: until the target exits or Ctrl-C")
      ->check(seconds_validator());
  record->add_option("-F,--frequency", rec.frequency_hz, "Samples per second per thread (1..100000)")
      ->capture_default_str();
  record
      ->add_option("-o,--output", rec.output,
                   "Output: a capture file when it ends in .hpr (convert it later), else a Firefox profile "
                   "(gzip when .gz)")
      ->capture_default_str();
  record->add_option("-e,--event", rec.event, "Sampling clock: task-clock (thread CPU time) or cpu-clock")
      ->check(CLI::IsMember(hpd::sampling_event_word_list()))
      ->capture_default_str();
  record->add_flag("--kernel{on},--no-kernel{off}", rec.kernel,
                   "Capture kernel frames, or not (default: when permitted)");
  record->add_option("-b,--backend", rec.backend, "auto (eBPF when permitted, else perf_event), bpf, or perf")
      ->check(CLI::IsMember(hpd::backend_word_list()))
      ->capture_default_str();
  record->add_flag("-a,--all", rec.target.all_processes,
                   "Record every process of the system (eBPF), one track per thread");
  record->add_option("--cgroup", rec.target.cgroup, "Record the processes of this cgroup v2 (path, eBPF)");
  record->add_flag("--off-cpu{on},--no-off-cpu{off}", rec.off_cpu,
                   "Record where threads wait off the CPU, blocked or for a CPU (default: on with eBPF, "
                   "except with --all; off with --backend perf, which counts a woken thread's wait for "
                   "a CPU as blocked)");
  record->add_option("--off-cpu-min-us", rec.off_cpu_min_us, "Ignore off-CPU intervals shorter than this");
  record->add_flag("--no-follow-children", rec.no_follow_children,
                   "Do not record processes the targets fork");
  record
      ->add_option("--call-graph", rec.call_graph,
                   "User stacks: cfi (eBPF: unwound in the kernel with each module's CFI, on and off the "
                   "CPU), fp (frame pointers), dwarf (stack copy unwound with CFI in user space), or auto "
                   "(cfi with eBPF; with perf_event, dwarf when the program or a library it runs was built "
                   "without frame pointers)")
      ->check(CLI::IsMember(hpd::call_graph_word_list()))
      ->capture_default_str();
  record->add_option(
      "--stack-size", rec.stack_size,
      "dwarf: bytes of user stack copied per sample, a multiple of 8 up to 65528 (default 32768)");
  record
      ->add_option("--cfi-rows", rec.cfi_rows,
                   "cfi: rows of the kernel's CFI table map, 8 bytes each (default 4194304: 32 MiB); "
                   "modules whose tables do not fit are walked by frame pointer")
      ->check(CLI::Range(1u, 1u << 25));
  record->add_flag("--mip{on},--no-mip{off}", rec.mip,
                   "Read MIP call counts of every target (default: of targets with a __llvm_mipraw section)");
  record->add_flag("--calls", rec.calls,
                   "Count every call exactly through the targets' mcount/__fentry__ instrumentation "
                   "(-pg, -mfentry, -Zinstrument-mcount), and time each call of a launched command");
  record
      ->add_option("--calls-counter", rec.calls_counter,
                   "With --calls: runtime (hpd's mcount/__fentry__ preloaded into the command; counts and "
                   "times calls), uprobes (eBPF, from outside; counts only, unless --call-latency), or auto "
                   "(the runtime for a command that can take it, uprobes for --pid and static programs)")
      ->check(CLI::IsMember(hpd::call_counter_word_list()))
      ->capture_default_str();
  record->add_flag("--call-latency", rec.call_latency,
                   "With --calls through uprobes (--pid, static programs): also time each call of the "
                   "functions whose NOP site is their first instruction (a return probe each, Linux 6.13+). "
                   "Costs the target more per call than counting, and sampled stacks taken inside a timed "
                   "call may not reach their root (docs/call-counts.md, docs/performance.md)");
  record->add_flag("--alloc", rec.alloc,
                   "Sample the allocations of the launched command (malloc, calloc, realloc, free, the "
                   "aligned ones, C++ new/delete) in hpd's preloaded runtime, or of a --pid process "
                   "through uprobes on its allocator: allocated and still-live bytes per call stack");
  record
      ->add_option("--alloc-mean", rec.alloc_mean,
                   "With --alloc: one sample per this many bytes allocated on average (a Poisson "
                   "process over the bytes; default 524288)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  record->add_flag(
      "--no-report", [&rec](int64_t) { rec.print_report = false; },
      "Do not print the report after recording");
  record->add_option("--limit", rec.report_limit, "Rows in the printed report")->capture_default_str();
  record->add_flag("-q,--quiet", rec.quiet, "No progress or summary on stderr");
  record->add_flag("--open", rec.open,
                   "Then open the profile in the Firefox Profiler, as hpctl open does (not with .hpr)");
  add_mode_flags(record);
  record->add_option("command", rec.target.command, "Command to launch and record (after --)");
  record->positionals_at_end();

  // The thread filters and width every report view takes.
  auto add_filter = [](CLI::App* cmd, hpd::cli::ReportFilter& f) {
    cmd->add_option("--pid", f.pid, "Only this process");
    cmd->add_option("--tid", f.tid, "Only this thread");
    cmd->add_option("--thread", f.thread, "Only threads with this name");
    auto* width = cmd->add_option("--width", f.width,
                                  "Columns of the text (default: COLUMNS, else the terminal's; whole names "
                                  "when not a terminal; 0 = no limit). Long names are shortened to fit: "
                                  "template arguments first, then parameters, then the middle");
    cmd->add_flag("--wide", f.wide, "Whole function names, however long the lines (--json always has them)")
        ->excludes(width);
  };
  hpd::cli::ReportArgs rep;
  CLI::App* report = app.add_subcommand(
      "report", "Print the functions that used the most CPU in a profile, or the callers or callees of one");
  report
      ->add_option("file", rep.input,
                   "A capture (.hpr), perf's perf.data (cpu-clock or task-clock samples) or a profile "
                   "written by hpctl (.json or .json.gz)")
      ->required();
  report->add_flag("--json", rep.json, "Machine-readable JSON instead of a table");
  auto* report_limit =
      report->add_option("--limit", rep.limit, "Rows to print (0 = all); with --callers/--callees: depth")
          ->capture_default_str();
  report
      ->add_option("--sort", rep.sort,
                   "Order by self or total samples, self cpu time, self wall time, or calls (--calls, MIP)")
      ->check(CLI::IsMember({"self", "total", "cpu", "wall", "calls"}))
      ->capture_default_str();
  add_filter(report, rep.filter);
  report->add_option("--function", rep.function, "Only functions whose name matches this regular expression");
  auto* callers_opt =
      report->add_option("--callers", rep.callers, "The tree of this function's callers, with percentages");
  auto* callees_opt =
      report->add_option("--callees", rep.callees, "The tree of what this function calls, with percentages");
  callers_opt->excludes(callees_opt);

  hpd::cli::AnnotateArgs ann;
  CLI::App* annotate = app.add_subcommand(
      "annotate", "Samples per source line of one function (per instruction when the source is not found)");
  annotate
      ->add_option("function", ann.function,
                   "The function: its name, or a regular expression matching one name")
      ->required();
  annotate->add_option("file", ann.input, "The profile")->capture_default_str();
  annotate->add_flag("--json", ann.json, "Machine-readable JSON instead of text");
  add_filter(annotate, ann.filter);

  hpd::cli::DiffArgs dif;
  CLI::App* diff = app.add_subcommand(
      "diff",
      "Compare two profiles per function (matched across rebuilds and renames): change of CPU and wall time");
  diff->add_option("before", dif.before, "Profile A (before)")->required();
  diff->add_option("after", dif.after, "Profile B (after)")->required();
  diff->add_flag("--json", dif.json, "Machine-readable JSON instead of a table");
  diff->add_option("--limit", dif.limit, "Rows to print (0 = all)")->capture_default_str();
  add_filter(diff, dif.filter);

  hpd::cli::OpenArgs open_args;
  CLI::App* open = app.add_subcommand(
      "open",
      "Open a profile in the Firefox Profiler, served from this machine with its sources and assembly");
  open->add_option("file", open_args.input,
                   "A capture (.hpr) or a profile written by hpctl (.json or .json.gz)")
      ->required();
  open->add_flag("--no-browser", open_args.no_browser, "Only print the URL to open");
  open->add_option("--port", open_args.port, "Port on 127.0.0.1 (default: a free one)");
  open->add_option("--profiler-url", open_args.profiler_url,
                   "The Firefox Profiler to open (e.g. one run locally)")
      ->capture_default_str();

  CLI::App* mip = app.add_subcommand("mip", "Read MIP (Machine IR Profile) call counts and coverage");
  mip->require_subcommand(1);
  auto add_mip_output = [](CLI::App* cmd, hpd::cli::MipArgs& a) {
    cmd->add_flag("--json", a.json, "Machine-readable JSON instead of a table");
    cmd->add_option("--sort", a.sort, "Order: first-call, calls, name or address")
        ->check(CLI::IsMember({"first-call", "calls", "name", "address"}))
        ->capture_default_str();
    cmd->add_flag("--hide-never-called", a.hide_never_called, "Leave out functions that were never called");
  };
  hpd::cli::MipArgs mip_show_args;
  CLI::App* mip_show =
      mip->add_subcommand("show", "Counts of a live process (--pid) or of a .mipraw file (--map)");
  mip_show->add_option("-p,--pid", mip_show_args.pid, "Live process to snapshot")->check(CLI::PositiveNumber);
  mip_show->add_option("file", mip_show_args.files, "A dumped .mipraw file")->expected(0, 1);
  mip_show->add_option("--map", mip_show_args.map, "The instrumented binary or its .mipmap file (for FILE)");
  mip_show->add_option("--mipmap", mip_show_args.mipmaps,
                       "MODULE=FILE: a .mipmap for a live module whose own map was stripped (repeatable)");
  add_mip_output(mip_show, mip_show_args);
  hpd::cli::MipArgs mip_merge_args;
  CLI::App* mip_merge =
      mip->add_subcommand("merge", "Add several .mipraw files of one binary into one profile");
  mip_merge->add_option("files", mip_merge_args.files, ".mipraw files")->required();
  mip_merge->add_option("--map", mip_merge_args.map, "The instrumented binary or its .mipmap file")
      ->required();
  add_mip_output(mip_merge, mip_merge_args);

  hpd::cli::SymbolizeArgs sym;
  CLI::App* symbolize = app.add_subcommand(
      "symbolize",
      "Print the function, file:line:column and inline chain of addresses (like llvm-symbolizer)");
  symbolize->add_option("--exe", sym.exe,
                        "ELF file whose virtual addresses are given (as nm and objdump print them)");
  symbolize->add_option("-p,--pid", sym.pid, "Live process whose runtime addresses are given")
      ->check(CLI::PositiveNumber);
  symbolize->add_option("addresses", sym.addresses,
                        "Hex addresses (0x optional); none: read stdin, one per line");
  symbolize->add_flag("--json", sym.json, "One JSON object per address (JSON Lines) instead of text");
  symbolize->add_flag("--no-inlines", sym.no_inlines, "Only the real function, at the innermost line");
  symbolize->add_option("--debug-dir", sym.debug_dir,
                        "Root of a debug-file tree searched by build-id (DIR/.build-id/xx/rest.debug) and "
                        ".gnu_debuglink (DIR/<binary's directory>/<link>); default /usr/lib/debug");

  hpd::cli::ConvertArgs conv;
  CLI::App* convert = app.add_subcommand(
      "convert",
      "Symbolize a capture (.hpr) or perf.data, or re-export a profile: Firefox JSON, pprof, collapsed "
      "stacks, report, an LLVM sample profile for clang -fprofile-sample-use, a symbol order for lld");
  convert
      ->add_option("input", conv.input,
                   "A capture (.hpr), perf's perf.data, or a Firefox profile written by hpctl")
      ->required();
  convert
      ->add_option("-o,--output", conv.output,
                   "Output file; its suffix picks the format (.json.gz, .pb.gz, .collapsed); - = stdout")
      ->required();
  convert
      ->add_option(
          "-f,--format", conv.format,
          "firefox, pprof, collapsed, report (default: from the suffix), llvm-sample (LLVM's text "
          "sample profile of one binary, for clang -fprofile-sample-use), llvm-sample-binary (the same "
          "in LLVM's extensible binary form; default for .extbinary, .afdo) or symbol-order (its "
          "functions by samples, or by exact call counts of a --calls recording, for lld "
          "--symbol-ordering-file)")
      ->check(CLI::IsMember(
          {"firefox", "pprof", "collapsed", "report", "llvm-sample", "llvm-sample-binary", "symbol-order"}));
  convert
      ->add_option("--binary", conv.binary,
                   "llvm-sample, llvm-sample-binary, symbol-order: the binary to profile (its build-id must "
                   "be the recorded one; "
                   "default: the recorded binary with the most samples, at its recorded path)")
      ->check(CLI::ExistingFile);
  convert->add_option("--weight", conv.weight, "Collapsed stacks: samples, cpu (ns) or wall (ns)")
      ->check(CLI::IsMember({"samples", "cpu", "wall"}))
      ->capture_default_str();
  convert->add_flag("--per-thread", conv.per_thread,
                    "Collapsed stacks: start each stack with process;thread");
  convert->add_flag("--per-process", conv.per_process,
                    "Collapsed stacks: start each stack with the process (pid), its threads merged");
  convert->add_option("--debug-dir", conv.debug_dirs,
                      "Directory to search for binaries by build-id (.build-id/xx/...) or name (repeatable)");
  convert->add_flag("--no-debuginfod", conv.no_debuginfod,
                    "Do not ask $DEBUGINFOD_URLS for missing binaries");
  convert->add_option("--limit", conv.limit, "Report: rows to print (0 = all)")->capture_default_str();
  convert->add_flag("-q,--quiet", conv.quiet, "No notes or summary on stderr");

  hpd::cli::PgoCheckArgs pgo;
  CLI::App* pgo_check = app.add_subcommand(
      "pgo-check",
      "Check that an LLVM sample profile written by convert is of a binary: exit 0 match, 3 stale (the "
      "program rebuilt), 4 another binary, 5 no build-id, 1 error; names functions whose start line moved");
  pgo_check->add_option("profile", pgo.profile, "The profile (hpctl convert --format llvm-sample)")
      ->required()
      ->check(CLI::ExistingFile);
  pgo_check->add_option("--binary", pgo.binary, "The binary to check it against")
      ->required()
      ->check(CLI::ExistingFile);
  pgo_check->add_flag("-q,--quiet", pgo.quiet, "Print nothing: only the exit status");

  hpd::cli::ExportArgs exp;
  CLI::App* export_cmd = app.add_subcommand(
      "export", "Write a time window of hpd's continuous profile (its chunks on disk) as a profile");
  export_cmd
      ->add_option("--since", exp.since,
                   "Start: a duration before now (30s, 10m, 2h, 1d), @UNIX_SECONDS or a UTC time "
                   "(2025-03-14T09:26:53Z)")
      ->capture_default_str();
  export_cmd->add_option("--until", exp.until, "End, in the same forms (default: now)");
  export_cmd->add_option("-p,--pid", exp.pids, "Only this process (repeatable)")->check(CLI::PositiveNumber);
  export_cmd->add_option("--comm", exp.comms,
                         "Only processes with this name or executable file name (repeatable)");
  export_cmd->add_option("--dir", exp.dir, "The chunk directory (hpd.conf's continuous directory)")
      ->capture_default_str();
  export_cmd
      ->add_option("-o,--output", exp.output.output,
                   "Output file; its suffix picks the format (.json.gz, .pb.gz, .collapsed); - = stdout")
      ->required();
  export_cmd
      ->add_option("-f,--format", exp.output.format,
                   "firefox, pprof, collapsed or report (default: from the suffix)")
      ->check(CLI::IsMember({"firefox", "pprof", "collapsed", "report"}));
  export_cmd->add_option("--weight", exp.output.weight, "Collapsed stacks: samples, cpu (ns) or wall (ns)")
      ->check(CLI::IsMember({"samples", "cpu", "wall"}))
      ->capture_default_str();
  export_cmd->add_flag("--per-thread", exp.output.per_thread,
                       "Collapsed stacks: start each stack with process;thread");
  export_cmd->add_flag("--per-process", exp.output.per_process,
                       "Collapsed stacks: start each stack with the process (pid), its threads merged");
  export_cmd->add_option(
      "--debug-dir", exp.output.debug_dirs,
      "Directory to search for binaries by build-id (.build-id/xx/...) or name (repeatable)");
  export_cmd->add_flag("--no-debuginfod", exp.output.no_debuginfod,
                       "Do not ask $DEBUGINFOD_URLS for missing binaries");
  export_cmd->add_option("--limit", exp.output.limit, "Report: rows to print (0 = all)")
      ->capture_default_str();
  export_cmd->add_flag("-q,--quiet", exp.output.quiet, "No notes or summary on stderr");

  hpd::cli::PushArgs push_args;
  CLI::App* push = app.add_subcommand(
      "push",
      "Send a saved recording (.hpr or Firefox JSON) to a profile store: OTLP profiles over HTTP or gRPC");
  push->add_option("input", push_args.input, "A capture (.hpr) or a Firefox profile written by hpctl")
      ->required();
  push->add_option(
      "--endpoint,--otlp-endpoint", push_args.otlp_endpoint,
      "OTLP/HTTP receiver: http(s)://HOST:PORT (POSTs to /v1development/profiles) or a full URL; "
      "OTLP/gRPC receiver: grpc://HOST:PORT (HTTP/2 without TLS) or grpcs://HOST:PORT. Without it: "
      "every endpoint of hpd.conf (--config: otlp_endpoint and each otlp_endpoint.NAME, with their push_* "
      "TLS settings), which only root can read when they name a key or a token");
  push_args.config_path = hpd::service::kDefaultConfigPath;
  push->add_option("--config", push_args.config_path,
                   "hpd.conf whose push settings are used when --endpoint is not given")
      ->capture_default_str();
  push->add_option("--label", push_args.labels, "KEY=VALUE resource attribute on every process (repeatable)");
  push->add_option("--timeout", push_args.timeout_s,
                   "Seconds to wait for the endpoint (default: push_timeout of hpd.conf when its endpoint "
                   "is used, else 30)")
      ->check(CLI::PositiveNumber);
  push->add_option("--compression", push_args.compression,
                   "gzip (Content-Encoding over HTTP, grpc-encoding over gRPC) or none (default: "
                   "push_compression of hpd.conf when its endpoint is used, else gzip)")
      ->check(CLI::IsMember({"gzip", "none"}));
  push->add_option("--debug-dir", push_args.debug_dirs,
                   "Directory to search for binaries by build-id (.build-id/xx/...) or name (repeatable)");
  push->add_flag("--no-debuginfod", push_args.no_debuginfod,
                 "Do not ask $DEBUGINFOD_URLS for missing binaries");
  push->add_option(
      "--ca-file", push_args.ca_file,
      "CA bundle (PEM) that verifies an https:// or grpcs:// endpoint instead of the system's CAs");
  push->add_option("--client-cert", push_args.client_cert,
                   "Client certificate (PEM) for mutual TLS; with --client-key");
  push->add_option("--client-key", push_args.client_key,
                   "Key of --client-cert (PEM, not encrypted); yours, mode 0600 or 0400");
  push->add_option("--headers-file", push_args.headers_file,
                   "File of headers sent with the request, one 'Name: value' a line (Authorization: Bearer "
                   "TOKEN); yours, mode 0600 or 0400");
  push->add_flag("-q,--quiet", push_args.quiet, "No notes or summary on stderr");

  hpd::cli::StatusArgs status_args;
  CLI::App* status =
      app.add_subcommand("status", "Show hpd: version, backends, sessions, samples, lost, memory");
  status->add_flag("--json", status_args.json, "The daemon's reply as JSON");
  CLI::App* sessions =
      app.add_subcommand("sessions", "List hpd's recording sessions (yours, or all for root and hpd)");
  sessions->add_flag("--json", status_args.json, "The daemon's reply as JSON");
  uint64_t stop_id = 0;
  CLI::App* stop = app.add_subcommand("stop", "Stop an hpd session; its client still gets the profile");
  stop->add_option("id", stop_id, "Session id (see hpctl sessions)")->required()->check(CLI::PositiveNumber);

  try {
    app.parse(argc, argv);
    if (daemon_flags > 0 && local_flags > 0)
      throw CLI::ValidationError("--daemon and --local exclude each other");
    hpd::timing_mark("hpctl-parsed");
  } catch (const CLI::ParseError& e) {
    // A mistyped verb or flag: name the nearest one before CLI11's own message.
    if (e.get_exit_code() != 0) {
      const std::string hint = hpd::cli::suggest_for_arguments(app, argc, argv);
      if (!hint.empty()) std::fprintf(stderr, "hpctl: %s\n", hint.c_str());
    }
    // CLI11's message; then hpctl's own status (hpctl(1)): 0 for --help and --version, 2 for every
    // command line it cannot parse (not CLI11's codes, 105 to 114).
    const int cli11_status = app.exit(e);
    return cli11_status == 0 ? 0 : 2;
  }

  // Commands that symbolize build indexes of tens of megabytes: huge pages spare them a page
  // fault per 4 KiB (heap_pages.h). Nothing of it reaches the commands record starts.
  rep.limit_given = report_limit->count() > 0;
  const bool symbolizes = record->parsed() || report->parsed() || open->parsed() || annotate->parsed() ||
                          diff->parsed() || convert->parsed() || export_cmd->parsed() ||
                          symbolize->parsed() || push->parsed();
  if (symbolizes && std::getenv("HPCTL_NO_HUGE_PAGES") == nullptr) hpd::prefer_huge_pages_for_heap();

  try {
    if (record->parsed()) {
      if (rec.open && rec.output.size() >= 4 && rec.output.compare(rec.output.size() - 4, 4, ".hpr") == 0) {
        // Opening needs the symbolized profile; a capture is kept for later conversion.
        throw std::runtime_error("--open needs a Firefox profile output (.json or .json.gz), not a capture");
      }
      // A recording that cannot start keeps the old file.
      hpd::session::record_options_from_request(hpd::cli::to_record_request(rec));
      hpd::cli::keep_previous_output(rec);
      const int status = hpd::cli::run_record_auto(rec, daemon);
      if (!rec.open || !std::filesystem::exists(rec.output)) return status;
      hpd::cli::OpenArgs after_record;
      after_record.input = rec.output;
      hpd::cli::run_open(after_record);
      return status;
    }
    if (open->parsed()) return hpd::cli::run_open(open_args);
    if (annotate->parsed()) return hpd::cli::run_annotate(ann);
    if (diff->parsed()) return hpd::cli::run_diff(dif);
    if (status->parsed()) return hpd::cli::run_status(daemon, status_args);
    if (sessions->parsed()) return hpd::cli::run_sessions(daemon, status_args);
    if (stop->parsed()) return hpd::cli::run_stop(daemon, stop_id);
    if (report->parsed()) return hpd::cli::run_report(rep);
    if (mip_show->parsed()) return hpd::cli::run_mip_show(mip_show_args);
    if (mip_merge->parsed()) return hpd::cli::run_mip_merge(mip_merge_args);
    if (convert->parsed()) return hpd::cli::run_convert(conv);
    if (export_cmd->parsed()) return hpd::cli::run_export(exp);
    if (pgo_check->parsed()) return hpd::cli::run_pgo_check(pgo);
    if (symbolize->parsed()) return hpd::cli::run_symbolize(sym);
    if (push->parsed()) return hpd::cli::run_push(push_args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpctl: error: %s\n", hpd::cli::error_words(e).c_str());
    return 1;
  }
  return 0;
}
