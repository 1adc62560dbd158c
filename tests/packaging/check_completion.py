#!/usr/bin/env python3
"""Checks the bash completion of hpctl by running it: bash sources the script, sets COMP_WORDS and
COMP_CWORD as readline would, calls the completion function, and prints COMPREPLY. Every verb and
every flag that `hpctl [VERB...] --help` prints (recursively, `mip show` and `mip merge` included)
must be offered, every value list in the help must be offered for its option, and pids, files and
commands must be offered where hpctl expects them.
Usage: check_completion.py HPCTL COMPLETION_SCRIPT"""
import os
import re
import subprocess
import sys
import tempfile
import time

SEP = "\x1e"  # between the answers of the queries run in one bash


def help_text(hpctl, path):
    return subprocess.run([hpctl, *path, "--help"], capture_output=True, text=True, check=True).stdout


def parse_help(text):
    """(subcommands, {flag: value list or None}) of one help text, read from CLI11's sections."""
    subcommands, flags, section = [], {}, None
    for line in text.splitlines():
        if re.match(r"^\S", line):
            section = line.rstrip(":") if line.endswith(":") else None
            continue
        if section == "Subcommands":
            m = re.match(r"^  ([a-z][a-z0-9_-]*)(\s|$)", line)
            if m:
                subcommands.append(m.group(1))
        elif section == "Options":
            m = re.match(r"^  (-\S+)(?: ([A-Z]\S*))?", line)
            if not m:
                continue
            values = None
            if m.group(2):
                vm = re.search(r"\{([^}]*)\}", m.group(2))
                if vm:
                    values = vm.group(1).split(",")
            for name in re.sub(r"\{[^}]*\}", "", m.group(1)).split(","):
                flags[name] = values
    return subcommands, flags


def walk(hpctl, path, levels):
    subcommands, flags = parse_help(help_text(hpctl, path))
    levels.append((path, subcommands, flags))
    for verb in subcommands:
        walk(hpctl, path + [verb], levels)


def bash_quote(word):
    return "'" + word.replace("'", "'\\''") + "'"


def complete_many(script, queries, cwd=None, env_extra=None):
    """Runs every query (a list of words, the last one being completed) in one bash, under
    `set -u` as a strict user's shell might be; returns (answers, stderr, seconds)."""
    lines = ["set -u", "source " + bash_quote(script)]
    for words in queries:
        lines.append("COMP_WORDS=(" + " ".join(bash_quote(w) for w in words) + ")")
        lines.append(f"COMP_CWORD={len(words) - 1}")
        lines.append('COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()')
        lines.append("_hpctl")
        lines.append("printf '%s\\n' \"${COMPREPLY[@]}\"; printf '\\036\\n'")
    env = dict(os.environ, **(env_extra or {}))
    start = time.monotonic()
    out = subprocess.run(["bash", "--norc", "--noprofile", "-c", "\n".join(lines)], capture_output=True,
                         text=True, cwd=cwd, env=env, timeout=300)
    seconds = time.monotonic() - start
    answers = [set(filter(None, chunk.split("\n"))) for chunk in out.stdout.split(SEP + "\n")[:-1]]
    if len(answers) != len(queries):
        raise SystemExit(f"bash answered {len(answers)} of {len(queries)} queries; stderr:\n{out.stderr}")
    return answers, out.stderr, seconds


class Checker:
    def __init__(self):
        self.failures = 0
        self.checks = 0

    def expect(self, ok, message):
        self.checks += 1
        if not ok:
            self.failures += 1
            print("FAILED: " + message)


def main():
    hpctl, script = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    c = Checker()
    levels = []
    walk(hpctl, [], levels)
    c.expect(any(path == ["mip", "show"] for path, _, _ in levels), "the help walk reached `mip show`")

    # Verbs, flags, and the value list of every option whose help shows one.
    queries, expected = [], []
    for path, subcommands, flags in levels:
        where = "hpctl " + " ".join(path) if path else "hpctl"
        if subcommands:
            queries.append([hpctl, *path, ""])
            expected.append((set(subcommands), f"verbs of `{where}`", "superset"))
        queries.append([hpctl, *path, "-"])
        expected.append((set(flags), f"flags of `{where}`", "superset"))
        for flag, values in flags.items():
            queries.append([hpctl, *path, flag])
            expected.append(({flag}, f"`{where} {flag}` completes to itself", "superset"))
            if values:
                queries.append([hpctl, *path, flag, ""])
                expected.append((set(values), f"values of `{where} {flag}`", "equal"))
    # --backend in each spelling: separate word, short option, and --backend=VALUE both as bash
    # splits it at "=" (COMP_WORDBREAKS) and as one word.
    backends = {"auto", "bpf", "perf"}
    for words, want, what in [
        (["record", "--backend", ""], backends, "--backend VALUE"),
        (["record", "-b", ""], backends, "-b VALUE"),
        (["record", "--backend", "=", ""], backends, "--backend=VALUE (split at =)"),
        (["record", "--backend", "=", "p"], {"perf"}, "--backend=p (split at =)"),
        (["record", "--backend=b"], {"--backend=bpf"}, "--backend=b (one word)"),
        # The value of an option is not a verb: "-o mip" stays in record.
        (["record", "-o", "mip", "--call-g"], {"--call-graph"}, "flags after an option's value"),
        (["record", "--kernel", "--no-rep"], {"--no-report"}, "flags after a flag"),
        (["mip", "show", "--sort", "c"], {"calls"}, "mip show --sort c"),
    ]:
        queries.append([hpctl, *words])
        expected.append((want, what, "equal"))

    answers, stderr, seconds = complete_many(script, queries)
    for answer, (want, what, how) in zip(answers, expected):
        ok = answer == want if how == "equal" else want <= answer
        c.expect(ok, f"{what}: offered {sorted(answer)}, expected {sorted(want)}"
                 + ("" if how == "equal" else f"; missing {sorted(want - answer)}"))
    c.expect(stderr == "", "the completion wrote to stderr:\n" + stderr)
    print(f"{len(queries)} completions of {len(levels)} verb levels in {seconds:.2f} s")

    # Values that come from the system: pids, files, commands.
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name in ["run.json.gz", "run.hpr", "notes.txt", "a.mipraw"]:
                open(os.path.join(tmp, name), "w").close()
            os.mkdir(os.path.join(tmp, "sub"))
            pid = str(sleeper.pid)
            queries = [
                [hpctl, "record", "--pid", pid[:-1]],
                [hpctl, "record", "-p", ""],
                [hpctl, "record", "-o", ""],
                [hpctl, "report", ""],
                [hpctl, "convert", "-o", "x.pb.gz", "r"],
                [hpctl, "mip", "show", ""],
                [hpctl, "record", "-F", "99", "--", "bas"],
                ["/nonexistent/hpctl", ""],
            ]
            # Process names, where a verb filters by them (hpctl export --comm).
            comm_paths = [path for path, _, flags in levels if "--comm" in flags]
            for path in comm_paths:
                queries.append([hpctl, *path, "--comm", "slee"])
            answers, stderr, _ = complete_many(script, queries, cwd=tmp)
            for path, answer in zip(comm_paths, answers[8:]):
                c.expect("sleep" in answer, f"`hpctl {' '.join(path)} --comm slee` offers sleep: {sorted(answer)}")
            c.expect(pid in answers[0], f"--pid {pid[:-1]} offers the live pid {pid}: {sorted(answers[0])[:20]}")
            c.expect(pid in answers[1] and "1" in answers[1], "-p offers every pid, 1 and the sleeper included")
            c.expect(answers[2] == {"run.json.gz", "run.hpr", "notes.txt", "a.mipraw", "sub"},
                     f"-o offers every file: {sorted(answers[2])}")
            c.expect(answers[3] == {"run.json.gz", "run.hpr", "sub"},
                     f"report offers profiles, captures and directories only: {sorted(answers[3])}")
            c.expect(answers[4] == {"run.json.gz", "run.hpr"}, f"convert's input: {sorted(answers[4])}")
            c.expect(answers[5] == {"a.mipraw", "sub"}, f"mip show offers .mipraw files: {sorted(answers[5])}")
            c.expect("bash" in answers[6], f"after --, commands: {sorted(answers[6])[:10]}")
            c.expect(answers[7] == set(), f"a missing hpctl offers nothing: {sorted(answers[7])}")
            c.expect(stderr == "", "the completion wrote to stderr:\n" + stderr)
    finally:
        sleeper.kill()
        sleeper.wait()

    print(f"{c.checks} checks, {c.failures} failed")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
