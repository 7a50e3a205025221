"""Shared cleaning for every source (data-sources.md §4.1.6 and §4.2.2).

clean_ui_string: NFC, markup stripped, accelerator marks dropped (`_` GNOME, `~` LibreOffice, `&` Firefox/KDE),
placeholders ($1, %s, %1$s, {0}, { $var }, {{PLURAL:...}}) replaced by one neutral token, whitespace collapsed.
match_key / sentences: the normalised form used for deduplication and for the disjointness of training and evaluation
text (NFC, case folded, whitespace collapsed, surrounding punctuation trimmed).
"""
import html
import re
import unicodedata

PLACEHOLDER = "…"  # one neutral token for every placeholder kind

_TAG = re.compile(r"<[^<>]{0,400}>")
_WS = re.compile(r"\s+")
# Placeholders: printf (%s, %d, %1$s, %(name)s, %%), $1 / $NAME$ (Chromium, MediaWiki), {0}/{name}/{ $var } (ICU,
# Fluent), {{PLURAL:$1|a|b}} and other MediaWiki templates, [[links]].
_PLACEHOLDERS = [
    re.compile(r"\{\{[^{}]*\}\}"),
    re.compile(r"\{\s*\$?[\w.-]+\s*\}"),
    re.compile(r"%(?:\d+\$)?(?:\([\w]+\))?[-+ #0]*\d*(?:\.\d+)?(?:l{0,2}|h|z)[sdifuxXcpeEgGo@]"),
    re.compile(r"%\d+"),
    re.compile(r"\$[A-Z_0-9]+\$"),
    re.compile(r"\$\d+"),
]
_LINK = re.compile(r"\[\[(?:[^|\]]*\|)?([^\]]*)\]\]")
_ACCEL_UNDERSCORE = re.compile(r"(?<![\w_])_(?=\w)")      # GNOME: "_Open" (not snake_case words)
_ACCEL_TILDE = re.compile(r"~(?=\w)")                       # LibreOffice: "~Open"
_ACCEL_AMP = re.compile(r"&(?=[^\s&;#]{1}(?![^\s;]*;))")    # Firefox/KDE: "&Open" (not "&amp;")
_ACCEL_PAREN = re.compile(r"\s*\((?:_|&|~)?[A-Za-z0-9]\)")  # CJK style "打开(_O)"
_SENTENCE_END = re.compile(r"(?<=[.!?。！？।॥؟።])\s+|(?<=[。！？])")


def nfc(text):
    return unicodedata.normalize("NFC", text)


def strip_markup(text):
    """Removes HTML/XML tags and decodes entities."""
    text = _TAG.sub(" ", text)
    return html.unescape(text)


def collapse_ws(text):
    return _WS.sub(" ", text).strip()


def replace_placeholders(text):
    text = _LINK.sub(r"\1", text)
    for pattern in _PLACEHOLDERS:
        text = pattern.sub(PLACEHOLDER, text)
    return text


def drop_accelerators(text):
    text = _ACCEL_PAREN.sub("", text)
    text = _ACCEL_TILDE.sub("", text)
    text = _ACCEL_UNDERSCORE.sub("", text)
    text = _ACCEL_AMP.sub("", text)
    return text


def has_placeholder(text):
    """True when raw UI text holds a placeholder or markup (used to keep parallel pairs clean, §4.1.2)."""
    return any(c in text for c in "$<{%")


_BIDI_CONTROLS = re.compile("[\u200e\u200f\u202a-\u202e\u2066-\u2069]")  # direction marks (ZWJ/ZWNJ are kept)


def clean_ui_string(text, markup=True):
    """One UI message -> plain text ("" when nothing is left, or when an ICU plural/select message remains)."""
    text = _BIDI_CONTROLS.sub("", nfc(text))
    if markup:
        text = strip_markup(text)
    text = replace_placeholders(text)
    text = drop_accelerators(text)
    text = collapse_ws(text)
    if "{" in text or "}" in text:
        return ""  # ICU plural/select syntax: several variants, not one string
    return nfc(text)


def clean_prose(text):
    """A paragraph of documentation prose: NFC and whitespace only (markup is removed by the extractor)."""
    return collapse_ws(_BIDI_CONTROLS.sub("", nfc(text)))


def has_letters(text):
    return any(unicodedata.category(c).startswith("L") for c in text)


def match_key(text):
    """Normalised form for comparisons: NFC, case folded, whitespace collapsed, punctuation at the edges trimmed."""
    key = collapse_ws(nfc(text).casefold())
    start, end = 0, len(key)
    while start < end and _is_edge_char(key[start]):
        start += 1
    while end > start and _is_edge_char(key[end - 1]):
        end -= 1
    return key[start:end]


def _is_edge_char(c):
    """Punctuation, symbols and spaces (not combining marks: Indic vowel signs end many words)."""
    return unicodedata.category(c)[0] in "PSZ"


MIN_SENTENCE_CHARS = 8  # shorter fragments ("1.", "Article 3") are list markers, not sentences


def sentences(text):
    """The match keys of the sentences of a text: split at line breaks and sentence-final punctuation (Latin, CJK,
    Devanagari/Bengali danda, Arabic question mark, Ethiopic full stop); fragments shorter than MIN_SENTENCE_CHARS
    after normalisation are left out."""
    out = []
    for line in text.split("\n"):
        for piece in _SENTENCE_END.split(line):
            key = match_key(piece)
            if len(key) >= MIN_SENTENCE_CHARS:
                out.append(key)
    return out


class Deduper:
    """Keeps the first occurrence of each match key."""

    def __init__(self):
        self.seen = set()
        self.dropped = 0

    def first(self, text):
        key = match_key(text)
        if not key or key in self.seen:
            self.dropped += 1
            return False
        self.seen.add(key)
        return True
