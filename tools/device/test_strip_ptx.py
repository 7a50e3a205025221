#!/usr/bin/env python3
"""Checks strip_ptx.py on a CUDA GoogleTest program of this build (argument: its path, e.g. test_cuda_ops): on a copy,
every PTX entry of .nv_fatbin is blanked (all zeros; each was a zstd frame, counted apart from the tool's walk) and
nothing else changes (same size; every byte outside the PTX payloads, the SASS entries included, equal to the
original's); the copy still starts (--gtest_list_tests lists the same tests); a file without .nv_fatbin (/bin/ls) is
refused with the reason, and left as it is under --skip-non-cuda. Run by ctest (device_strip_ptx, label cpu) where the
CUDA backend is built; exit 0 when every check holds."""
import os
import shutil
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import strip_ptx  # noqa: E402


def ptx_ranges(data):
    return [(a, b) for kind, a, b in strip_ptx.fatbin_entries(data) if kind == strip_ptx.KIND_PTX]


def main():
    prog = sys.argv[1]
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, os.path.basename(prog))
        shutil.copy2(prog, copy)
        before = open(prog, "rb").read()
        r = subprocess.run([sys.executable, os.path.join(here, "strip_ptx.py"), copy], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL: strip_ptx exited {r.returncode}: {r.stderr}")
            return 1
        after = open(copy, "rb").read()
        ranges = ptx_ranges(before)
        if not ranges:
            bad.append("the program has no PTX entries: the check needs a CUDA program built with PTX")
        # An oracle apart from the tool's walk: fatbinary stores each PTX as a zstd frame, so every blanked payload
        # began with the zstd magic, and the section holds exactly that many frames fewer after (an ELF entry may be
        # a zstd frame too: those stay).
        start, size = strip_ptx.section(before, ".nv_fatbin")
        zstd = b"\x28\xb5\x2f\xfd"
        frames_before = before[start:start + size].count(zstd)
        frames_after = after[start:start + size].count(zstd)
        if any(before[a:a + 4] != zstd for a, _ in ranges) or frames_before - frames_after != len(ranges):
            bad.append(f"zstd frames in .nv_fatbin: {frames_before} before, {frames_after} after, "
                       f"{len(ranges)} PTX payloads blanked (each should have been one frame)")
        if len(after) != len(before):
            bad.append(f"size changed: {len(before)} -> {len(after)}")
        else:
            if any(any(after[a:b]) for a, b in ranges):
                bad.append("a PTX payload is not all zeros after the blanking")
            pos, differ = 0, 0
            for a, b in ranges + [(len(before), len(before))]:
                differ += before[pos:a] != after[pos:a]
                pos = b
            if differ:
                bad.append(f"{differ} stretches outside the PTX payloads changed")
        env = dict(os.environ)
        lists = [subprocess.run([p, "--gtest_list_tests"], capture_output=True, text=True, env=env) for p in (prog, copy)]
        if lists[1].returncode != 0 or lists[0].stdout != lists[1].stdout:
            bad.append(f"the blanked copy does not list the same tests (rc {lists[1].returncode}): {lists[1].stderr[-300:]}")
        ls = shutil.copy("/bin/ls", tmp)
        r = subprocess.run([sys.executable, os.path.join(here, "strip_ptx.py"), ls], capture_output=True, text=True)
        if r.returncode != 1 or "no .nv_fatbin section" not in r.stderr:
            bad.append(f"/bin/ls not refused with the reason (rc {r.returncode}): {r.stderr}")
        r = subprocess.run([sys.executable, os.path.join(here, "strip_ptx.py"), "--skip-non-cuda", ls],
                           capture_output=True, text=True)
        if r.returncode != 0 or open(ls, "rb").read() != open("/bin/ls", "rb").read():
            bad.append(f"--skip-non-cuda did not leave /bin/ls as it was (rc {r.returncode}): {r.stderr}")
    for b in bad:
        print("FAIL:", b)
    if not bad:
        print(f"ok: {len(ranges)} PTX payloads ({sum(b - a for a, b in ranges) / 1e6:.2f} MB) blanked, every other byte kept")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
