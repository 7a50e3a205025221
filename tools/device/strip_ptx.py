#!/usr/bin/env python3
"""strip_ptx.py: blanks the PTX entries of a CUDA program's embedded fat binaries, in place, for device packs.

Usage: strip_ptx.py [--skip-non-cuda] PROGRAM_OR_LIB [...]

Our CUDA objects are built for sm_90a as SASS and PTX (CMake's 90a: code=[compute_90a,sm_90a]). On the GPU machine
(H100/H200, sm_90) the driver loads the sm_90a SASS and never JIT-compiles the PTX, yet the PTX travels: fatbinary
stores it zstd-compressed, so it is ~5.8 MB of each pack that xz cannot shrink (session 45: a third of a
four-program pack). This script parses the ELF's .nv_fatbin section (containers of magic 0xBA55ED50, each a
16-byte header then entries: kind u16 (1 = PTX, 2 = ELF), version u16, header size u32, payload size u64, ...) and
overwrites every PTX payload with zeros; sizes, offsets and the SASS entries stay as they are, so the section's
layout and every reference into it are unchanged and the blank payloads compress to nothing. A program so treated
cannot fall back to PTX on a GPU without sm_90a SASS (it fails to load its kernels there). Prints what it blanked;
exit 1 when a file has no .nv_fatbin section or a container does not parse.
"""
import struct
import sys

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX = 1


def section(data, name):
    """(offset, size) of the named section in an ELF64 little-endian file, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not an ELF64 little-endian file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    def header(i):
        return struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
    strtab_off = header(shstrndx)[4]
    for i in range(shnum):
        h = header(i)
        n0 = strtab_off + h[0]
        sname = data[n0:data.index(b"\0", n0)].decode()
        if sname == name and h[1] != 8:  # SHT_NOBITS has no bytes in the file
            return h[4], h[5]
    return None


def fatbin_entries(data):
    """(kind, payload start, payload end) of every entry of every container in the .nv_fatbin section of data.
    Raises ValueError when the section is missing or a container or entry does not parse."""
    sec = section(data, ".nv_fatbin")
    if sec is None:
        raise ValueError("no .nv_fatbin section")
    start, size = sec
    off, end = start, start + size
    entries = []
    while off + 16 <= end:
        magic, _version, hsize, fsize = struct.unpack_from("<IHHQ", data, off)
        if magic != FATBIN_MAGIC:  # padding between containers (8-byte aligned)
            off += 8
            continue
        p, cend = off + hsize, off + hsize + fsize
        if cend > end:
            raise ValueError(f"container at {off:#x} runs past the section")
        while p < cend:
            kind, _v, ehsize, psize = struct.unpack_from("<HHIQ", data, p)
            if ehsize == 0 or p + ehsize + psize > cend:
                raise ValueError(f"entry at {p:#x} does not parse")
            entries.append((kind, p + ehsize, p + ehsize + psize))
            p += ehsize + psize
        off = cend
    if not entries:
        raise ValueError("no fat binary container in .nv_fatbin")
    return entries


def blank_ptx(data):
    """Zeroes every PTX payload in the .nv_fatbin section of data (a bytearray); returns (entries, bytes) blanked."""
    ptx = [(a, b) for kind, a, b in fatbin_entries(data) if kind == KIND_PTX]
    for a, b in ptx:
        data[a:b] = bytes(b - a)
    return len(ptx), sum(b - a for a, b in ptx)


def main(args):
    """--skip-non-cuda: files without .nv_fatbin are left as they are (a pack's non-CUDA programs), not an error."""
    skip_non_cuda = "--skip-non-cuda" in args
    status = 0
    for path in (a for a in args if a != "--skip-non-cuda"):
        with open(path, "rb") as f:
            data = bytearray(f.read())
        try:
            if skip_non_cuda and section(data, ".nv_fatbin") is None:
                continue
            entries, blanked = blank_ptx(data)
        except ValueError as e:
            print(f"strip_ptx: {path}: {e}", file=sys.stderr)
            status = 1
            continue
        with open(path, "r+b") as f:
            f.write(data)
        print(f"strip_ptx: {path}: {entries} PTX entries blanked ({blanked / 1e6:.2f} MB)")
    return status


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
