"""The .pak and .mo parsers on tiny fixtures made by the tests themselves (build_pak / build_mo, plus hand-made
bytes for version 4, aliases, big-endian catalogs and malformed files)."""
import os
import struct
import tempfile
import unittest

import _path  # noqa: F401
import mo
import pak


class PakTest(unittest.TestCase):
    def test_round_trip_v5_and_v4(self):
        strings = {7: "Open", 12: "Ouvrir le fichier", 300: "打开文件 🙂"}
        for version in (5, 4):
            resources, encoding = pak.parse_pak(pak.build_pak(strings, version=version))
            self.assertEqual(encoding, 1)
            self.assertEqual({k: v.decode("utf-8") for k, v in resources.items()}, strings)

    def test_aliases(self):
        # v5 with 2 resources and one alias (id 9 -> entry 1, i.e. resource 5)
        blobs = [b"alpha", b"beta"]
        header = struct.pack("<IB3xHH", 5, 1, 2, 1)
        start = len(header) + 3 * 6 + 4
        index = struct.pack("<HI", 4, start) + struct.pack("<HI", 5, start + 5) + struct.pack("<HI", 0, start + 9)
        data = header + index + struct.pack("<HH", 9, 1) + b"".join(blobs)
        resources, _ = pak.parse_pak(data)
        self.assertEqual(resources, {4: b"alpha", 5: b"beta", 9: b"beta"})

    def test_read_file_skips_undecodable(self):
        data = pak.build_pak({1: "ok"})[:-2] + b"\xff\xfe"  # resource 1 is now "\xff\xfe"
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.pak")
            with open(path, "wb") as f:
                f.write(pak.build_pak({1: "fine", 2: "ok"}))
            self.assertEqual(pak.read_pak_strings(path), {1: "fine", 2: "ok"})
            with open(path, "wb") as f:
                f.write(data)
            self.assertEqual(pak.read_pak_strings(path), {})

    def test_malformed(self):
        with self.assertRaisesRegex(pak.PakError, "too short"):
            pak.parse_pak(b"\x05\0")
        with self.assertRaisesRegex(pak.PakError, "version 7"):
            pak.parse_pak(struct.pack("<IB3xHH", 7, 1, 0, 0))
        with self.assertRaisesRegex(pak.PakError, "past the end"):
            pak.parse_pak(pak.build_pak({1: "a", 2: "b"})[:20])
        bad = bytearray(pak.build_pak({1: "abc"}))
        struct.pack_into("<I", bad, 12 + 6 + 2, 10_000)  # end offset beyond the file
        with self.assertRaisesRegex(pak.PakError, "bad offsets"):
            pak.parse_pak(bytes(bad))


class MoTest(unittest.TestCase):
    def test_round_trip_context_plural_header(self):
        entries = {"": "Content-Type: text/plain; charset=UTF-8\n", "Open": "Ouvrir",
                   "menu\x04File": "Fichier", "%d file\x00%d files": "%d fichier\x00%d fichiers"}
        parsed = mo.parse_mo(mo.build_mo(entries))
        self.assertEqual(parsed, {"Open": "Ouvrir", "menu\x04File": "Fichier", "%d file": "%d fichier"})
        self.assertEqual(mo.msgid_of("menu\x04File"), "File")

    def test_big_endian(self):
        keys, values = [b"Save"], [b"Enregistrer"]
        n, orig_at, trans_at = 1, 28, 36
        data_at = 44
        body = keys[0] + b"\0" + values[0] + b"\0"
        data = (struct.pack(">7I", mo.MAGIC, 0, n, orig_at, trans_at, 0, 0)
                + struct.pack(">II", 4, data_at) + struct.pack(">II", 11, data_at + 5) + body)
        self.assertEqual(mo.parse_mo(data), {"Save": "Enregistrer"})

    def test_malformed(self):
        with self.assertRaisesRegex(mo.MoError, "magic"):
            mo.parse_mo(b"\0" * 28)
        with self.assertRaisesRegex(mo.MoError, "too short"):
            mo.parse_mo(b"\xde\x12")
        with self.assertRaisesRegex(mo.MoError, "past the end"):
            mo.parse_mo(mo.build_mo({"a": "b", "c": "d"})[:40])


if __name__ == "__main__":
    unittest.main()
