#!/usr/bin/env python3
"""Checks hpd's manuals against the binary: every flag of `hpd --help` is in hpd(8), every key
`hpd --check-config` prints is in hpd.conf(5), and both pages lint clean with mandoc.
Usage: check_hpd_man.py HPD HPD.8 HPD.CONF.5"""
import re
import subprocess
import sys


def plain(path):
    page = open(path, encoding="utf-8").read()
    return page.replace("\\-", "-").replace("\\fB", "").replace("\\fR", "").replace("\\fI", "")


def main():
    hpd, page8, page5 = sys.argv[1:4]
    problems = []
    help_text = subprocess.run([hpd, "--help"], capture_output=True, text=True, check=True).stdout
    flags = sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", help_text)))
    text8 = plain(page8)
    problems += [f"{flag} (hpd --help) is not in {page8}" for flag in flags
                 if not re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", text8)]
    # /dev/null: an empty file, so the output lists every key with its default.
    config = subprocess.run([hpd, "--check-config", "--config", "/dev/null"], capture_output=True, text=True,
                            check=True).stdout
    keys = [line.split(" = ")[0] for line in config.splitlines() if " = " in line]
    roff5 = open(page5, encoding="utf-8").read()
    # Each key is documented as a tagged paragraph of its own: `.BI key " = ..."`.
    problems += [f"{key} (hpd --check-config) has no entry in {page5}" for key in keys
                 if not re.search(r"^\.BI " + re.escape(key) + r' " = ', roff5, re.M)]
    for page in (page8, page5):
        lint = subprocess.run(["mandoc", "-T", "lint", "-W", "warning", page], capture_output=True, text=True)
        if lint.returncode != 0 or lint.stdout.strip() or lint.stderr.strip():
            problems.append("mandoc -T lint -W warning " + page + ":\n" + lint.stdout + lint.stderr)
    for p in problems:
        print(p)
    print(f"checked {len(flags)} flags and {len(keys)} keys: {len(problems)} problems")
    return 1 if problems or len(flags) < 4 or len(keys) < 10 else 0


if __name__ == "__main__":
    sys.exit(main())
