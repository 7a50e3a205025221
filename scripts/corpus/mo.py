"""GNU gettext .mo reader: key -> translation, key = msgid, or msgctxt + "\\x04" + msgid.

Layout: u32 magic 0x950412de (byte order from the magic), u32 revision, u32 n, u32 offset of the original-string table,
u32 offset of the translation table; each table holds n {u32 length, u32 offset}. Plural entries hold NUL-separated
forms (msgid "\\0" msgid_plural; translations form0 "\\0" form1 ...): the first form is kept. The header entry (empty
msgid) is dropped.
"""
import struct

MAGIC = 0x950412DE


class MoError(ValueError):
    pass


def parse_mo(data):
    if len(data) < 20:
        raise MoError("file too short for a .mo header")
    for order in ("<", ">"):
        if struct.unpack_from(order + "I", data, 0)[0] == MAGIC:
            break
    else:
        raise MoError("bad magic number (not a .mo file)")
    _, n, orig_at, trans_at = struct.unpack_from(order + "4I", data, 4)
    if max(orig_at, trans_at) + 8 * n > len(data):
        raise MoError(f"string tables ({n} entries) run past the end of the file")
    out = {}
    for i in range(n):
        olen, ooff = struct.unpack_from(order + "II", data, orig_at + 8 * i)
        tlen, toff = struct.unpack_from(order + "II", data, trans_at + 8 * i)
        if ooff + olen > len(data) or toff + tlen > len(data):
            raise MoError(f"entry {i}: string runs past the end of the file")
        try:
            key = data[ooff:ooff + olen].decode("utf-8").split("\0")[0]
            value = data[toff:toff + tlen].decode("utf-8").split("\0")[0]
        except UnicodeDecodeError:
            continue
        if key == "":
            continue  # header
        out[key] = value
    return out


def read_mo(path):
    with open(path, "rb") as f:
        return parse_mo(f.read())


def msgid_of(key):
    """The English msgid of a key (context removed)."""
    return key.split("\x04", 1)[-1]


def build_mo(entries):
    """{key: translation} -> .mo bytes (little endian). Used by the tests to make fixtures."""
    keys = sorted(entries)
    n = len(keys)
    orig_at, trans_at = 28, 28 + 8 * n
    data_at = trans_at + 8 * n
    blob = b""
    otab, ttab = b"", b""
    for k in keys:
        raw = k.encode("utf-8")
        otab += struct.pack("<II", len(raw), data_at + len(blob))
        blob += raw + b"\0"
    for k in keys:
        raw = entries[k].encode("utf-8")
        ttab += struct.pack("<II", len(raw), data_at + len(blob))
        blob += raw + b"\0"
    return struct.pack("<7I", MAGIC, 0, n, orig_at, trans_at, 0, 0) + otab + ttab + blob
