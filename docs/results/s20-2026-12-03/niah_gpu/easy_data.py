#!/usr/bin/env python3
"""Session 20: session 17's make_easy.py examples (docs/results/s17-2026-12-03/niahdbg/make_easy.py), as a module,
written in parallel and without the zstd program (the device machine may lack it).

Contract: `examples(n, seed, args)` returns the n documents make_easy.py writes for the same arguments and --seed
(the same random draws in the same order, so the same bytes; checked against make_easy.py in the README). `write`
cuts the documents into --chunks (16) chunks, made by up to --workers processes: chunk 0 uses --seed itself (its
documents are make_easy.py's first ones), chunk i > 0 the seed 1000 * seed + i; so the corpus depends on the
arguments alone, not on the number of workers. The corpus file is a valid zstd frame of raw (stored) blocks, which
hybridlm's reader decompresses like any other; corpus.json as make_easy.py writes it (sha256 of the file).

usage: easy_data.py OUT_DIR --seq-len N --docs N [--workers W] [--chunks 16] [make_easy.py's example options]
       easy_data.py OUT_DIR --hay-corpus --docs N      (plain sentences: haystack text for the experiment's own
                                                        evaluation cell, which needs held-out sentences)
"""
import argparse, hashlib, json, os, random, struct
from multiprocessing import Pool

KEYS = ["castle", "hammer", "diamond", "river", "window", "garden", "candle", "mirror", "bottle", "ladder",
        "pencil", "button", "carpet", "feather", "harbor", "jacket", "kettle", "lantern", "magnet", "needle"]


def parser():
    p = argparse.ArgumentParser()
    p.add_argument("out"); p.add_argument("--seq-len", type=int, default=128); p.add_argument("--docs", type=int, required=True)
    p.add_argument("--digits", type=int, default=7); p.add_argument("--hay", type=int, default=0)
    p.add_argument("--needles", type=int, default=1); p.add_argument("--real-prompt", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--digits-min", type=int, default=0)
    p.add_argument("--nkeys", type=int, default=20)
    p.add_argument("--repeat", type=int, default=0)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--chunks", type=int, default=16)
    p.add_argument("--hay-corpus", action="store_true")
    return p


def examples(n, seed, a):
    """make_easy.py's example() n times from random.Random(seed); `a` holds its options (argparse names)."""
    rng = random.Random(seed)

    def words(k):
        s = ""
        while len(s) < k:
            s += "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 7))) + " "
        return s[:k]

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
        hay = words(a.hay)
        cuts = sorted(rng.randint(0, len(hay)) for _ in needles)
        parts, prev = [], 0
        for c, nd_ in zip(cuts, needles):
            parts += [hay[prev:c], " " + nd_ + " "]; prev = c
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

    return [example() for _ in range(n)]


def hay_docs(n, seed=7):
    """Plain 'sentences' (>= 8 characters, ending with a full stop) for the experiment's held-out haystack text."""
    rng = random.Random(seed)
    w = lambda: "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 7)))
    return [" ".join(" ".join(w() for _ in range(rng.randint(4, 9))) + "." for _ in range(12)) for _ in range(n)]


def zstd_raw_frame(data):
    """A zstd frame (RFC 8878) of raw blocks: magic, frame header (window 128 KiB, no content size, no checksum)."""
    out = [struct.pack("<I", 0xFD2FB528), bytes([0x00, 7 << 3])]
    step = 1 << 17
    chunks = [data[i:i + step] for i in range(0, len(data), step)] or [b""]
    for k, c in enumerate(chunks):
        last = 1 if k == len(chunks) - 1 else 0
        out.append(struct.pack("<I", (len(c) << 3) | last)[:3] + c)  # block type 0 (raw) in bits 1-2
    return b"".join(out)


def _chunk(job):
    n, seed, a = job
    docs = examples(n, seed, a)
    return "".join(json.dumps({"text": d}) + "\n" for d in docs), sum(len(d.encode()) for d in docs)


def write(a):
    os.makedirs(a.out, exist_ok=True)
    if a.hay_corpus:
        docs = hay_docs(a.docs)
        raw, nbytes = "".join(json.dumps({"text": d}) + "\n" for d in docs), sum(len(d.encode()) for d in docs)
    else:
        k = max(1, min(a.chunks, a.docs))
        sizes = [a.docs // k + (1 if i < a.docs % k else 0) for i in range(k)]
        jobs = [(s, a.seed if i == 0 else 1000 * a.seed + i, a) for i, s in enumerate(sizes)]
        if a.workers > 1 and k > 1:
            with Pool(min(a.workers, k)) as pool:
                parts = pool.map(_chunk, jobs)
        else:
            parts = [_chunk(j) for j in jobs]
        raw, nbytes = "".join(p[0] for p in parts), sum(p[1] for p in parts)
    frame = zstd_raw_frame(raw.encode())
    path = os.path.join(a.out, "eng_Latn.jsonl.zst")
    open(path, "wb").write(frame)
    json.dump({"format": "hybridlm-corpus", "version": 1,
               "languages": [{"code": "eng_Latn", "file": "eng_Latn.jsonl.zst", "tier": "high", "documents": a.docs,
                              "bytes": nbytes, "sha256": hashlib.sha256(frame).hexdigest()}],
               "sources": ["session 20 easy_data.py (session 17 make_easy.py examples): " + json.dumps(vars(a))]},
              open(os.path.join(a.out, "corpus.json"), "w"), indent=1)
    return raw


if __name__ == "__main__":
    args = parser().parse_args()
    raw = write(args)
    first = json.loads(raw.split("\n", 1)[0])["text"]
    print(f"{args.docs} docs in {args.out}; first: {first[:args.seq_len]!r}")
