#!/usr/bin/env python3
"""Session 17 sanity ladder: replace an experiment folder's derived corpus (<out>/data) with easy NIAH-like
examples in the answer-loss format (the hook needs "<text>" before a "</Answer>\n<Answer>" seam), bytes tokenizer
(1 token per ASCII byte), every document exactly seq_len bytes. Then `hybridlm niah experiment` on the same --out
skips its data stage and trains on these (its validation / test rows are these examples too).

usage: make_easy.py OUT_DATA_DIR --seq-len N --docs N --digits D --hay H --needles K [--real-prompt] [--seed S]
  --hay H       haystack bytes (random lower-case words) around the needles
  --needles K   needles with distinct keys; the question asks one of them (K=1: single)
  --real-prompt the English NIAH template (task line, question, answer form) around the haystack
"""
import argparse, hashlib, json, os, random, subprocess

KEYS = ["castle", "hammer", "diamond", "river", "window", "garden", "candle", "mirror", "bottle", "ladder",
        "pencil", "button", "carpet", "feather", "harbor", "jacket", "kettle", "lantern", "magnet", "needle"]
p = argparse.ArgumentParser()
p.add_argument("out"); p.add_argument("--seq-len", type=int, required=True); p.add_argument("--docs", type=int, required=True)
p.add_argument("--digits", type=int, default=7); p.add_argument("--hay", type=int, default=0)
p.add_argument("--needles", type=int, default=1); p.add_argument("--real-prompt", action="store_true")
p.add_argument("--seed", type=int, default=1)
p.add_argument("--digits-min", type=int, default=0, help="values of a uniform number of digits in [this, --digits]")
p.add_argument("--nkeys", type=int, default=20, help="keys drawn from the first N of KEYS (1: always the same key)")
p.add_argument("--repeat", type=int, default=0, help="instead: a random string of this many letters repeated (loss all)")
a = p.parse_args()
rng = random.Random(a.seed)

def words(n):
    s = ""
    while len(s) < n:
        s += "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 7))) + " "
    return s[:n]

def example():
    if a.repeat:
        unit = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(a.repeat))
        return (unit * (a.seq_len // a.repeat + 1))[:a.seq_len]
    keys = rng.sample(KEYS[:a.nkeys], a.needles)
    nd = rng.randint(a.digits_min, a.digits) if a.digits_min else a.digits
    vals = [str(rng.randint(10 ** (nd - 1), 10 ** nd - 1)) for _ in keys]
    q = rng.randrange(a.needles)
    if a.real_prompt:
        needles = [f'The special magic number for "{k}" is: {v}.' for k, v in zip(keys, vals)]
    else:
        needles = [f"{k} is {v}." for k, v in zip(keys, vals)]
    # needles at random places in the haystack
    hay = words(a.hay)
    cuts = sorted(rng.randint(0, len(hay)) for _ in needles)
    parts, prev = [], 0
    for c, n in zip(cuts, needles):
        parts += [hay[prev:c], " " + n + " "]; prev = c
    parts.append(hay[prev:])
    body = "".join(parts)
    if a.real_prompt:
        text = ("Read the text below carefully and remember it; I will ask you a question about it afterwards.\n\n"
                f"<text>\n{body}\n</text>\n\n<Question> Which special magic numbers for \"{keys[q]}\" appear in the "
                "text above? List every one of them. If the text holds no such number, answer \"none\".</Question>\n\n\n"
                "Write your answer in this form:\n<Answer> the numbers </Answer>")
    else:
        text = f"<text>{body}</text> {keys[q]}? <Answer> </Answer>"
    text += f"\n<Answer> {vals[q]} </Answer>\n\n"
    assert len(text) <= a.seq_len, (len(text), a.seq_len)
    return text + words(a.seq_len - len(text))

os.makedirs(a.out, exist_ok=True)
docs = [example() for _ in range(a.docs)]
raw = "".join(json.dumps({"text": d}) + "\n" for d in docs)
path = os.path.join(a.out, "eng_Latn.jsonl.zst")
subprocess.run(["zstd", "-q", "-f", "-o", path], input=raw.encode(), check=True)
sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
json.dump({"format": "hybridlm-corpus", "version": 1,
           "languages": [{"code": "eng_Latn", "file": "eng_Latn.jsonl.zst", "tier": "high", "documents": len(docs),
                          "bytes": sum(len(d.encode()) for d in docs), "sha256": sha}],
           "sources": ["session 17 sanity ladder: " + json.dumps(vars(a))]}, open(os.path.join(a.out, "corpus.json"), "w"), indent=1)
ans = len(f"\n<Answer> {'1' * a.digits} </Answer>")
print(f"{len(docs)} docs, prompt+answer bytes e.g. {len(docs[0].split(chr(10)+chr(10))[0])}; answer span {ans} tokens; "
      f"plateau (format known, digits uniform) = {(a.digits * 2.302585) / ans:.3f} nats/token; first example:")
print(repr(docs[0][:a.seq_len]))
