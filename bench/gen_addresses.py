#!/usr/bin/env python3
"""Addresses drawn uniformly (seeded) from the bytes of an ELF file's sized function symbols
(T/t/W/w in `nm -S`; PLT and data excluded), one hex address per line on stdout.

Usage: bench/gen_addresses.py BINARY COUNT [SEED=42]
The symbolizer benchmarks (symbolize_bench.sh, symbolize_cpu.sh) all draw their lists here, so
that the same binary and count give the same list.
"""
import random, subprocess, sys
path, n = sys.argv[1], int(sys.argv[2])
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 42
out = subprocess.run(["nm", "-S", "--defined-only", path], capture_output=True, text=True).stdout
spans = []
for line in out.splitlines():
    p = line.split()
    if len(p) == 4 and p[2] in "TtWw" and int(p[1], 16) > 0:
        spans.append((int(p[0], 16), int(p[1], 16)))
total = sum(s for _, s in spans)
rng = random.Random(seed)
cum, acc = [], 0
for a, s in spans:
    acc += s
    cum.append(acc)
import bisect
for _ in range(n):
    x = rng.randrange(total)
    i = bisect.bisect_right(cum, x)
    a, s = spans[i]
    print(hex(a + x - (cum[i] - s)))
