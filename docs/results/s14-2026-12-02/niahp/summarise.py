"""Summarises the items of the session-14 NIAH packed-curriculum run: per task and length, correct items and
responses without a number (none-style answers); distinct numbers; digit agreement with the expected value
(position by position, first number of the response; chance 0.1). Run from this folder."""
import collections, json, re

for arch in ["full_attention", "standard_periodic"]:
    items = [json.loads(line) for line in open(f"items_{arch}.jsonl")]
    cells = collections.defaultdict(lambda: [0, 0, 0])
    numbers, agree = collections.Counter(), [0, 0]
    for it in items:
        c = cells[(it["task"], it["length"])]
        found = re.findall(r"\d{2,}", it["response"])
        c[0] += it["correct"]; c[1] += not found; c[2] += 1
        if it["task"] != "none" and found and len(found[0]) == len(it["expected"][0]):
            numbers.update(found)
            agree[0] += sum(a == b for a, b in zip(found[0], it["expected"][0])); agree[1] += len(found[0])
    print(arch, "(task: correct / no-number responses / items at 64, 256, 1K, 2K)")
    for task in ["single", "multikey", "multiquery", "none"]:
        print(f"  {task:10s}", "  ".join(f"{c[0]}/{c[1]}/{c[2]}" for c in (cells[(task, n)] for n in (64, 256, 1000, 2000))))
    print(f"  distinct numbers {len(numbers)}, most common {numbers.most_common(3)}, digit agreement "
          f"{agree[0] / max(agree[1], 1):.3f}")
