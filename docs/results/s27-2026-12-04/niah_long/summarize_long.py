#!/usr/bin/env python3
"""Session 27 ([niah] #21): the long-length tables of call.sh's results, for docs/results.md and docs/niah.md.

Reads call/results.csv (summarize.py's per run x language x task x length rows of the 12 trained runs) and the cost
pass's niah.csv (inside call/cost.tgz: seed 1's final model of each architecture alone on the GPU, eng_Latn and
cmn_Hani, the single task, 16 samples per cell) and prints Markdown:
  1. accuracy per architecture x length over the cells that ran (the multi-seed summary leaves a length blank as
     soon as one cell did not run; at 32k a quarter of the cells are "too_long": their prompts pass the models'
     32,768 positions), with the cells counted;
  2. seconds per sample and peak inference state per architecture x length (the cost pass), with the ratios to full
     attention.
Usage: python3 summarize_long.py call/results.csv COST_NIAH_CSV
"""
import csv
import sys
from collections import defaultdict

ARCHS = ["full_attention", "standard_periodic", "reverse_periodic", "gdn"]
results, cost_csv = sys.argv[1], sys.argv[2]

acc = defaultdict(list)      # (arch, length, kind) -> accuracies of the cells that ran
skipped = defaultdict(int)   # (arch, length) -> cells not run
lengths = set()
for r in csv.DictReader(open(results)):
    a, L = r["arch"], int(r["length"])
    lengths.add(L)
    if r["status"] != "ok":
        skipped[(a, L)] += 1
        continue
    acc[(a, L, "all")].append(float(r["accuracy"]))
    if r["task"] != "none":
        acc[(a, L, "num")].append(float(r["accuracy"]))
lengths = sorted(lengths)


def lab(L):
    return f"{L // 1000}k" if L >= 1000 else str(L)


def mean(v):
    return sum(v) / len(v) if v else float("nan")  # results.csv holds percentages


for kind, title in (("all", "mean over the four tasks"), ("num", "number tasks (single, multikey, multiquery)")):
    print(f"**Accuracy (%), {title}, over every cell that ran (3 seeds x languages x tasks)**\n")
    print("| architecture | " + " | ".join(lab(L) for L in lengths) + " |")
    print("|---|" + "---:|" * len(lengths))
    for a in ARCHS:
        cells = []
        for L in lengths:
            v = acc[(a, L, kind)]
            s = f"{mean(v):.1f}"
            if skipped[(a, L)]:
                s += f" ({len(v)} cells; {skipped[(a, L)]} too long)" if kind == "all" else f" ({len(v)} cells)"
            cells.append(s)
        print(f"| {a} | " + " | ".join(cells) + " |")
    print()

rows = [r for r in csv.DictReader(open(cost_csv)) if r["status"] == "ok"]
clens = sorted({int(r["length"]) for r in rows})
sec = defaultdict(list)
peak = defaultdict(list)
pre = defaultdict(list)
for r in rows:
    k = (r["model"], int(r["length"]))
    sec[k].append(float(r["seconds"]) / int(r["n"]))
    pre[k].append(float(r["prefill_seconds"]))
    peak[k].append(int(r["peak_state_bytes"]) / 2**20)
print("**Cost, seed 1's final models alone on the H200 (eng_Latn and cmn_Hani, single task, 16 sequences per "
      "generate call; mean of the two languages)**\n")
print("| architecture | " + " | ".join(f"s/sample {lab(L)}" for L in clens) + " | "
      + " | ".join(f"peak state MiB {lab(L)}" for L in clens) + " |")
print("|---|" + "---:|" * (2 * len(clens)))
for a in ARCHS:
    s = [sum(sec[(a, L)]) / len(sec[(a, L)]) for L in clens]
    p = [max(peak[(a, L)]) for L in clens]
    print(f"| {a} | " + " | ".join(f"{x:.4f}" for x in s) + " | " + " | ".join(f"{x:.1f}" for x in p) + " |")
print()
print("| ratio to full attention at the longest length | s/sample | peak state |")
print("|---|---:|---:|")
L = clens[-1]
fs = sum(sec[("full_attention", L)]) / 2
fp = max(peak[("full_attention", L)])
for a in ARCHS[1:]:
    print(f"| {a} | {sum(sec[(a, L)]) / 2 / fs:.2f} | {max(peak[(a, L)]) / fp:.3f} |")
