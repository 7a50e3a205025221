"""The disjointness checker and filter on fixtures: a parallel set and training files written by the test."""
import json
import os
import tempfile
import unittest

import _path  # noqa: F401
import disjoint


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


class DisjointTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.parallel = os.path.join(self.dir, "parallel")
        os.makedirs(self.parallel)
        write_jsonl(os.path.join(self.parallel, "set.jsonl"), [
            {"id": "u1", "eng_Latn": "Everyone has the right to life. Short.", "fra_Latn": "Tout individu a droit à la vie."},
            {"id": "u2", "eng_Latn": "Nobody shall be held in slavery.", "hin_Deva": "कोई भी गुलामी में नहीं रखा जाएगा।"},
        ])

    def tearDown(self):
        self.tmp.cleanup()

    def test_sentences_of_every_language_are_collected(self):
        keys = disjoint.parallel_sentences(self.parallel)
        self.assertIn("everyone has the right to life", keys)
        self.assertIn("tout individu a droit à la vie", keys)
        self.assertIn("कोई भी गुलामी में नहीं रखा जाएगा", keys)
        self.assertNotIn("short", keys)  # under MIN_SENTENCE_CHARS
        self.assertEqual(keys["nobody shall be held in slavery"], "set/u2/eng_Latn")

    def test_clean_training_text_passes(self):
        train = os.path.join(self.dir, "eng.jsonl")
        write_jsonl(train, [{"text": "Something else entirely.\nShort."}, {"text": "Everyone has the right to food."}])
        _, found = disjoint.check_files(self.parallel, [train])
        self.assertEqual(found, [])
        self.assertEqual(disjoint.main(["disjoint.py", self.parallel, train]), 0)

    def test_overlap_is_found_after_normalisation(self):
        train = os.path.join(self.dir, "fra.jsonl")
        # NFD accents, other case, extra spaces, inside a longer document: still the same sentence
        write_jsonl(train, [{"text": "Intro text here.\nTOUT  individu a droit a\u0300 la vie !"}])
        _, found = disjoint.check_files(self.parallel, [train])
        self.assertEqual(len(found), 1)
        self.assertIn("document 1", found[0])
        self.assertIn("set/u1/fra_Latn", found[0])
        self.assertEqual(disjoint.main(["disjoint.py", self.parallel, train]), 1)

    def test_filter_drops_lines_and_counts(self):
        f = disjoint.EvalFilter(disjoint.parallel_sentences(self.parallel))
        lines = ["Keep this line please.", "nobody shall be held in slavery", "Also kept. Everyone has the right to life."]
        self.assertEqual([f.keep(x) for x in lines], [True, False, False])
        self.assertEqual(f.dropped_lines, 2)


if __name__ == "__main__":
    unittest.main()
