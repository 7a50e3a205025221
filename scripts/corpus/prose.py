"""Prose sources: each function yields documents (lists of paragraphs, NFC, whitespace collapsed) for one language.

  lo_help    LibreOffice help HTML: <h1-6>, <p>, <td> of the DisplayArea, in order; hidden platform variants
             (hidden="true") dropped; one document per file. English: libreoffice-help-en-us.
  mallard    gnome-user-docs Mallard pages: <title>, <p>, <desc>, <item> text; one document per page.
  man_pages  groff sources turned roughly into text: comments and layout requests dropped, font and character escapes
             resolved, text lines joined into paragraphs at paragraph macros; one document per page.
  fortunes   fortune files (only the UTF-8 `.u8` variants, the others are KOI8-R/GB2312): one document per fortune.
  quran      npm quran-json: one document per chapter, one verse per line.
"""
import glob
import gzip
import json
import os
import re
import xml.etree.ElementTree as ET

from clean import clean_prose, has_letters, strip_markup

# Regular expressions instead of a full HTML parser: the help files are machine-written and regular, and html.parser
# is ~10x slower on 2,560 files per language. Hidden platform variants (<span hidden="true">, one nesting level
# inside) are removed before the blocks are taken, except the default one (id="default...").
_DISPLAY_AREA = re.compile(r'<div id="DisplayArea"')
_HIDDEN = re.compile(r'<(span|div)(?![^>]*\bid="default)[^>]*\bhidden="true"[^>]*>(?:[^<]|<(?!/?\1\b)[^>]*>|<\1\b[^>]*>.*?</\1>)*?</\1>', re.S)
_SCRIPT = re.compile(r"<(script|style)\b.*?</\1>", re.S | re.I)
_BLOCK = re.compile(r"<(p|h[1-6]|td)\b[^>]*>(.*?)</\1>", re.S)


def help_paragraphs(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    m = _DISPLAY_AREA.search(text)
    text = text[m.start():] if m else text
    text = _HIDDEN.sub(" ", _SCRIPT.sub(" ", text))
    paras = (clean_prose(strip_markup(body)) for _, body in _BLOCK.findall(text))
    return [p for p in paras if has_letters(p)]


def lo_help(root, lohelp):
    if lohelp is None:
        return
    pkg, d = lohelp
    base = os.path.join(root, f"libreoffice-help-{pkg}", "usr/share/libreoffice/help", d, "text")
    for path in sorted(glob.glob(os.path.join(base, "**", "*.html"), recursive=True)):
        paras = help_paragraphs(path)
        if paras:
            yield paras


_MAL = "{http://projectmallard.org/1.0/}"


def mallard(root, locale):
    if locale is None:
        return
    base = os.path.join(root, "gnome-user-docs/usr/share/help", locale)
    for path in sorted(glob.glob(os.path.join(base, "*", "*.page"))):
        try:
            tree = ET.parse(path)
        except ET.ParseError:
            continue
        paras = []
        for el in tree.iter():
            if el.tag in (_MAL + "title", _MAL + "p", _MAL + "desc"):
                text = clean_prose("".join(el.itertext()))
                if has_letters(text):
                    paras.append(text)
        if paras:
            yield paras


# --- man pages -----------------------------------------------------------------------------------------------------
_ESCAPES = [
    (re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)"), ""),   # font changes
    (re.compile(r"\\s[+-]?\d"), ""),                  # size changes
    (re.compile(r"\\\*(?:\[[^\]]*\]|\(..|.)"), ""),   # string interpolation
    (re.compile(r"\\\((?:em|en)"), "—"),
    (re.compile(r"\\\((?:lq|rq|dq)"), '"'),
    (re.compile(r"\\\((?:aq|oq|cq)"), "'"),
    (re.compile(r"\\\(bu"), "•"),
    (re.compile(r"\\\(co"), "©"),
    (re.compile(r"\\\(..|\\\[[^\]]*\]"), ""),         # other named characters
    (re.compile(r"\\[&/,:%|^]"), ""),
    (re.compile(r"\\[-e]"), lambda m: "-" if m.group(0) == "\\-" else "\\"),
    (re.compile(r"\\ "), " "),
    (re.compile(r"\\c$"), ""),
]
_TEXT_MACROS = {"SH", "SS", "B", "I", "BR", "IR", "RB", "RI", "BI", "IB", "SM", "SB", "TP", "IP", "TQ"}
_BREAK_MACROS = {"SH", "SS", "PP", "P", "LP", "TP", "IP", "TQ", "HP", "sp", "br", "RS", "RE", "nf", "fi", "TH"}


def groff_to_paragraphs(source):
    paras, current = [], []

    def flush():
        if current:
            text = clean_prose(" ".join(current))
            if has_letters(text):
                paras.append(text)
            current.clear()

    skip_macro_def = False
    for line in source.split("\n"):
        if skip_macro_def:
            skip_macro_def = not line.startswith("..")
            continue
        if line.startswith(('.\\"', "'\\\"", '\\"')) or line.strip() in (".", "'"):
            continue
        if line.startswith((".", "'")):
            parts = line[1:].strip().split(None, 1)
            name = parts[0] if parts else ""
            args = parts[1] if len(parts) > 1 else ""
            if name in ("de", "ig"):
                skip_macro_def = True
                continue
            if name in _BREAK_MACROS:
                flush()
            if name in _TEXT_MACROS and args and name not in ("TP", "IP", "TQ"):
                current.append(_unescape(args.replace('"', "")))
                if name in ("SH", "SS"):
                    flush()
            elif name == "IP" and args:
                flush()
            continue
        current.append(_unescape(line))
    flush()
    return paras


def _unescape(text):
    for pattern, repl in _ESCAPES:
        text = pattern.sub(repl, text)
    return text


def man_pages(root, man):
    if man is None:
        return
    pkg, locale = man
    base = os.path.join(root, pkg, "usr/share/man", locale)
    for path in sorted(glob.glob(os.path.join(base, "man*", "*.gz"))):
        if os.path.islink(path):
            continue
        try:
            with gzip.open(path) as f:
                source = f.read().decode("utf-8")
        except (UnicodeDecodeError, OSError, EOFError):
            continue  # not UTF-8 or a broken file: skipped (counted by the caller as a missing document)
        if source.startswith(".so "):
            continue  # a link to another page
        paras = groff_to_paragraphs(source)
        if paras:
            yield paras


def fortunes(root, entry):
    if entry is None:
        return
    pkg, sub = entry
    base = os.path.join(root, pkg, "usr/share/games/fortunes", sub)
    for path in sorted(glob.glob(os.path.join(base, "*.u8"))):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for fortune in re.split(r"\n%\n", text):
            lines = [clean_prose(line) for line in fortune.split("\n")]
            lines = [line for line in lines if has_letters(line)]
            if lines:
                yield lines


def quran(root, name):
    if name is None:
        return
    path = os.path.join(root, "npm-quran/package/dist", name)
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        chapters = json.load(f)
    field = "text" if name == "quran.json" else "translation"
    for chapter in chapters:
        verses = [clean_prose(v[field]) for v in chapter["verses"] if v.get(field)]
        if verses:
            yield verses
