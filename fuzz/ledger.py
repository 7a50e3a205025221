#!/usr/bin/env python3
"""The running total of fuzzing (issue #19): fuzz/ledger.tsv holds one line per fuzzer run, wherever it ran, and
docs/reliability.md shows the per-target totals between its `fuzz-total` markers.

  python3 fuzz/ledger.py add WHERE TARGET SECONDS EXECUTIONS NEW_UNITS CRASH_FILES SOURCE   (one run; SOURCE names the
                                                             run: a stats file, a results archive; used against doubles)
  python3 fuzz/ledger.py doc                                 (rewrites the table in docs/reliability.md)
  python3 fuzz/ledger.py show                                (prints the table)
Callers: fuzz/run_fuzzers.sh (runs here), tools/device/fuzz_merge.py (runs on the GPU machine's idle cores).
"""
import csv
import datetime
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LEDGER = ROOT / "fuzz" / "ledger.tsv"
DOC = ROOT / "docs" / "reliability.md"
FIELDS = ["date", "where", "target", "seconds", "executions", "new_units", "crash_files", "source"]
BEGIN, END = "<!-- fuzz-total:begin (fuzz/ledger.py doc) -->", "<!-- fuzz-total:end -->"


def read():
    if not LEDGER.exists():
        return []
    with LEDGER.open(newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def add(where, target, seconds, executions, new_units, crash_files, source, date=None):
    """Appends one run; returns False (and writes nothing) when this source already has a line for this target."""
    rows = read()
    if any(r["source"] == source and r["target"] == target for r in rows):
        return False
    new = not LEDGER.exists()
    with LEDGER.open("a", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        if new:
            w.writerow(FIELDS)
        w.writerow([date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), where, target,
                    seconds, executions, new_units, crash_files, source])
    return True


def num(text):
    try:
        return int(text)
    except ValueError:
        return 0  # "?": the fuzzer printed no final statistics (killed); its seconds still count, executions do not


def table():
    totals = {}
    for r in read():
        t = totals.setdefault(r["target"], {"runs": 0, "here": 0, "device": 0, "execs": 0, "crashes": 0})
        t["runs"] += 1
        t["device" if r["where"].startswith("device") else "here"] += num(r["seconds"])
        t["execs"] += num(r["executions"])
        t["crashes"] += num(r["crash_files"])
    lines = ["| target | runs | seconds here | seconds on the GPU machine's CPUs | total minutes | executions |"
             " crash files |", "|---|---:|---:|---:|---:|---:|---:|"]
    s = {"runs": 0, "here": 0, "device": 0, "execs": 0, "crashes": 0}
    for name in sorted(totals):
        t = totals[name]
        for k in s:
            s[k] += t[k]
        lines.append(f"| `{name}` | {t['runs']} | {t['here']} | {t['device']} | {(t['here'] + t['device']) / 60:.1f} |"
                     f" {t['execs']:,} | {t['crashes']} |")
    lines.append(f"| **total** | {s['runs']} | {s['here']} | {s['device']} | **{(s['here'] + s['device']) / 60:.1f}** |"
                 f" **{s['execs']:,}** | {s['crashes']} |")
    return "\n".join(lines)


def doc():
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        sys.exit(f"ledger: {DOC} has no {BEGIN} ... {END} markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(head + BEGIN + "\n" + table() + "\n" + END + tail)


def main(argv):
    if len(argv) >= 1 and argv[0] == "add" and len(argv) == 8:
        add(*argv[1:])
    elif argv == ["doc"]:
        doc()
    elif argv == ["show"]:
        print(table())
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
