"""Keyed UI catalogs (message key -> raw translated string) for every keyed source, plus their English side.

Each function takes the unpack root (data/cache/x, one folder per package) and returns {key: raw string}, or {} when the
package or language is absent. Keys are only compared within one source, so they need not be globally unique.
  chromium   .pak id                     (chromium-l10n; English: chromium-common en-US.pak)
  lo_ui      "<file.mo>:<ctxt>\\x04<msgid>"  (libreoffice-l10n-*; English = msgid)
  gnome      "<pkg>/<domain.mo>:<key>"   (the GNOME packages; English = msgid)
  mediawiki  "<i18n dir>:<key>"          (mediawiki; qqq and @metadata dropped)
  firefox    "<path under locale>:<id>"  (firefox-esr-l10n-* langpack .xpi; English: firefox-esr omni.ja files)
"""
import glob
import json
import os
import re
import zipfile

import fluent
import mo
import pak
from langs import GNOME_PACKAGES


def chromium(root, locale):
    if locale is None:
        return {}
    pkg = "chromium-common" if locale == "en-US" else "chromium-l10n"
    path = os.path.join(root, pkg, "usr/lib/chromium/locales", locale + ".pak")
    return pak.read_pak_strings(path) if os.path.exists(path) else {}


def _mo_dir(directory, prefix):
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.mo"))):
        name = os.path.basename(path)
        for key, value in mo.read_mo(path).items():
            out[f"{prefix}{name}:{key}"] = value
    return out


def _english_of(catalog):
    """English side of a gettext catalog: the msgid of every key."""
    return {key: mo.msgid_of(key.split(":", 1)[1]) for key in catalog}


def lo_ui(root, lo):
    if lo is None:
        return {}
    pkg, resdir = lo
    return _mo_dir(os.path.join(root, f"libreoffice-l10n-{pkg}", "usr/lib/libreoffice/program/resource", resdir,
                                "LC_MESSAGES"), "")


def lo_ui_english(catalog):
    return _english_of(catalog)


def gnome(root, locale):
    if locale is None or locale == "C":
        return {}
    out = {}
    for pkg in GNOME_PACKAGES:
        out.update(_mo_dir(os.path.join(root, pkg, "usr/share/locale", locale, "LC_MESSAGES"), pkg + "/"))
    return out


def gnome_english(catalog):
    return _english_of(catalog)


def mediawiki(root, code):
    if code is None:
        return {}
    base = os.path.join(root, "mediawiki/usr/share/mediawiki")
    out = {}
    for path in sorted(glob.glob(os.path.join(base, "**", code + ".json"), recursive=True)):
        rel = os.path.relpath(os.path.dirname(path), base)
        if "i18n" not in rel.split(os.sep):
            continue
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for key, value in data.items():
            if key != "@metadata" and isinstance(value, str):
                out[f"{rel}:{key}"] = value
    return out


_LOCALE_PART = re.compile(r"^(?:browser/)?(?:localization/[^/]+/|chrome/[^/]+/locale/[^/]+/|chrome/[^/]+/locale/)")


def _firefox_zip(path, locale, out):
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if not (name.endswith(".ftl") or name.endswith(".properties")) or f"/{locale}/" not in f"/{name}":
                continue
            rel = name.replace(f"/{locale}/", "/L/")
            text = z.read(name).decode("utf-8", errors="replace")
            entries = fluent.parse_ftl(text) if name.endswith(".ftl") else fluent.parse_properties(text)
            for key, value in entries.items():
                out[f"{rel}:{key}"] = value


def firefox(root, firefox_entry):
    if firefox_entry is None:
        return {}
    pkg, locale = firefox_entry
    out = {}
    for path in glob.glob(os.path.join(root, f"firefox-esr-l10n-{pkg}", "usr/lib/firefox-esr/browser/extensions",
                                       "*.xpi")):
        _firefox_zip(path, locale, out)
    return out


def firefox_english(root):
    out = {}
    for rel in ("usr/lib/firefox-esr/omni.ja", "usr/lib/firefox-esr/browser/omni.ja"):
        path = os.path.join(root, "firefox-esr", rel)
        if os.path.exists(path):
            _firefox_zip(path, "en-US", out)
    # omni.ja keeps browser strings under localization/ too; the langpack under browser/localization/: align both.
    return {k.replace("browser/localization/", "localization/"): v for k, v in out.items()}


def firefox_normalise_keys(catalog):
    return {k.replace("browser/localization/", "localization/"): v for k, v in catalog.items()}
