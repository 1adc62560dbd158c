#!/usr/bin/env python3
"""Checks that every verb and flag `hpctl --help` lists (recursively through its subcommands)
appears in the hpctl(1) man page, and that the page itself lints clean with mandoc.
Usage: check_man_flags.py HPCTL MANPAGE"""
import re
import subprocess
import sys


def help_text(hpctl, path):
    out = subprocess.run([hpctl, *path, "--help"], capture_output=True, text=True, check=True)
    return out.stdout


def walk(hpctl, path, found):
    text = help_text(hpctl, path)
    for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text.split("Subcommands:")[0]):
        found.setdefault(flag, set()).add(" ".join(path) or "hpctl")
    if "Subcommands:" in text:
        for line in text.split("Subcommands:")[1].splitlines():
            m = re.match(r"^  ([a-z][a-z-]*)\s", line)
            if m:
                verb = m.group(1)
                found.setdefault(verb, set()).add("verb")
                walk(hpctl, path + [verb], found)


def main():
    hpctl, manpage = sys.argv[1], sys.argv[2]
    page = open(manpage, encoding="utf-8").read()
    # roff escapes "-" as "\-"; compare on the plain text.
    plain = page.replace("\\-", "-").replace("\\fB", "").replace("\\fR", "").replace("\\fI", "")
    found = {}
    walk(hpctl, [], found)
    missing = [f"{name} (from {', '.join(sorted(where))})" for name, where in sorted(found.items())
               if not re.search(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])", plain)]
    lint = subprocess.run(["mandoc", "-T", "lint", "-W", "warning", manpage], capture_output=True, text=True)
    problems = 0
    if missing:
        print("in `hpctl --help` but not in " + manpage + ":")
        for m in missing:
            print("  " + m)
        problems += len(missing)
    if lint.returncode != 0 or lint.stdout.strip() or lint.stderr.strip():
        print("mandoc -T lint -W warning:\n" + lint.stdout + lint.stderr)
        problems += 1
    print(f"checked {len(found)} verbs and flags against {manpage}: {problems} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
