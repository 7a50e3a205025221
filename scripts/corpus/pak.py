"""Chromium .pak reader (locale packs: message id -> UTF-8 string).

Layout, version 5 (little endian): u32 version, u8 encoding (0 binary, 1 UTF-8, 2 UTF-16), 3 pad bytes, u16 n_resources,
u16 n_aliases, then (n_resources + 1) entries {u16 id, u32 offset} (the last one marks the end of the data), then
n_aliases entries {u16 id, u16 entry_index}, then the data. Version 4: u32 version, u32 n_resources, u8 encoding, then the
entries as in v5 and no aliases.
"""
import struct


class PakError(ValueError):
    pass


def parse_pak(data):
    """bytes -> {id: bytes}. Raises PakError on a malformed pack."""
    if len(data) < 8:
        raise PakError("file too short for a pak header")
    (version,) = struct.unpack_from("<I", data, 0)
    if version == 5:
        encoding, n_res, n_alias = struct.unpack_from("<B3xHH", data, 4)
        table = 12
    elif version == 4:
        n_res, encoding = struct.unpack_from("<IB", data, 4)
        n_alias, table = 0, 9
    else:
        raise PakError(f"unsupported pak version {version}")
    if encoding not in (0, 1, 2):
        raise PakError(f"unknown pak encoding {encoding}")
    end_entries = table + (n_res + 1) * 6
    end_aliases = end_entries + n_alias * 4
    if end_aliases > len(data):
        raise PakError(f"pak index ({n_res} resources, {n_alias} aliases) runs past the end of the file")
    entries = [struct.unpack_from("<HI", data, table + 6 * i) for i in range(n_res + 1)]
    out = {}
    for i in range(n_res):
        rid, start = entries[i]
        end = entries[i + 1][1]
        if not (end_aliases <= start <= end <= len(data)):
            raise PakError(f"resource {rid}: bad offsets {start}..{end}")
        out[rid] = data[start:end]
    for i in range(n_alias):
        rid, index = struct.unpack_from("<HH", data, end_entries + 4 * i)
        if index >= n_res:
            raise PakError(f"alias {rid} points to entry {index} of {n_res}")
        out[rid] = out[entries[index][0]]
    return out, encoding


def read_pak_strings(path):
    """A locale .pak -> {id: str}; entries that do not decode are skipped."""
    with open(path, "rb") as f:
        resources, encoding = parse_pak(f.read())
    codec = "utf-16-le" if encoding == 2 else "utf-8"
    out = {}
    for rid, raw in resources.items():
        try:
            out[rid] = raw.decode(codec)
        except UnicodeDecodeError:
            continue
    return out


def build_pak(strings, version=5):
    """{id: str} -> pak bytes (UTF-8). Used by the tests to make fixtures."""
    ids = sorted(strings)
    blobs = [strings[i].encode("utf-8") for i in ids]
    header = struct.pack("<IB3xHH", 5, 1, len(ids), 0) if version == 5 else struct.pack("<IIB", 4, len(ids), 1)
    offset = len(header) + (len(ids) + 1) * 6
    index = b""
    for rid, blob in zip(ids, blobs):
        index += struct.pack("<HI", rid, offset)
        offset += len(blob)
    index += struct.pack("<HI", 0, offset)
    return header + index + b"".join(blobs)
