"""Disjointness of training text and evaluation (parallel) text.

Every sentence of every parallel set (clean.sentences: NFC, case folded, whitespace collapsed, edge punctuation trimmed,
fragments under MIN_SENTENCE_CHARS left out) must be absent from the training text, compared sentence by sentence with
the same normalisation. The build removes each training line holding such a sentence (EvalFilter) and checks the result
at the end (check_files); a remaining sentence fails the build.

Command line: python3 disjoint.py PARALLEL_DIR TRAIN_JSONL...  (exit 1 and a report when a sentence remains)
"""
import glob
import json
import os
import sys

from clean import sentences


def parallel_sentences(parallel_dir):
    """{sentence key: "set/unit id/lang"} over every *.jsonl parallel set in the folder."""
    out = {}
    for path in sorted(glob.glob(os.path.join(parallel_dir, "*.jsonl"))):
        name = os.path.splitext(os.path.basename(path))[0]
        with open(path, encoding="utf-8") as f:
            for line in f:
                unit = json.loads(line)
                for lang, text in unit.items():
                    if lang == "id":
                        continue
                    for key in sentences(text):
                        out.setdefault(key, f"{name}/{unit['id']}/{lang}")
    return out


class EvalFilter:
    """Drops training lines that share a sentence with the evaluation text; counts what it dropped."""

    def __init__(self, eval_keys):
        self.eval_keys = eval_keys
        self.dropped_lines = 0

    def keep(self, line):
        if any(key in self.eval_keys for key in sentences(line)):
            self.dropped_lines += 1
            return False
        return True


def check_documents(eval_keys, documents, where, limit=10):
    """Returns up to `limit` violations "where doc N: sentence (from set/unit/lang)"."""
    found = []
    for n, text in enumerate(documents, 1):
        for key in sentences(text):
            if key in eval_keys:
                found.append(f"{where} document {n}: '{key[:80]}' (from {eval_keys[key]})")
                if len(found) >= limit:
                    return found
    return found


def jsonl_texts(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)["text"]


def check_files(parallel_dir, train_files):
    eval_keys = parallel_sentences(parallel_dir)
    found = []
    for path in train_files:
        found += check_documents(eval_keys, jsonl_texts(path), path)
    return eval_keys, found


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().split("\n")[-1], file=sys.stderr)
        return 2
    eval_keys, found = check_files(argv[1], argv[2:])
    if found:
        print(f"disjointness check FAILED: {len(found)}+ evaluation sentences remain in the training text:")
        for f in found:
            print("  " + f)
        return 1
    print(f"disjointness check passed: none of {len(eval_keys)} evaluation sentences is in {len(argv) - 2} "
          "training files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
