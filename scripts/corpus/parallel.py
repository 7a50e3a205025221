"""The parallel evaluation sets (data-sources.md §4.1), written as JSONL (one aligned unit per line,
{"id": ..., "<code>": text, ...}; a language without a translation is absent from the unit) plus a manifest.

  udhr                 preamble + 30 articles, every language with a UDHR file (§4.1.1)
  udhr_paragraphs      one unit per English paragraph; a language joins where its paragraph count for that article
                       equals English's
  chromium_nway        messages translated in English and all of CHROMIUM_NWAY (§4.1.2)
  chromium             the wider pairs: English + every Chromium language with a translation
  libreoffice_ory_asm  LibreOffice UI pairs for Oriya and Assamese (§4.1.3)
  mediawiki_ory_asm    MediaWiki pairs for Oriya and Assamese (§4.1.3)
Message sets keep sentence-like strings only: English >= 30 characters with a space and no placeholder or markup
characters ($ < { %), a translation that differs from the English, and the first unit per English text (dedupe).
"""
import hashlib
import json
import os

import catalogs
import udhr
from clean import clean_ui_string, has_placeholder, match_key
from langs import CHROMIUM_NWAY, ENGLISH, LANGS

MIN_ENGLISH_CHARS = 30


def sentence_like(english_raw):
    return len(english_raw) >= MIN_ENGLISH_CHARS and " " in english_raw and not has_placeholder(english_raw)


def aligned_units(prefix, english, translations):
    """english: {key: raw}; translations: {code: {key: raw}} -> list of units (keys in English order)."""
    units, seen = [], set()
    for key, raw_en in english.items():
        if not sentence_like(raw_en):
            continue
        en = clean_ui_string(raw_en)
        if match_key(en) in seen:
            continue
        unit = {}
        for code, catalog in translations.items():
            raw = catalog.get(key)
            if raw is None or has_placeholder(raw):
                continue
            text = clean_ui_string(raw)
            if text and match_key(text) != match_key(en):
                unit[code] = text
        if unit:
            seen.add(match_key(en))
            units.append({"id": f"{prefix}/{key_id(key)}", ENGLISH: en, **unit})
    return units


def key_id(key):
    key = str(key)
    return key if len(key) <= 60 and "\x04" not in key else hashlib.sha1(key.encode()).hexdigest()[:16]


def udhr_sets(root):
    decls = {lang.code: udhr.load(root, lang.udhr) for lang in LANGS if lang.udhr}
    decls = {code: d for code, d in decls.items() if d}
    english = decls[ENGLISH]
    articles, paragraphs = [], []
    for unit_id, en_paras in english.items():
        unit = {"id": f"udhr/{unit_id}"}
        for code, d in decls.items():
            if unit_id in d:
                unit[code] = "\n".join(d[unit_id])
        articles.append(unit)
        for i in range(len(en_paras)):
            para = {"id": f"udhr/{unit_id}/p{i + 1}"}
            for code, d in decls.items():
                if len(d.get(unit_id, [])) == len(en_paras):
                    para[code] = d[unit_id][i]
            paragraphs.append(para)
    return {"udhr": articles, "udhr_paragraphs": paragraphs}


def chromium_sets(root):
    english = catalogs.chromium(root, "en-US")
    if not english:
        return {}
    codes = [lang for lang in LANGS if lang.chromium and lang.code != ENGLISH]
    translations = {lang.code: catalogs.chromium(root, lang.chromium) for lang in codes}
    translations = {c: t for c, t in translations.items() if t}
    wide = aligned_units("chromium", english, translations)
    nway = [u for u in wide if all(c in u for c in CHROMIUM_NWAY)]
    return {"chromium_nway": nway, "chromium": wide}


def ory_asm_sets(root):
    out = {}
    lo = {lang.code: catalogs.lo_ui(root, lang.lo) for lang in LANGS if lang.code in ("ory_Orya", "asm_Beng")}
    lo = {c: t for c, t in lo.items() if t}
    if lo:
        english = {}
        for catalog in lo.values():
            english.update(catalogs.lo_ui_english(catalog))
        out["libreoffice_ory_asm"] = aligned_units("libreoffice", english, lo)
    mw_langs = [lang for lang in LANGS if lang.code in ("ory_Orya", "asm_Beng")]
    mw = {lang.code: catalogs.mediawiki(root, lang.mw) for lang in mw_langs}
    mw = {c: t for c, t in mw.items() if t}
    if mw:
        out["mediawiki_ory_asm"] = aligned_units("mediawiki", catalogs.mediawiki(root, "en"), mw)
    return out


def build_sets(root):
    sets = {}
    sets.update(udhr_sets(root))
    sets.update(chromium_sets(root))
    sets.update(ory_asm_sets(root))
    return sets


def write_set(out_dir, name, units, packages):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name + ".jsonl")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        for unit in units:
            f.write(json.dumps(unit, ensure_ascii=False) + "\n")
    os.replace(path + ".tmp", path)
    per_lang = {}
    for unit in units:
        for code in unit:
            if code != "id":
                per_lang[code] = per_lang.get(code, 0) + 1
    manifest = {
        "set": name,
        "file": name + ".jsonl",
        "units": len(units),
        "units_per_language": per_lang,
        "packages": packages,
        "rules": __doc__.strip(),
    }
    with open(os.path.join(out_dir, name + ".manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, ensure_ascii=False, indent=2)
    return path
