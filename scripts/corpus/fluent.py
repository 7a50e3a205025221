"""Firefox string files: Fluent (.ftl) and Java-style .properties, parsed just enough for text extraction.

parse_ftl: messages `id = value` (indented continuation lines join with a space) and attributes `.attr = value`
(key "id.attr"); terms (`-brand = ...`) are kept as "-brand". Messages with selectors (`->`) are skipped: their text
is a set of variants, not one string. parse_properties: `key = value` / `key: value` lines, `#`/`!` comments, `\\`
line continuations, \\uXXXX escapes.
"""
import re

_FTL_ENTRY = re.compile(r"^(-?[A-Za-z][\w-]*)\s*=\s?(.*)$")
_FTL_ATTR = re.compile(r"^\s+\.([A-Za-z][\w-]*)\s*=\s?(.*)$")


def parse_ftl(text):
    out = {}
    current = None  # key being continued
    for line in text.split("\n"):
        if line.startswith("#") or not line.strip():
            current = None if not line.strip() and current is None else current
            continue
        m = _FTL_ENTRY.match(line)
        if m:
            current = m.group(1)
            out[current] = m.group(2).strip()
            msg_id = current
            continue
        m = _FTL_ATTR.match(line)
        if m and current is not None:
            current = f"{msg_id}.{m.group(1)}"
            out[current] = m.group(2).strip()
            continue
        if line[:1].isspace() and current is not None:
            out[current] = (out[current] + " " + line.strip()).strip()
    return {k: v for k, v in out.items() if v and "->" not in v}


def _unescape_properties(value):
    return re.sub(r"\\u([0-9a-fA-F]{4})|\\(.)",
                  lambda m: chr(int(m.group(1), 16)) if m.group(1) else {"n": "\n", "t": "\t"}.get(m.group(2),
                                                                                                     m.group(2)),
                  value)


def parse_properties(text):
    out = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while line.endswith("\\") and not line.endswith("\\\\") and i < len(lines):
            line = line[:-1] + lines[i].strip()
            i += 1
        m = re.match(r"^([^=:\s]+)\s*[=:]\s*(.*)$", line)
        if m and m.group(2):
            out[m.group(1)] = _unescape_properties(m.group(2))
    return out
