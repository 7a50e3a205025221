#!/usr/bin/env python3
"""Summarises a fused decode timeline (HLM_FUSED_DECODE_TIMELINE=FILE, infer/cuda/cuda_engine.h): per layer phase,
the time from the slowest block's start of the phase to the slowest block's end of it, averaged over layers (us).

usage: python3 tools/profile/fused_decode_timeline.py TIMELINE.csv[.xz]
The CSV has columns layer, block, m0..m13 (ns from the step's first mark; ops/fused_decode/fused_decode_cuda.h names
the marks; m10..m13 are empty in blocks without an attention unit; older files have m0..m9 only). Prints the kernel
span, then one line per phase (the "barrier" rows are the grid barriers' own time), then the attention units' steps:
median and slowest unit per layer, averaged over layers."""
import collections
import csv
import io
import lzma
import sys

PHASES = ["q/k/v", "barrier", "attention", "barrier", "o_proj", "barrier", "gate/up", "barrier", "down",
          "barrier (next layer)"]
# The attention unit's steps: (name, from mark, to mark).
UNIT_STEPS = [("heads + block ids", 2, 10), ("keys", 10, 11), ("warp merge + partial + counter", 11, 12),
              ("last split's merge", 12, 13), ("to the phase's end mark", 13, 3)]


def unit_steps(rows, layers):
    """Per unit step: (median over units, slowest unit) in ns, each averaged over layers; None without the marks."""
    if "m13" not in rows[0]:
        return None
    per = collections.defaultdict(lambda: ([], []))
    for l in range(layers):
        units = [r for r in rows if int(r["layer"]) == l and r["m13"] != ""]
        if not units:
            continue
        for name, a, b in UNIT_STEPS:
            d = sorted(int(r[f"m{b}"]) - int(r[f"m{a}"]) for r in units)
            per[name][0].append(d[len(d) // 2])
            per[name][1].append(d[-1])
    return {name: (sum(m) / len(m), sum(x) / len(x)) for name, (m, x) in per.items() if m}


def main(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        rows = list(csv.DictReader(io.StringIO(f.read())))
    marks = collections.defaultdict(dict)
    for r in rows:
        marks[int(r["layer"])][int(r["block"])] = [int(r[f"m{k}"]) for k in range(10)]
    layers, blocks = len(marks), len(marks[0])
    total = collections.Counter()
    for l in range(layers):
        for k in range(10):
            start = max(marks[l][b][k] for b in range(blocks))
            if k < 9:
                end = max(marks[l][b][k + 1] for b in range(blocks))
            elif l + 1 < layers:
                end = max(marks[l + 1][b][0] for b in range(blocks))
            else:
                continue
            total[k] += end - start
    span = max(marks[layers - 1][b][9] for b in range(blocks)) - min(marks[0][b][0] for b in range(blocks))
    print(f"{layers} layers, {blocks} blocks: kernel span {span / 1e3:.1f} us, {span / 1e3 / layers:.1f} us per layer")
    for k, name in enumerate(PHASES):
        print(f"  {name:<22} {total[k] / 1e3 / layers:7.2f} us per layer")
    steps = unit_steps(rows, layers)
    if steps:
        print("attention units (us per layer: median unit / slowest unit):")
        for name, _, _ in UNIT_STEPS:
            med, worst = steps[name]
            print(f"  {name:<32} {med / 1e3:7.2f} / {worst / 1e3:7.2f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
