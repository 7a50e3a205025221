#!/usr/bin/env python3
"""Merges what tools/device/fuzz_background.sh brought back from the GPU machine into this checkout.

Usage:
  python3 tools/device/fuzz_merge.py RESULTS...     each a fuzz-results-*.tgz or a folder holding some (a device
                                                    call's files_at); an archive merged before is skipped
  python3 tools/device/fuzz_merge.py --promote      after fixing: every pending crash input that the local fuzz
                                                    program (build-fuzz) now passes becomes a regression case
For each archive:
  - new corpus entries  -> build-fuzz/fuzz-corpus/<target>/ (the corpus `make fuzz` and pack_fuzz.sh carry on from)
  - crash-/leak-/timeout-/oom- inputs -> build-fuzz/fuzz-crashes/<target>/device-<name> (pending: each is replayed
    through build-fuzz/fuzz/fuzz_<target> and reported; fix the parser, then --promote moves it to
    fuzz/regressions/<target>/, which `make test` replays); slow-unit files are listed, not findings
  - each target's seconds, executions, new units and crash files -> fuzz/ledger.tsv, and the running total table in
    docs/reliability.md is rewritten (fuzz/ledger.py)
Environment: FUZZ_BUILD_DIR (default build-fuzz).
"""
import csv
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "fuzz"))
import ledger  # noqa: E402

BUILD = ROOT / os.environ.get("FUZZ_BUILD_DIR", "build-fuzz")
FINDING_PREFIXES = ("crash-", "leak-", "timeout-", "oom-")


def replay(target, path):
    """Runs one input through the local fuzz program: (passes, one line saying what happened)."""
    prog = BUILD / "fuzz" / f"fuzz_{target}"
    if not prog.exists():
        return False, f"not replayed: {prog} missing (make fuzz-build)"
    env = dict(os.environ, LSAN_OPTIONS=f"suppressions={ROOT / 'tools/sanitize/lsan.supp'}")
    r = subprocess.run([str(prog), "-rss_limit_mb=2048", "-timeout=25", str(path)], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    if r.returncode == 0:
        return True, "passes now"
    lines = [l for l in r.stdout.splitlines() if "ERROR:" in l or "SUMMARY:" in l or "fuzz finding" in l]
    return False, f"still fails (exit {r.returncode}): {lines[0].strip() if lines else ''}"


def merge_archive(archive):
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:12]
    source = f"{archive.name} {digest}"
    if any(r["source"] == source for r in ledger.read()):
        print(f"{archive.name}: merged before, skipped")
        return
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(tmp)
        tmp = pathlib.Path(tmp)
        meta = dict(l.split(" ", 1) for l in (tmp / "meta.txt").read_text().splitlines() if " " in l)
        site = meta.get("site", "device")
        where = site if site == "here" else f"{site} ({meta.get('where', '?').split(' ')[0]})"
        date = meta.get("end", "")
        print(f"{archive.name}: {meta.get('commit', '?')}, {meta.get('seconds', '?')} s budget, {meta.get('where', '')}")
        if meta.get("leak_detection") == "0":
            print("  LeakSanitizer could not run there: leaks were not checked in this run")
        with (tmp / "stats.tsv").open(newline="") as f:
            stats = list(csv.DictReader(f, delimiter="\t"))
        for s in stats:
            t = s["target"]
            added = 0
            new_dir = tmp / "new" / t
            corpus = BUILD / "fuzz-corpus" / t
            corpus.mkdir(parents=True, exist_ok=True)
            for p in sorted(new_dir.iterdir()) if new_dir.is_dir() else []:
                if not (corpus / p.name).exists():  # libFuzzer names entries by their SHA-1
                    shutil.copyfile(p, corpus / p.name)
                    added += 1
            findings = []
            crash_dir = tmp / "crashes" / t
            for p in sorted(crash_dir.iterdir()) if crash_dir.is_dir() else []:
                if p.name.startswith("slow-unit-"):
                    print(f"  {t}: slow unit {p.name} (not a finding)")
                    continue
                dest = BUILD / "fuzz-crashes" / t / f"device-{p.name}"
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, dest)
                findings.append(dest)
            ledger.add(where, t, s["seconds"], s["executions"], s["new_units"], str(len(findings)), source, date)
            print(f"  {t}: {s['seconds']} s, {s['executions']} executions, {s['new_units']} new units"
                  f" ({added} new to the local corpus), coverage {s['cov_start']} -> {s['cov_end']},"
                  f" exit {s['exit']}, {len(findings)} finding(s)")
            for dest in findings:
                ok, what = replay(t, dest)
                print(f"    {dest.relative_to(ROOT)}: {what}")


def promote():
    moved = 0
    for d in sorted((BUILD / "fuzz-crashes").glob("*")):
        for p in sorted(d.iterdir()):
            if not p.name.startswith(("device-",) + FINDING_PREFIXES):
                continue
            known = ROOT / "fuzz" / "regressions" / d.name
            if known.is_dir() and any(k.read_bytes() == p.read_bytes() for k in known.iterdir() if k.is_file()):
                continue  # already a regression case (promoted or copied by hand before)
            ok, what = replay(d.name, p)
            if not ok:
                print(f"{p.relative_to(ROOT)}: {what}; fix it first")
                continue
            kind = p.name.removeprefix("device-").split("-", 1)[0]
            dest = ROOT / "fuzz" / "regressions" / d.name / f"{kind}-{hashlib.sha1(p.read_bytes()).hexdigest()[:8]}"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(p, dest)
            moved += 1
            print(f"{p.relative_to(ROOT)} -> {dest.relative_to(ROOT)} (now replayed by make test; list it with its fix "
                  f"in docs/reliability.md)")
    print(f"fuzz_merge: {moved} input(s) promoted to regressions")


def main(argv):
    if argv == ["--promote"]:
        promote()
        return
    if not argv or any(a.startswith("-") for a in argv):
        sys.exit(__doc__)
    archives = []
    for a in argv:
        p = pathlib.Path(a)
        archives += sorted(p.glob("**/fuzz-results-*.tgz")) if p.is_dir() else [p]
    if not archives:
        sys.exit("fuzz_merge: no fuzz-results-*.tgz given or found")
    for a in archives:
        merge_archive(a)
    ledger.doc()
    print(ledger.table())


if __name__ == "__main__":
    main(sys.argv[1:])
