#!/usr/bin/env python3
"""Proves packaging/check-layers.py can fail: on a copy of the tree it must pass, then fail, naming
file:line, on each planted upward use (include, sibling include, link, internal link, a folder
adding to its parent's target) and on a call made outside its home (elf_begin( or ::close( outside
base/), and on a string literal of collect/ naming an hpctl flag, and pass again once the plant is
removed. A member function named close (export's
json_writer.cpp defines Writer::close) is not ::close( and passes.
Usage: check_layers_test.py CHECK_SCRIPT SOURCE_ROOT"""

import os
import shutil
import subprocess
import sys
import tempfile

failures = []


def run(script, root):
    r = subprocess.run([sys.executable, script, root], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def expect(cond, what, output=""):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
        print(output)


def plant(root, path, text, where="end"):
    """Adds `text` to root/path; returns the 1-based line it lands on and the original content."""
    full = os.path.join(root, path)
    with open(full, encoding="utf-8") as f:
        original = f.read()
    if where == "end":
        content = original + ("" if original.endswith("\n") else "\n") + text + "\n"
        line = content.count("\n")
    else:  # after the first line (a file's header comment)
        first, rest = original.split("\n", 1)
        content = first + "\n" + text + "\n" + rest
        line = 2
    with open(full, "w", encoding="utf-8") as f:
        f.write(content)
    return line, original


def main():
    script, source = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="hpd-layers-") as tmp:
        root = os.path.join(tmp, "src")
        shutil.copytree(source, root, symlinks=True,
                        ignore=shutil.ignore_patterns(".git", "build", "build-*", "__pycache__"))
        code, out = run(script, root)
        expect(code == 0, "the unmodified copy passes", out)

        cases = [
            ("model/src/profile.cpp", '#include "hpd/export/firefox.h"', "start",
             "model including an export header (upward)"),
            ("capture/src/capture_writer.cpp", '#include "hpd/symbolizer/symbolizer.h"', "start",
             "capture including the symbolizer (a sibling of the same rank)"),
            ("base/src/hex.cpp", '#include "hpd/model/raw_profile.h"', "start",
             "base including the model (upward)"),
            ("unwind/CMakeLists.txt", "target_link_libraries(hpd_unwind PRIVATE hpd_collect)", "end",
             "unwind linking collect (upward link)"),
            ("export/CMakeLists.txt", "target_link_libraries(hpd_export PRIVATE hpd_collect_internal)", "end",
             "export linking collect's private headers"),
            ("collect/src/mip/CMakeLists.txt", "target_sources(hpd_collect PRIVATE extra.cpp)", "end",
             "a folder adding a file to its parent's library"),
            ("unwind/src/cfi_module.cpp",
             "Elf* planted_open(int fd) { return elf_begin (fd, ELF_C_READ, nullptr); }", "end",
             "unwind opening an ELF file with elf_begin( instead of base's ElfHandle"),
            ("export/src/collapsed_writer.cpp", "void planted_close(int fd) { ::close (fd); }", "end",
             "export closing a descriptor with ::close( instead of base's UniqueFd"),
            ("collect/src/recorder.cpp", 'const char* planted_advice = "drop --backend perf";', "end",
             "collect wording an error with hpctl's flag --backend"),
            ("collect/src/recorder.cpp", 'const char* planted_raw = R"(use\n--pid P)";', "end",
             "collect naming hpctl's --pid in a raw string, on its second line"),
        ]
        for path, text, where, what in cases:
            line, original = plant(root, path, text, where)
            code, out = run(script, root)
            expect(code == 1 and ("%s:%d:" % (path, line)) in out, what + ": fails naming %s:%d" % (path, line), out)
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(original)

        # base/ calls elf_begin( (the unmodified copy passed); a comment elsewhere may name it.
        plant(root, "symbolizer/src/elf_file.cpp", "// not elf_begin(fd, ...): ElfHandle::open_fd", "end")
        code, out = run(script, root)
        expect(code == 0, "a comment outside base/ that names elf_begin( passes", out)

        # A comment of collect/ may name hpctl's flags (where a field comes from); a character literal
        # or a word that only starts like a flag (--pidfd) is no flag.
        plant(root, "collect/src/recorder.cpp",
              "// RecordOptions::pids are hpctl's --pid\nconst char planted_dash = '-';\n"
              "const char* planted_word = \"--pidfd\";", "end")
        code, out = run(script, root)
        expect(code == 0, "a comment of collect/ naming --pid, and a longer word, pass", out)

        # A downward include and a same-layer include stay allowed.
        plant(root, "export/src/report/compute.cpp", '#include "hpd/model/profile.h"\n#include "json_writer.h"', "start")
        code, out = run(script, root)
        expect(code == 0, "downward and same-layer includes pass", out)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
