#!/usr/bin/env python3
"""check-layers.py: fails when a library of hpd uses a layer above its own (issue 20).

Reads the tree (no build needed) and reports, as FILE:LINE, every
  - #include of a header that belongs to a higher layer, or to another layer of the same rank;
  - target_link_libraries() from a target to a target of such a layer, or to another layer's
    NAME_internal target (private headers, for that library's own tests);
  - target_sources()/target_link_libraries()/... on a target from a CMakeLists.txt other than the
    one that defines it (a folder adding files to its parent's library);
  - a call that has one home (OWNED_CALLS: elf_begin(, elf_nextscn(, gelf_getphdr( and ::close( in base/)
    made outside that home;
  - a string literal of the collection engine (collect/) that names an option of hpctl (CALLER_WORDS:
    --pid, --all, --backend, ...): the engine reports what is wrong as a typed reason, and the layer
    that owns the words (cli/ for hpctl's flags, daemon/ for hpd's request fields) words it.
Usage: packaging/check-layers.py [SOURCE_ROOT]   (default: the tree this script is in)
Exit status: 0 when clean (allow-listed uses are printed, not counted), 1 on a violation.
Python 3 standard library only; run by packaging/test.sh before the build.
"""

import os
import re
import sys

# The layer order, lowest first: THE one place it is written down (docs/architecture.md shows it).
# A file may use its own layer and layers of a lower rank. Layers of one rank are siblings and must
# not use each other. A path belongs to the layer of its longest matching prefix, so single files
# could sit in a layer other than their folder's.
LAYERS = [
    # rank, name, path prefixes (relative to the source root)
    (0, "base", ["base/"]),  # UniqueFd, hex, ELF + build-id, demangling
    (1, "model", ["model/"]),  # RawProfile, Profile
    (2, "bpf", ["bpf/"]),  # the BPF programs and their record headers
    (2, "capture", ["capture/"]),  # .hpr files
    (2, "unwind", ["unwind/"]),  # CFI unwinding
    (2, "symbolizer", ["symbolizer/"]),  # ELF/DWARF symbols, RawProfile -> Profile
    (3, "collect", ["collect/"]),  # the collection engine, MIP, call counts
    (4, "export", ["export/"]),  # Firefox, pprof, collapsed, report
    (5, "session", ["session/"]),  # what hpctl and hpd share: RecordRequest, the record pipeline
    (6, "daemon", ["daemon/"]),  # hpd: protocol, service, continuous profiling
    (7, "cli", ["cli/"]),  # hpctl
]

# Known upward uses, each with the reason it is allowed until removed. Keys are (using file, used
# file) for includes, (using target, used target) for links and (file, word) for CALLER_WORDS.
ALLOWED = {
    ("collect/src/perf/perf_data_reader.cpp", "--call-graph"):
        "perf record's own option (--call-graph lbr), named in the refusal of a perf.data file",
}

# Calls with one home: (the call, the layer that alone may make it, what to use instead). The rest
# of the tree goes through that layer's wrapper, so that the rule is written once.
OWNED_CALLS = [
    ("elf_begin(", "base", "ELF files are opened in base/ only: use ElfHandle or OpenedElf (hpd/base/elf.h)"),
    ("elf_nextscn(", "base", "sections are walked in base/ only: use ElfView::sections() or section(name) "
                             "(hpd/base/elf.h)"),
    ("gelf_getphdr(", "base", "program headers are read in base/ only: use ElfView::load_segments(), "
                              "has_program_header() or interpreter() (hpd/base/elf.h)"),
    # "::close(" with its colons: a member function named close (export's json Writer::close) is not
    # the system call. tests/ is outside the layers and keeps its raw closes (pipe ends handed to
    # fixtures, a descriptor closed behind its owner on purpose).
    ("::close(", "base", "descriptors are closed in base/ only: own them with UniqueFd (hpd/base/unique_fd.h); "
                         "its close() returns close(2)'s error for an output"),
]

# Words of a caller that a lower layer must not use in its messages: (the layer, the words as a regex
# on a string literal's text, why). hpctl's options are the command line's (cli/main.cpp); collect
# throws RecordTargetError / RecordOptionError with the reason instead (hpd/collect/recorder.h).
CALLER_WORDS = [
    ("collect",
     r"(?<![\w-])--(pid|all|cgroup|backend|call-graph|alloc|alloc-mean|calls|calls-counter|call-latency|"
     r"kernel|no-kernel|off-cpu|no-off-cpu|off-cpu-min-us|mip|no-mip|cfi-rows|stack-size|frequency|event|"
     r"duration|output|no-follow-children)(?![\w-])",
     "the collection engine names hpctl's option %s: report a typed reason (RecordTargetError, "
     "RecordOptionError, a field of the result) and word it in cli/ (hpctl) or daemon/ (hpd)"),
]

SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".h", ".hpp", ".S")
TARGET_COMMANDS = ("target_sources", "target_link_libraries", "target_include_directories",
                   "target_compile_definitions", "target_compile_options", "target_link_options",
                   "set_target_properties")
LINK_KEYWORDS = {"PUBLIC", "PRIVATE", "INTERFACE", "LINK_PUBLIC", "LINK_PRIVATE", "LINK_INTERFACE_LIBRARIES"}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def layer_of(path):
    """(rank, name) of a root-relative path, or None outside every layer (tests/, bench/, ...)."""
    best = None
    for rank, name, prefixes in LAYERS:
        for prefix in prefixes:
            if path.startswith(prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), rank, name)
    return None if best is None else (best[1], best[2])


def is_upward(user, used):
    """Whether layer `user` may not use layer `used` (both (rank, name))."""
    return used[0] > user[0] or (used[0] == user[0] and used[1] != user[1])


def describe(layer):
    return "%s (rank %d)" % (layer[1], layer[0])


def layered_files(root):
    files = []
    tops = sorted({prefix.split("/")[0] for _, _, prefixes in LAYERS for prefix in prefixes})
    for top in tops:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for f in sorted(filenames):
                rel = os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")
                if layer_of(rel) is not None:
                    files.append(rel)
    return files


def resolve_include(root, includer, name, by_suffix):
    """Repo files an #include may name: beside the includer first (the compiler's first look for
    quotes); else every layered file whose path ends with the name (the include directories). Names
    found nowhere (system, generated headers) give []."""
    beside = os.path.normpath(os.path.join(os.path.dirname(includer), name)).replace(os.sep, "/")
    if os.path.isfile(os.path.join(root, beside)) and layer_of(beside) is not None:
        return [beside]
    return by_suffix.get(name.lstrip("./"), [])


def source_lines(root, files):
    """(file, its layer, line number, line) for every line of the layered source files."""
    for f in files:
        if not f.endswith(SOURCE_SUFFIXES):
            continue
        user = layer_of(f)
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as src:
            for lineno, line in enumerate(src, 1):
                yield f, user, lineno, line


def check_includes(root, files, report):
    by_suffix = {}
    for f in files:
        parts = f.split("/")
        for i in range(1, len(parts)):
            by_suffix.setdefault("/".join(parts[i:]), []).append(f)
    for f, user, lineno, line in source_lines(root, files):
        m = INCLUDE_RE.match(line)
        if not m or (m.group(1) == "<" and not m.group(2).startswith("hpd/")):
            continue
        candidates = resolve_include(root, f, m.group(2), by_suffix)
        if not candidates:
            continue
        # Of several same-named headers, the compiler may reach the most permissive one:
        # an include is upward only when every candidate is.
        if any(not is_upward(user, layer_of(c)) for c in candidates):
            continue
        used = candidates[0]
        report(f, lineno, (f, used),
               "upward #include \"%s\" (%s, layer %s) from layer %s" %
               (m.group(2), used, describe(layer_of(used)), describe(user)))


def check_owned_calls(root, files, report):
    # "name(" matches name, optional blanks, "(", not preceded by a letter, digit or underscore.
    calls = [(call, re.compile(r"(?<!\w)" + re.escape(call[:-1]) + r"\s*\("), home, advice)
             for call, home, advice in OWNED_CALLS]
    for f, user, lineno, line in source_lines(root, files):
        code = line.split("//", 1)[0]  # a comment may name the call
        for call, pattern, home, advice in calls:
            if user[1] != home and pattern.search(code):
                report(f, lineno, (f, call), "%s outside %s/ (layer %s): %s" % (call, home, describe(user), advice))


def string_literals(text):
    """(line, text) of each string literal of C/C++ source `text`, comments and character literals
    skipped; raw strings R"d(...)d" included."""
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            line += text.count("\n", i, end)
            i = end
        elif c == "'":
            j = i + 1
            while j < n and text[j] != "'" and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif c == '"':
            raw = i > 0 and text[i - 1] == "R" and (i < 2 or not (text[i - 2].isalnum() or text[i - 2] == "_"))
            if raw:
                open_paren = text.find("(", i)
                close = text.find(")" + text[i + 1:open_paren] + '"', open_paren)
                close = n if close < 0 else close
                yield line, text[open_paren + 1:close]
                line += text.count("\n", i, close)
                i = close + open_paren - i + 1
                continue
            j = i + 1
            while j < n and text[j] != '"' and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            yield line, text[i + 1:j]
            i = j + 1
        else:
            i += 1


def check_caller_words(root, files, report):
    rules = [(layer, re.compile(words), why) for layer, words, why in CALLER_WORDS]
    for f in files:
        if not f.endswith(SOURCE_SUFFIXES):
            continue
        layer = layer_of(f)
        applicable = [(pattern, why) for name, pattern, why in rules if name == layer[1]]
        if not applicable:
            continue
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as src:
            text = src.read()
        for lineno, literal in string_literals(text):
            for pattern, why in applicable:
                m = pattern.search(literal)
                if m:  # the line of the word itself, in a literal over several lines
                    report(f, lineno + literal.count("\n", 0, m.start()), (f, m.group(0)), why % m.group(0))


def cmake_commands(text):
    """(command, args, line) for each command call of a CMake file, comments removed."""
    text = re.sub(r"#[^\n]*", "", text)
    pos = 0
    for m in re.finditer(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(", text):
        if m.start() < pos:
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        pos = i
        args = re.findall(r'"[^"]*"|[^\s()]+', text[m.end():i - 1])
        yield m.group(1).lower(), [a.strip('"') for a in args], text.count("\n", 0, m.start()) + 1


def check_cmake(root, files, report):
    lists = [f for f in files if f.endswith("CMakeLists.txt")]
    parsed = {}
    targets = {}  # name -> (layer, defining CMakeLists.txt)
    for f in lists:
        with open(os.path.join(root, f), encoding="utf-8") as src:
            parsed[f] = list(cmake_commands(src.read()))
        folder = os.path.dirname(f)
        for command, args, _ in parsed[f]:
            if command not in ("add_library", "add_executable", "add_custom_target") or not args:
                continue
            layer = layer_of(f)
            # A target is in the layer of its first source file, else of its folder.
            for arg in args[1:]:
                if arg.endswith(SOURCE_SUFFIXES):
                    src = arg.replace("${CMAKE_CURRENT_SOURCE_DIR}/", "")
                    src = src[len("${PROJECT_SOURCE_DIR}/"):] if src.startswith("${PROJECT_SOURCE_DIR}/") \
                        else os.path.normpath(os.path.join(folder, src)).replace(os.sep, "/")
                    layer = layer_of(src) or layer
                    break
            targets[args[0]] = (layer, f)
    for f in lists:
        for command, args, lineno in parsed[f]:
            if command not in TARGET_COMMANDS or not args or args[0] not in targets:
                continue
            target = args[0]
            user, home = targets[target]
            if home != f:
                report(f, lineno, (f, target),
                       "%s() on %s, which %s defines: a target's sources and links belong in its own "
                       "CMakeLists.txt" % (command, target, home))
            if command != "target_link_libraries":
                continue
            for lib in args[1:]:
                if lib in LINK_KEYWORDS or lib not in targets:
                    continue
                used = targets[lib][0]
                # NAME_internal targets expose a library's private headers to its own tests only.
                if lib.endswith("_internal") and used != user:
                    report(f, lineno, (target, lib), "%s (layer %s) links %s, the private headers of "
                           "layer %s: make what it needs public" % (target, describe(user), lib, describe(used)))
                elif is_upward(user, used):
                    report(f, lineno, (target, lib), "upward link %s (layer %s) -> %s (layer %s)" %
                           (target, describe(user), lib, describe(used)))


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    if not os.path.isfile(os.path.join(root, "CMakeLists.txt")):
        print("check-layers: %s is not hpd's source tree (no CMakeLists.txt)" % root, file=sys.stderr)
        return 2
    violations = []
    used_allowances = set()

    def report(path, lineno, key, message):
        if key in ALLOWED:
            used_allowances.add(key)
            print("%s:%d: allowed (%s): %s" % (path, lineno, ALLOWED[key], message))
        else:
            violations.append("%s:%d: %s" % (path, lineno, message))

    files = layered_files(root)
    check_includes(root, files, report)
    check_cmake(root, files, report)
    check_owned_calls(root, files, report)
    check_caller_words(root, files, report)
    for key in sorted(set(ALLOWED) - used_allowances):
        print("check-layers: note: allow-list entry %s -> %s matched nothing; remove it" % key)
    for v in violations:
        print(v, file=sys.stderr)
    if violations:
        print("check-layers: %d upward use(s), calls out of their home or callers' words in a lower layer; "
              "the layer order, the calls' homes and the callers' words are in %s" % (len(violations), __file__),
              file=sys.stderr)
        return 1
    print("check-layers: %d files, layers only point down" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
