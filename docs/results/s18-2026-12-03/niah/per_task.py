#!/usr/bin/env python3
"""Per-task accuracy and digit agreement of the session-18 NIAH runs (docs/niah.md, Session 18).

Reads <seed>/<arch>/niah.csv and niah_items.jsonl.gz beside this script; prints, per seed and architecture, the
correct answers out of n per (task, haystack length), summed over the 10 languages, and for the single task at the
trained lengths (64, 256) the mean share of the 7 expected digits that the first number of the answer has in place.
"""
import collections, csv, gzip, json, os, re, sys

HERE = os.path.dirname(os.path.abspath(__file__))
LENGTHS = ["64", "256", "1000", "2000"]
for seed in ["seed1", "seed2"]:
    for arch in ["full_attention", "standard_periodic", "reverse_periodic", "gdn"]:
        d = os.path.join(HERE, seed, arch)
        if not os.path.isdir(d):
            continue
        agg = collections.defaultdict(lambda: [0, 0])
        for r in csv.DictReader(open(os.path.join(d, "niah.csv"))):
            agg[(r["task"], r["length"])][0] += int(r["correct"])
            agg[(r["task"], r["length"])][1] += int(r["n"])
        agree = []
        for line in gzip.open(os.path.join(d, "niah_items.jsonl.gz"), "rt"):
            item = json.loads(line)
            if item["task"] == "single" and str(item["length"]) in ("64", "256"):
                nums = re.findall(r"\d+", item["response"])
                got = nums[0] if nums else ""
                agree.append(sum(a == b for a, b in zip(item["expected"][0], got)) / len(item["expected"][0]))
        print(f"{seed} {arch}: single-task digit agreement at 64/256 tokens {sum(agree) / len(agree):.3f} "
              f"({len(agree)} answers)")
        for task in ["single", "multikey", "multiquery", "none"]:
            cells = " ".join(f"{agg[(task, n)][0]:3d}/{agg[(task, n)][1]}" for n in LENGTHS)
            print(f"  {task:10s} {cells}   (haystack {', '.join(LENGTHS)} tokens)")
