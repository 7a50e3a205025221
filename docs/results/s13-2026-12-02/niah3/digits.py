#!/usr/bin/env python3
"""Per-cell summary of a niah_items.jsonl: exact accuracy, per-position digit agreement of the first 7-digit run of
the response with the first expected value (chance 1/10 per digit), distinct answers. Usage: digits.py ITEMS.jsonl"""
import collections, json, re, sys

cells = collections.defaultdict(list)
for line in open(sys.argv[1]):
    d = json.loads(line)
    cells[(d["task"], d["length"])].append(d)
for (task, length), items in sorted(cells.items()):
    correct = sum(d["correct"] for d in items)
    match = total = 0
    answers = collections.Counter()
    for d in items:
        m = re.search(r"\d{7}", d["response"])
        got = m.group(0) if m else ""
        answers[got] += 1
        exp = d["expected"][0]
        if exp.isdigit():
            total += 7
            match += sum(1 for a, b in zip(got, exp) if a == b)
    rate = f"{match / total:.3f}" if total else "-"
    print(f"{task} {length}: {correct}/{len(items)} correct, digit agreement {rate}, "
          f"{len(answers)} distinct answers, most common {answers.most_common(2)}")
