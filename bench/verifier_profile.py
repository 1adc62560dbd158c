#!/usr/bin/env python3
"""Where the kernel's verifier spent its instructions on one of hpd's eBPF programs.

    HPD_VERIFIER_LOG=DIR hpctl record --local --pid P -d 0.3 -o x.hpr --no-report
    bench/verifier_profile.py DIR/hpd_on_cpu.log [--lines N] [--func NAME]

The log (BPF_LOG_LEVEL2) holds every instruction the verifier processed, each path apart, with the
source line it came from. This counts them per function (the program's own code is "main") and per
source line: a line whose count is a multiple of its instructions was checked once per iteration of a
loop the verifier unrolled, or once per way the program reached it.
"""
import argparse
import collections
import re
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log")
    parser.add_argument("--lines", type=int, default=25, help="source lines to list (default 25)")
    parser.add_argument("--func", help="count only this function's lines")
    args = parser.parse_args()

    starts = []  # first instruction of each function, by index
    names = {0: "main"}
    by_func = collections.Counter()
    by_line = collections.Counter()
    line = "?"
    stats = ""
    with open(args.log, errors="replace") as log:
        for text in log:
            m = re.match(r"func#(\d+) @(\d+)$", text.strip())
            if m:
                starts.append(int(m.group(2)))
                continue
            m = re.match(r"(?:Func#|Validating \w+\(\) func#)(\d+)", text)
            if m:
                name = re.search(r"\('?(\w+)'?\)|Validating (\w+)\(\)", text)
                if name:
                    names[int(m.group(1))] = name.group(1) or name.group(2)
                continue
            m = re.match(r"; (.*) @ (\S+)$", text.rstrip("\n"))
            if m:
                line = f"{m.group(2)} {m.group(1)[:90]}"
                continue
            m = re.match(r"(\d+): \(", text)
            if m and starts:
                insn = int(m.group(1))
                func = max(i for i, s in enumerate(starts) if s <= insn)
                if args.func and names.get(func) != args.func:
                    continue
                by_func[func] += 1
                by_line[line] += 1
                continue
            if text.startswith("verification time"):
                stats = text.strip()
    if not starts:
        print(f"{args.log}: no level-2 verifier log (set HPD_VERIFIER_LOG, not HPD_VERIFIER_STATS)", file=sys.stderr)
        return 1
    print(stats)
    print(f"instructions counted: {sum(by_func.values())}")
    for func, n in sorted(by_func.items(), key=lambda kv: -kv[1]):
        print(f"{n:8d}  func#{func} {names.get(func, '?')}")
    print()
    for where, n in by_line.most_common(args.lines):
        print(f"{n:8d}  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
