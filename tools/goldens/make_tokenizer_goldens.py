#!/usr/bin/env python3
"""Writes the tokenizer goldens: HF `tokenizers` ids for every text of tests/golden/tokenizer/texts.jsonl.

Run on the GPU machine (Python `tokenizers`, no internet needed), from the repository root:
    python3 tools/goldens/make_tokenizer_goldens.py --tokenizers data/tokenizers --out tests/golden/tokenizer

Reads data/tokenizers/<name>/tokenizer.json, or tokenizer.json.gz when only the gzip copy was carried over
(scripts/fetch-tokenizers.sh writes both), for name in qwen3, llama3, gemma3, deepseek_v3. Writes
tests/golden/tokenizer/<name>.ids.jsonl:
    line 1:  {"version": 1, "tokenizers": "<tokenizers.__version__>", "tokenizer": "<name>",
              "tokenizer_sha256": "<sha256 of the uncompressed tokenizer.json>", "texts_sha256": "<of texts.jsonl>"}
    then:    {"id": "<text id>", "ids": [...], "decoded": "<decode(ids)>"}  one per text, in texts.jsonl order
ids are Tokenizer.from_str(json).encode(text, add_special_tokens=False).ids (no BOS/EOS); decoded is
decode(ids, skip_special_tokens=False). The C++ test (tests/data/test_tokenizer_json.cpp) checks the sha256 before
comparing, so goldens and tokenizer files cannot drift apart silently. Standard library + `tokenizers` only.
"""
import argparse
import gzip
import hashlib
import json
import pathlib
import sys

NAMES = ["qwen3", "llama3", "gemma3", "deepseek_v3"]
FORMAT_VERSION = 1


def read_tokenizer_json(folder):
    plain, packed = folder / "tokenizer.json", folder / "tokenizer.json.gz"
    if plain.exists():
        return plain.read_bytes()
    if packed.exists():
        return gzip.decompress(packed.read_bytes())
    raise SystemExit(f"make_tokenizer_goldens: neither {plain} nor {packed} exists "
                     "(run scripts/fetch-tokenizers.sh and carry data/tokenizers/)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizers", type=pathlib.Path, default=pathlib.Path("data/tokenizers"))
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("tests/golden/tokenizer"))
    ap.add_argument("--texts", type=pathlib.Path, help="default: <out>/texts.jsonl")
    ap.add_argument("--only", nargs="*", choices=NAMES, help="a subset of the tokenizers")
    args = ap.parse_args()

    import tokenizers  # imported here so --help works without the package

    texts_path = args.texts or args.out / "texts.jsonl"
    texts_bytes = texts_path.read_bytes()
    rows = [json.loads(line) for line in texts_bytes.decode("utf-8").split("\n") if line.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    failed = False
    for name in args.only or NAMES:
        try:
            raw = read_tokenizer_json(args.tokenizers / name)
            tok = tokenizers.Tokenizer.from_str(raw.decode("utf-8"))
            header = {"version": FORMAT_VERSION, "tokenizers": tokenizers.__version__, "tokenizer": name,
                      "tokenizer_sha256": hashlib.sha256(raw).hexdigest(),
                      "texts_sha256": hashlib.sha256(texts_bytes).hexdigest()}
            out_path = args.out / f"{name}.ids.jsonl"
            total = 0
            with out_path.open("w", encoding="utf-8", newline="\n") as f:
                f.write(json.dumps(header) + "\n")
                for row in rows:
                    ids = tok.encode(row["text"], add_special_tokens=False).ids
                    total += len(ids)
                    decoded = tok.decode(ids, skip_special_tokens=False)
                    f.write(json.dumps({"id": row["id"], "ids": ids, "decoded": decoded}, ensure_ascii=False) + "\n")
            print(f"[OK] {name}: {len(rows)} texts, {total} tokens -> {out_path}")
        except Exception as e:  # report every tokenizer, fail at the end
            failed = True
            print(f"[FAILED] {name}: {e!r}", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
