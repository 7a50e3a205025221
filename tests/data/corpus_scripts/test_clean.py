"""Shared cleaning: NFC, markup, accelerators, placeholders, ICU messages, sentence keys, dedupe."""
import unicodedata
import unittest

import _path  # noqa: F401
from clean import PLACEHOLDER, Deduper, clean_prose, clean_ui_string, has_placeholder, match_key, sentences


class CleanTest(unittest.TestCase):
    def test_nfc(self):
        decomposed = unicodedata.normalize("NFD", "Tiếng Việt")
        self.assertNotEqual(decomposed, "Tiếng Việt")
        self.assertEqual(clean_ui_string(decomposed), "Tiếng Việt")
        self.assertEqual(clean_prose(decomposed + "  \n x"), "Tiếng Việt x")

    def test_markup_and_entities(self):
        self.assertEqual(clean_ui_string("<b>Bold</b> &amp; <a href='x'>link</a>"), "Bold & link")

    def test_accelerators(self):
        self.assertEqual(clean_ui_string("_Open"), "Open")          # GNOME
        self.assertEqual(clean_ui_string("~Save As"), "Save As")    # LibreOffice
        self.assertEqual(clean_ui_string("&Quit"), "Quit")          # Firefox/KDE
        self.assertEqual(clean_ui_string("打开(_O)"), "打开")         # CJK-style accelerator
        self.assertEqual(clean_ui_string("snake_case stays"), "snake_case stays")

    def test_placeholders(self):
        p = PLACEHOLDER
        self.assertEqual(clean_ui_string("Delete %s?"), f"Delete {p}?")
        self.assertEqual(clean_ui_string("Page %1$d of %2$d"), f"Page {p} of {p}")
        self.assertEqual(clean_ui_string("Hello $1, see [[Help:Intro|help]]"), f"Hello {p}, see help")
        self.assertEqual(clean_ui_string("{{PLURAL:$1|one edit|$1 edits}} by { $user }"), f"{p} by {p}")
        self.assertTrue(has_placeholder("Remove $1"))
        self.assertFalse(has_placeholder("Remove all"))

    def test_icu_select_and_bidi_marks_dropped(self):
        self.assertEqual(clean_ui_string("{COUNT, plural, =1 {One tab} other {# tabs}}"), "")
        self.assertEqual(clean_ui_string("\u200fשלום\u200e"), "שלום")
        self.assertEqual(clean_ui_string("می\u200cخواهم"), "می\u200cخواهم")  # ZWNJ is part of the word

    def test_match_key_and_sentences(self):
        self.assertEqual(match_key("  Hello,   WORLD! "), "hello,   world".replace("   ", " "))
        self.assertEqual(sentences("First sentence here. Second one is here!\n1. Short"),
                         ["first sentence here", "second one is here"])
        self.assertEqual(sentences("这是第一句话，很长。这是第二句话，也很长。"), ["这是第一句话，很长", "这是第二句话，也很长"])
        self.assertEqual(sentences("यह पहला वाक्य है। यह दूसरा वाक्य है।"), ["यह पहला वाक्य है", "यह दूसरा वाक्य है"])

    def test_dedupe(self):
        d = Deduper()
        self.assertEqual([d.first(x) for x in ["Open file", "open FILE.", "Close", "", "Close"]],
                         [True, False, True, False, False])
        self.assertEqual(d.dropped, 3)


if __name__ == "__main__":
    unittest.main()
