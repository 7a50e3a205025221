#!/usr/bin/env python3
"""Session 17: per length, the digit agreement (position by position, first number of the response against the
expected value) and the distinct answers of a niah_items.jsonl. usage: items_digits.py ITEMS.jsonl"""
import json, re, sys
items = [json.loads(l) for l in open(sys.argv[1])]
for length in sorted({i["length"] for i in items}):
    its = [i for i in items if i["length"] == length]
    agree = total = 0; seen = []
    for i in its:
        m = re.findall(r"\d+", i["response"]); a = m[0] if m else ""; g = i["expected"][0]
        seen.append(a); agree += sum(x == y for x, y in zip(a, g)); total += len(g)
    print(f"length {length}: {len(its)} items, correct {sum(i['correct'] for i in its)}, digit agreement "
          f"{agree / total:.3f}, distinct answers {len(set(seen))}, e.g. {seen[:4]} for {[i['expected'][0] for i in its[:4]]}")
