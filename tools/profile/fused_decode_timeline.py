#!/usr/bin/env python3
"""Summarises a fused decode timeline (HLM_FUSED_DECODE_TIMELINE=FILE, infer/cuda/cuda_engine.h): per layer phase,
the time from the slowest block's start of the phase to the slowest block's end of it, averaged over layers (us).

usage: python3 tools/profile/fused_decode_timeline.py TIMELINE.csv[.xz]
The CSV has columns layer, block, m0..m9 (ns from the step's first mark; ops/fused_decode/fused_decode_cuda.h names
the marks). Prints the kernel span, then one line per phase; the "barrier" rows are the grid barriers' own time."""
import collections
import csv
import io
import lzma
import sys

PHASES = ["q/k/v", "barrier", "attention", "barrier", "o_proj", "barrier", "gate/up", "barrier", "down",
          "barrier (next layer)"]


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


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
