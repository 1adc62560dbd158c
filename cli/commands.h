// hpctl's verbs: each is a plain function over a plain options struct, so that main.cpp alone
// includes CLI11; what hpd shares with hpctl is in session/ (RecordRequest and the record pipeline).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hpd/session/record_request.h"

namespace hpd::cli {

// `hpctl record` as CLI11 fills it in: the choices as the words typed. to_record_request() makes the
// typed request the record pipeline and hpd take; the rest is how hpctl presents the result.
struct RecordArgs {
  RecordTarget target;  // -p, -- COMMAND, --all, --cgroup
  double duration_s = 0;
  uint32_t frequency_hz = 999;
  std::string output = "profile.json.gz";
  std::string event = "task-clock";
  std::string kernel = "auto";   // auto|on|off (--kernel / --no-kernel)
  std::string backend = "auto";  // auto|bpf|perf
  std::string off_cpu = "auto";  // auto|on|off (--off-cpu / --no-off-cpu)
  uint32_t off_cpu_min_us = 0;
  bool no_follow_children = false;
  std::string call_graph = "auto";     // auto|cfi|fp|dwarf
  uint32_t stack_size = 0;             // dwarf: bytes of user stack copied per sample (0 = default)
  uint32_t cfi_rows = 0;               // cfi: rows of the eBPF CFI row map (0 = default)
  std::string mip = "auto";            // auto|on|off (--mip / --no-mip): MIP call counts
  bool calls = false;                  // --calls: exact call counts through mcount/__fentry__
  std::string calls_counter = "auto";  // --calls-counter: auto|runtime|uprobes
  bool call_latency = false;           // --call-latency: uprobes also time calls (entry and return)
  bool alloc = false;                  // --alloc: sampled allocations of the launched command
  uint64_t alloc_mean = 0;             // --alloc-mean BYTES (0 = 512 KiB)
  bool print_report = true;
  size_t report_limit = 20;
  bool quiet = false;
  bool open = false;  // --open: `hpctl open` the written profile once recorded
};

// `hpctl open FILE`: the profile in the Firefox Profiler, served from this machine (open_command.cpp).
struct OpenArgs {
  std::string input;
  bool no_browser = false;  // only print the URL
  uint16_t port = 0;        // 0 = a free port the kernel picks
  std::string profiler_url = "https://profiler.firefox.com";
};

// Which threads the report views read, and how wide their text is.
struct ReportFilter {
  int32_t pid = 0;     // 0 = all
  int32_t tid = 0;     // 0 = all
  std::string thread;  // thread name; "" = all
  int64_t width = -1;  // text columns; -1 = COLUMNS or the terminal's (0 = no limit when not a TTY)
  bool wide = false;   // --wide: whole names, whatever the width
};

struct ReportArgs {
  std::string input;
  bool json = false;
  size_t limit = 20;
  bool limit_given = false;   // --limit on the command line (a tree's depth, else unlimited)
  std::string sort = "self";  // self|total|cpu|wall|calls
  ReportFilter filter;
  std::string function;  // --function REGEX: only these rows
  std::string callers;   // --callers F: the tree of F's callers instead of the table
  std::string callees;   // --callees F: the tree of what F calls
};

// `hpctl annotate FUNCTION [FILE]`: samples per source line of one function.
struct AnnotateArgs {
  std::string function;
  std::string input = "profile.json.gz";
  bool json = false;
  ReportFilter filter;
};

// `hpctl diff A B`: per-function change from profile A to profile B.
struct DiffArgs {
  std::string before;
  std::string after;
  bool json = false;
  size_t limit = 20;
  ReportFilter filter;
};

struct MipArgs {
  int32_t pid = 0;                   // show: a live process
  std::vector<std::string> files;    // show: one .mipraw; merge: several
  std::string map;                   // the binary or .mipmap file for offline decoding
  std::vector<std::string> mipmaps;  // live: MODULE=FILE overrides of a module's map
  bool json = false;
  std::string sort = "first-call";  // first-call|calls|name|address
  bool hide_never_called = false;
};

struct SymbolizeArgs {
  std::string exe;                     // file mode: ELF vaddrs of this file
  int32_t pid = 0;                     // process mode: runtime addresses of this process
  std::vector<std::string> addresses;  // empty = read stdin, one per line
  bool json = false;
  bool no_inlines = false;
  std::string debug_dir;  // root of the build-id tree (DIR/.build-id/xx/rest.debug); "" = /usr/lib/debug
};

struct ConvertArgs {
  std::string input;               // .hpr capture or Firefox JSON written by hpctl
  std::string output;              // "-" = stdout (collapsed, report)
  std::string format;              // firefox|pprof|collapsed|report; "" = from the output's suffix
  std::string weight = "samples";  // collapsed: samples|cpu|wall
  bool per_thread = false;         // collapsed: a process;thread root per stack
  bool per_process = false;        // collapsed: a process root per stack, its threads merged
  std::vector<std::string> debug_dirs;
  bool no_debuginfod = false;
  size_t limit = 20;  // report rows
  bool quiet = false;
  // llvm-sample, symbol-order: the binary the profile is for (matched to the recording by build-id);
  // "" = the recorded binary with the most samples, at its recorded path.
  std::string binary;
};

// `hpctl pgo-check PROFILE --binary B`: does a profile written by `convert --format llvm-sample`
// match the binary (pgo_check_command.cpp). Exit status: kPgoCheck* below.
struct PgoCheckArgs {
  std::string profile;
  std::string binary;
  bool quiet = false;  // only the exit status
};
inline constexpr int kPgoCheckMatch = 0;        // the binary is the one profiled (same build-id)
inline constexpr int kPgoCheckStale = 3;        // the same program rebuilt: the profile is stale
inline constexpr int kPgoCheckOtherBinary = 4;  // another program: few of the profile's functions in it
inline constexpr int kPgoCheckNoBuildId = 5;    // the profile or the binary carries no build-id
int run_pgo_check(const PgoCheckArgs& args);

// `hpctl export`: a window of the continuous profile hpd keeps on disk (export_command.cpp).
struct ExportArgs {
  std::string dir = "/var/lib/hpd";
  std::string since = "10m";  // a duration before now, @UNIX_SECONDS or a UTC time
  std::string until;          // "" = now
  std::vector<int32_t> pids;
  std::vector<std::string> comms;
  ConvertArgs output;  // output, format, symbolization and report options; `input` is unused
};

// `hpctl push FILE`: a saved recording sent to a profile store (push_command.cpp).
struct PushArgs {
  std::string input;                // .hpr capture or Firefox JSON written by hpctl
  std::string otlp_endpoint;        // http(s)://HOST:PORT[/PATH] of an OTLP/HTTP receiver
  std::vector<std::string> labels;  // KEY=VALUE resource attributes added to every process
  double timeout_s = 0;             // 0: push_timeout of hpd.conf when its endpoint is used, else 30
  std::string compression;          // "gzip", "none"; "": push_compression of hpd.conf's endpoint, else gzip
  // Without --endpoint: the endpoint, TLS settings, labels and timeout of hpd's push in this hpd.conf
  // (it and the files it names must be readable by the caller: root's), each flag given overriding.
  std::string config_path;
  std::vector<std::string> debug_dirs;
  bool no_debuginfod = false;
  bool quiet = false;
  // TLS: a CA bundle instead of the system's CAs, a client certificate and its key (PEM), and a file
  // of headers (a bearer token) that must be the caller's and readable by the caller only.
  std::string ca_file;
  std::string client_cert;
  std::string client_key;
  std::string headers_file;
};

// Global options: the hpd socket and whether to record through hpd (session_commands.cpp).
struct DaemonArgs {
  std::string socket;         // --socket; "" = $HPD_SOCKET or /run/hpd/hpd.sock
  std::string mode = "auto";  // auto (hpd when its socket answers, else local), daemon, local
};

struct StatusArgs {
  bool json = false;
};

// The recording `args` asks for. Throws std::runtime_error naming the option when a choice is not one of
// its words (CLI11 checks them first; this is the check of last resort).
session::RecordRequest to_record_request(const RecordArgs& args);

// Each returns the process exit code.
int run_record(const RecordArgs& args);  // in this process
// Through hpd or in this process, as `daemon` says (the summary line says which).
int run_record_auto(const RecordArgs& args, const DaemonArgs& daemon);
// Renames an existing output file to OUTPUT.old (as perf does with perf.data), saying so unless
// quiet, so that a recording never silently replaces the last one.
void keep_previous_output(const RecordArgs& args);
int run_status(const DaemonArgs& daemon, const StatusArgs& args);
int run_sessions(const DaemonArgs& daemon, const StatusArgs& args);
int run_stop(const DaemonArgs& daemon, uint64_t session);
int run_report(const ReportArgs& args);
int run_open(const OpenArgs& args);
int run_annotate(const AnnotateArgs& args);
int run_diff(const DiffArgs& args);
// Columns for the text report on stdout: COLUMNS when set, else the terminal's width, or 0 (no
// limit) when not a TTY.
size_t report_width_for_stdout();
int run_mip_show(const MipArgs& args);
int run_mip_merge(const MipArgs& args);
int run_convert(const ConvertArgs& args);
int run_export(const ExportArgs& args);
// The format `hpctl convert` writes for this output name, or "" when the suffix does not say.
std::string guess_output_format(const std::string& output);
int run_symbolize(const SymbolizeArgs& args);
int run_push(const PushArgs& args);

}  // namespace hpd::cli
