#!/usr/bin/env python3
"""Checks strip_ptx.py on a CUDA program of this build (argument: its path, e.g. test_cuda_ops): on a copy, every PTX
entry of .nv_fatbin is blanked (all zeros) and nothing else changes (same size; every byte outside the PTX payloads,
the SASS entries included, equal to the original's); the copy still starts (--gtest_list_tests lists the same tests);
a file without .nv_fatbin (/bin/ls) is refused with the reason. Run by ctest (device_strip_ptx, label cpu) where the
CUDA backend is built; exit 0 when every check holds."""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import strip_ptx  # noqa: E402


def ptx_ranges(data):
    start, size = strip_ptx.section(data, ".nv_fatbin")
    off, end, ranges = start, start + size, []
    while off + 16 <= end:
        magic, _v, hsize, fsize = struct.unpack_from("<IHHQ", data, off)
        if magic != strip_ptx.FATBIN_MAGIC:
            off += 8
            continue
        p, cend = off + hsize, off + hsize + fsize
        while p < cend:
            kind, _v2, ehsize, psize = struct.unpack_from("<HHIQ", data, p)
            if kind == strip_ptx.KIND_PTX:
                ranges.append((p + ehsize, p + ehsize + psize))
            p += ehsize + psize
        off = cend
    return ranges


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
        r = subprocess.run([sys.executable, os.path.join(here, "strip_ptx.py"), shutil.copy("/bin/ls", tmp)],
                           capture_output=True, text=True)
        if r.returncode != 1 or "no .nv_fatbin section" not in r.stderr:
            bad.append(f"/bin/ls not refused with the reason (rc {r.returncode}): {r.stderr}")
    for b in bad:
        print("FAIL:", b)
    if not bad:
        print(f"ok: {len(ranges)} PTX payloads ({sum(b - a for a, b in ranges) / 1e6:.2f} MB) blanked, every other byte kept")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
