"""Builds the training corpus text and the parallel sets from unpacked packages (called by build_corpus.sh).

Steps: (1) parallel sets -> <parallel>/<set>.jsonl + manifest; (2) per training language, documents from every source
in priority order, prose first (LibreOffice help, man pages, fortunes, Quran, gnome-user-docs) then UI catalogs
(Chromium, Firefox, LibreOffice UI, GNOME, MediaWiki); each line cleaned (clean.py), dropped when it equals the English
of its source, holds an evaluation sentence (disjoint.py) or repeats an earlier line of the language; UI strings are
grouped into documents of about DOC_BYTES; (3) per-language byte caps from temperature sampling (p ∝ n^T, the largest
language gets cap_mb); languages under min_mb are left out and listed; (4) <out>/jsonl/<code>.jsonl, sources.json and
`hybridlm corpus import --sources`; (5) the disjointness check on what was imported.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import catalogs
import disjoint
import parallel
import prose
from clean import Deduper, clean_prose, clean_ui_string, has_letters, match_key
from langs import ENGLISH, LANGS, TRAINING

DOC_BYTES = 2000  # UI strings per document: about one screen of text


def log(msg):
    print(f"[corpus {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_packages(path):
    """packages.tsv (registry, name, version, file bytes) -> list of dicts."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            registry, name, version, size = line.rstrip("\n").split("\t")
            out.append({"registry": registry, "name": name, "version": version, "bytes": int(size)})
    return out


class EnglishSides:
    """English text of each keyed source, for dropping untranslated strings ("translation equals English")."""

    def __init__(self, root):
        self.root = root
        self.values = {}

    def of(self, source, catalog_for_msgids=None):
        if source not in self.values:
            if source == "chromium":
                en = catalogs.chromium(self.root, "en-US")
            elif source == "firefox":
                en = catalogs.firefox_english(self.root)
            elif source == "mediawiki":
                en = catalogs.mediawiki(self.root, "en")
            else:
                en = {}
            self.values[source] = {match_key(clean_ui_string(v)) for v in en.values()}
        return self.values[source]


def ui_catalogs(root, lang):
    """(source name, {key: raw}) for the UI sources of a language, English included (msgids / en files)."""
    if lang.code == ENGLISH:
        lo_all, gnome_all = {}, {}
        for other in LANGS:
            lo_all.update(catalogs.lo_ui_english(catalogs.lo_ui(root, other.lo)))
        for other in LANGS:
            if other.gettext and other.gettext != "C":
                gnome_all.update(catalogs.gnome_english(catalogs.gnome(root, other.gettext)))
                if gnome_all:
                    break  # one locale's msgids cover the English of the catalogs
        return [("chromium", catalogs.chromium(root, lang.chromium)), ("firefox", catalogs.firefox_english(root)),
                ("lo_ui", lo_all), ("gnome", gnome_all), ("mediawiki", catalogs.mediawiki(root, lang.mw))]
    return [("chromium", catalogs.chromium(root, lang.chromium)),
            ("firefox", catalogs.firefox_normalise_keys(catalogs.firefox(root, lang.firefox))),
            ("lo_ui", catalogs.lo_ui(root, lang.lo)), ("gnome", catalogs.gnome(root, lang.gettext)),
            ("mediawiki", catalogs.mediawiki(root, lang.mw))]


def prose_sources(root, lang):
    return [("lo_help", prose.lo_help(root, lang.lohelp)), ("man", prose.man_pages(root, lang.man)),
            ("fortunes", prose.fortunes(root, lang.fortunes)), ("quran", prose.quran(root, lang.quran)),
            ("gnome_help", prose.mallard(root, lang.gettext))]


class LanguageText:
    """Collects one language's documents with the per-source and per-reason counts."""

    def __init__(self, lang, eval_filter, english_sides):
        self.lang = lang
        self.filter = eval_filter
        self.english = english_sides
        self.dedupe = Deduper()
        self.docs = []  # (source, text)
        self.stats = {"equal_to_english": 0, "eval_sentence": 0, "duplicate": 0, "empty_after_cleaning": 0}

    def _line_ok(self, line, english_keys):
        if not has_letters(line):
            self.stats["empty_after_cleaning"] += 1
            return False
        if english_keys is not None and match_key(line) in english_keys:
            self.stats["equal_to_english"] += 1
            return False
        before = self.filter.dropped_lines
        if not self.filter.keep(line):
            self.stats["eval_sentence"] += self.filter.dropped_lines - before
            return False
        if not self.dedupe.first(line):
            self.stats["duplicate"] += 1
            return False
        return True

    def add_prose(self, source, documents):
        for paras in documents:
            kept = [p for p in paras if self._line_ok(p, None)]
            if kept:
                self.docs.append((source, "\n".join(kept)))

    def add_ui(self, source, catalog, english_keys):
        block, size = [], 0
        for raw in catalog.values():
            line = clean_ui_string(raw)
            if not self._line_ok(line, english_keys):
                continue
            block.append(line)
            size += len(line.encode("utf-8")) + 1
            if size >= DOC_BYTES:
                self.docs.append((source, "\n".join(block)))
                block, size = [], 0
        if block:
            self.docs.append((source, "\n".join(block)))

    def bytes(self):
        return sum(len(t.encode("utf-8")) for _, t in self.docs)


def english_keys_for(source, lang, catalog, english_sides):
    if lang.code == ENGLISH:
        return None
    if source in ("lo_ui", "gnome"):
        return {match_key(clean_ui_string(catalogs.mo.msgid_of(k.split(":", 1)[1]))) for k in catalog}
    return english_sides.of(source)


def temperature_caps(sizes, cap_bytes, temperature):
    """Per-language byte budgets: cap * (n / n_max)^T, never more than n."""
    n_max = max(sizes.values())
    return {code: min(n, int(cap_bytes * (n / n_max) ** temperature)) for code, n in sizes.items()}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, help="unpacked packages, one folder per package")
    ap.add_argument("--packages", required=True, help="packages.tsv written by build_corpus.sh")
    ap.add_argument("--out", required=True, help="corpus directory to write")
    ap.add_argument("--parallel-out", required=True, help="folder for the parallel sets")
    ap.add_argument("--hybridlm", required=True, help="the hybridlm binary")
    ap.add_argument("--cap-mb", type=float, default=4.0)
    ap.add_argument("--temperature", type=float, default=0.3)
    ap.add_argument("--min-mb", type=float, default=0.5, help="languages with less text are left out")
    args = ap.parse_args(argv)
    packages = load_packages(args.packages)

    log("building parallel sets")
    sets = parallel.build_sets(args.root)
    for name, units in sets.items():
        parallel.write_set(args.parallel_out, name, units, packages)
        log(f"  {name}: {len(units)} units")
    eval_keys = disjoint.parallel_sentences(args.parallel_out)
    eval_filter = disjoint.EvalFilter(eval_keys)
    log(f"  {len(eval_keys)} evaluation sentences to keep out of the training text")

    english_sides = EnglishSides(args.root)
    texts = {}
    for lang in TRAINING:
        t = LanguageText(lang, eval_filter, english_sides)
        for source, docs in prose_sources(args.root, lang):
            t.add_prose(source, docs)
        for source, catalog in ui_catalogs(args.root, lang):
            if catalog:
                t.add_ui(source, catalog, english_keys_for(source, lang, catalog, english_sides))
        texts[lang.code] = t
        log(f"  {lang.code}: {len(t.docs)} documents, {t.bytes() / 1e6:.2f} MB before caps "
            f"(dropped: {', '.join(f'{k} {v}' for k, v in t.stats.items())})")

    sizes = {code: t.bytes() for code, t in texts.items() if t.bytes() > 0}
    included = {code: n for code, n in sizes.items() if n >= args.min_mb * 1e6}
    missing = {lang.code: sizes.get(lang.code, 0) for lang in TRAINING if lang.code not in included}
    caps = temperature_caps(included, args.cap_mb * 1e6, args.temperature)

    jsonl_dir = os.path.join(args.out, "jsonl")
    os.makedirs(jsonl_dir, exist_ok=True)
    summary, source_bytes, import_args, files = [], {}, [], []
    for lang in TRAINING:
        if lang.code not in included:
            continue
        t = texts[lang.code]
        kept, total, per_source = [], 0, {}
        for source, text in t.docs:  # priority order: prose first, then UI
            n = len(text.encode("utf-8"))
            if total + n > caps[lang.code]:
                continue
            kept.append(text)
            total += n
            per_source[source] = per_source.get(source, 0) + n
        path = os.path.join(jsonl_dir, lang.code + ".jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for text in kept:
                f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
        files.append(path)
        source_bytes[lang.code] = per_source
        import_args += ["--lang", f"{lang.code}={path}", "--tier", f"{lang.code}={lang.tier}"]
        summary.append((lang.code, len(kept), total, per_source))

    sources_path = os.path.join(args.out, "sources.json")
    with open(sources_path, "w", encoding="utf-8") as f:
        json.dump({"packages": packages, "source_bytes": source_bytes,
                   "left_out": {code: n for code, n in missing.items()}}, f, ensure_ascii=False, indent=2)
    log("importing with hybridlm corpus import")
    subprocess.run([args.hybridlm, "corpus", "import", "--force", "--out", args.out, "--sources", sources_path]
                   + import_args, check=True, stdout=subprocess.DEVNULL)

    log("checking disjointness of training and evaluation text")
    _, found = disjoint.check_files(args.parallel_out, files)
    if found:
        print("ERROR: evaluation sentences remain in the training text:", file=sys.stderr)
        for line in found:
            print("  " + line, file=sys.stderr)
        return 1
    log(f"disjointness check passed ({len(eval_keys)} evaluation sentences, {len(files)} languages)")

    print(f"\n{'language':<10} {'tier':<7} {'docs':>7} {'MB':>7}  sources (MB)")
    for code, docs, total, per_source in summary:
        srcs = ", ".join(f"{s} {b / 1e6:.2f}" for s, b in sorted(per_source.items(), key=lambda kv: -kv[1]))
        print(f"{code:<10} {texts[code].lang.tier:<7} {docs:>7} {total / 1e6:>7.2f}  {srcs}")
    print(f"{'total':<10} {'':<7} {sum(s[1] for s in summary):>7} {sum(s[2] for s in summary) / 1e6:>7.2f}")
    print(f"{len(summary)} of {len(TRAINING)} training languages; left out (under {args.min_mb} MB): "
          + (", ".join(f"{c} ({n / 1e6:.2f} MB)" for c, n in missing.items()) or "none"))
    print("parallel sets: " + ", ".join(f"{n} ({len(u)} units)" for n, u in sets.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
