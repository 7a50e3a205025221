// Corpus format: write/read round trip, checksums, and every malformed input giving an input error that names the
// file and line (truncated zstd, bad JSON, missing "text", invalid UTF-8, wrong counts, missing files).
#include <gtest/gtest.h>

#include "data/sha256.h"
#include "data_test_util.h"

using namespace hlm;
using test::expect_input_error;
namespace fs = std::filesystem;

TEST(Sha256, KnownVectors) {  // FIPS 180-4 examples
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 h;  // a million 'a', fed in uneven pieces
  const std::string chunk(997, 'a');
  size_t fed = 0;
  while (fed < 1000000) {
    const size_t n = std::min<size_t>(chunk.size(), 1000000 - fed);
    h.update(chunk.data(), n);
    fed += n;
  }
  EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Utf8, Validation) {
  EXPECT_EQ(utf8_first_invalid("plain ascii"), std::string::npos);
  EXPECT_EQ(utf8_first_invalid("é डेटा 数据 🙂"), std::string::npos);
  EXPECT_EQ(utf8_first_invalid("ab\xff"), 2u);
  EXPECT_EQ(utf8_first_invalid("a\xc0\xaf"), 1u);          // overlong '/'
  EXPECT_EQ(utf8_first_invalid("\xed\xa0\x80"), 0u);       // surrogate U+D800
  EXPECT_EQ(utf8_first_invalid("\xf4\x90\x80\x80"), 0u);   // above U+10FFFF
  EXPECT_EQ(utf8_first_invalid("ok\xe6\x95"), 2u);         // truncated sequence
}

TEST(Corpus, RoundTrip) {
  test::ScratchDir scratch("corpus");
  const fs::path dir = scratch.path() / "c";
  const auto docs = test::write_synthetic_corpus(dir);
  const Corpus corpus = Corpus::open(dir);
  ASSERT_EQ(corpus.languages().size(), 4u);
  EXPECT_EQ(corpus.languages()[1].code, "fra_Latn");
  EXPECT_EQ(corpus.languages()[1].tier, "high");
  EXPECT_EQ(corpus.languages()[1].file, "fra_Latn.jsonl.zst");
  EXPECT_EQ(corpus.languages()[1].documents, 160);
  EXPECT_EQ(corpus.languages()[1].sha256.size(), 64u);
  for (size_t l = 0; l < docs.size(); ++l) {
    const CorpusDocuments read = corpus.read_documents(corpus.languages()[l].code);
    EXPECT_EQ(read.texts, docs[l]);
    EXPECT_EQ(read.skipped_empty, 0);
    int64_t bytes = 0;
    for (const auto& d : docs[l]) bytes += static_cast<int64_t>(d.size());
    EXPECT_EQ(corpus.languages()[l].bytes, bytes);
  }
  const auto meta = nlohmann::json::parse(test::read_text(dir / "corpus.json"));
  EXPECT_EQ(meta["format"], "hybridlm-corpus");
  EXPECT_EQ(meta["version"], 1);
}

TEST(Corpus, EmptyDocumentsAreSkippedAndCounted) {
  test::ScratchDir scratch("corpus");
  corpus_write(scratch.path(), {{"fra_Latn", "", "high", 0}}, {{"un", "", "deux", ""}});
  const Corpus corpus = Corpus::open(scratch.path());
  EXPECT_EQ(corpus.language("fra_Latn").documents, 4);
  const CorpusDocuments d = corpus.read_documents("fra_Latn");
  EXPECT_EQ(d.texts, (std::vector<std::string>{"un", "deux"}));
  EXPECT_EQ(d.skipped_empty, 2);
}

TEST(Corpus, UnknownLanguageListsKnownOnes) {
  test::ScratchDir scratch("corpus");
  test::write_synthetic_corpus(scratch.path());
  const Corpus corpus = Corpus::open(scratch.path());
  expect_input_error([&] { corpus.language("deu_Latn"); }, {"deu_Latn", "eng_Latn, fra_Latn, hin_Deva, bod_Tibt"});
  expect_input_error([&] { corpus.read_documents("xx"); }, {"unknown language 'xx'"});
}

TEST(Corpus, TruncatedZstd) {
  test::ScratchDir scratch("corpus");
  test::write_synthetic_corpus(scratch.path());
  const fs::path file = scratch.path() / "hin_Deva.jsonl.zst";
  fs::resize_file(file, fs::file_size(file) - 7);
  const Corpus corpus = Corpus::open(scratch.path());
  expect_input_error([&] { corpus.read_documents("hin_Deva"); }, {file.string(), "truncated zstd"});
}

TEST(Corpus, NotZstdAndEmptyFile) {
  test::ScratchDir scratch("corpus");
  test::write_raw_corpus(scratch.path(), "{\"text\": \"plain\"}\n", 1, /*compress=*/false);
  expect_input_error([&] { Corpus::open(scratch.path()).read_documents("fra_Latn"); }, {"corrupt zstd data"});
  test::write_raw_corpus(scratch.path(), "", 0, /*compress=*/false);
  expect_input_error([&] { Corpus::open(scratch.path()).read_documents("fra_Latn"); }, {"empty file"});
}

TEST(Corpus, InvalidJsonLine) {
  test::ScratchDir scratch("corpus");
  test::write_raw_corpus(scratch.path(), "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": \"c\n", 3);
  expect_input_error([&] { Corpus::open(scratch.path()).read_documents("fra_Latn"); },
                     {"fra_Latn.jsonl.zst", "line 3", "invalid JSON"});
  test::write_raw_corpus(scratch.path(), "{\"text\": \"a\"}\n\n", 2);  // blank lines are not documents
  expect_input_error([&] { Corpus::open(scratch.path()).read_documents("fra_Latn"); }, {"line 2", "invalid JSON"});
}

TEST(Corpus, MissingTextField) {
  test::ScratchDir scratch("corpus");
  test::write_raw_corpus(scratch.path(), "{\"text\": \"a\"}\n{\"txt\": \"b\"}\n", 2);
  expect_input_error([&] { Corpus::open(scratch.path()).read_documents("fra_Latn"); },
                     {"fra_Latn.jsonl.zst", "line 2", "missing \"text\""});
  test::write_raw_corpus(scratch.path(), "{\"text\": 7}\n", 1);
  expect_input_error([&] { Corpus::open(scratch.path()).read_documents("fra_Latn"); }, {"line 1", "\"text\""});
  test::write_raw_corpus(scratch.path(), "[\"text\"]\n", 1);
  expect_input_error([&] { Corpus::open(scratch.path()).read_documents("fra_Latn"); }, {"line 1", "\"text\""});
}

TEST(Corpus, InvalidUtf8) {
  test::ScratchDir scratch("corpus");
  test::write_raw_corpus(scratch.path(), "{\"text\": \"ok\"}\n{\"text\": \"bad \xff byte\"}\n", 2);
  expect_input_error([&] { Corpus::open(scratch.path()).read_documents("fra_Latn"); },
                     {"fra_Latn.jsonl.zst", "line 2", "invalid UTF-8 at byte 14"});
  test::write_raw_corpus(scratch.path(), "{\"text\": \"\\ud800\"}\n", 1);  // lone surrogate escape
  expect_input_error([&] { Corpus::open(scratch.path()).read_documents("fra_Latn"); }, {"line 1"});
  expect_input_error([&] { corpus_write(scratch.path() / "w", {{"fra_Latn", "", "high", 0}}, {{"a", "\xc3"}}); },
                     {"fra_Latn document 1", "invalid UTF-8"});
  EXPECT_FALSE(fs::exists(scratch.path() / "w"));
}

TEST(Corpus, CountsAndChecksumMustMatch) {
  test::ScratchDir scratch("corpus");
  test::write_raw_corpus(scratch.path(), "{\"text\": \"a\"}\n", 2);
  expect_input_error([&] { Corpus::open(scratch.path()).read_documents("fra_Latn"); },
                     {"holds 1 documents but corpus.json lists 2"});
  // Same number of documents, different bytes: the listed sha256 catches it.
  test::write_synthetic_corpus(scratch.path() / "c", {{"fra_Latn", "high", 2}});
  std::ofstream(scratch.path() / "c" / "fra_Latn.jsonl.zst", std::ios::binary)
      << zstd_compress(nlohmann::json{{"text", test::synthetic_doc("fra_Latn", 0)}}.dump() + "\n" +
                       nlohmann::json{{"text", test::synthetic_doc("fra_Latn", 0)}}.dump() + "\n");
  auto meta = nlohmann::json::parse(test::read_text(scratch.path() / "c" / "corpus.json"));
  meta["languages"][0].erase("bytes");
  std::ofstream(scratch.path() / "c" / "corpus.json") << meta.dump();
  expect_input_error([&] { Corpus::open(scratch.path() / "c").read_documents("fra_Latn"); }, {"sha256"});
}

TEST(Corpus, BadDirectoryAndMetadata) {
  test::ScratchDir scratch("corpus");
  expect_input_error([&] { Corpus::open(scratch.path() / "nope"); }, {"no such corpus directory"});
  expect_input_error([&] { Corpus::open(scratch.path()); }, {"corpus.json", "no such file"});
  std::ofstream(scratch.path() / "corpus.json") << "{";
  expect_input_error([&] { Corpus::open(scratch.path()); }, {"corpus.json", "invalid JSON"});
  std::ofstream(scratch.path() / "corpus.json") << R"({"format": "other", "version": 1, "languages": []})";
  expect_input_error([&] { Corpus::open(scratch.path()); }, {"not a hybridlm corpus"});
  std::ofstream(scratch.path() / "corpus.json") << R"({"format": "hybridlm-corpus", "version": 9, "languages": []})";
  expect_input_error([&] { Corpus::open(scratch.path()); }, {"unsupported corpus version 9"});
  test::write_synthetic_corpus(scratch.path() / "c");
  fs::remove(scratch.path() / "c" / "bod_Tibt.jsonl.zst");
  expect_input_error([&] { Corpus::open(scratch.path() / "c"); }, {"bod_Tibt.jsonl.zst", "missing"});
  auto meta = nlohmann::json::parse(test::read_text(scratch.path() / "c" / "corpus.json"));
  meta["languages"][0]["tier"] = "top";
  std::ofstream(scratch.path() / "c" / "corpus.json") << meta.dump();
  expect_input_error([&] { Corpus::open(scratch.path() / "c"); }, {"unknown tier 'top'", "anchor, high, mid, low"});
  meta["languages"][0]["tier"] = "anchor";
  meta["languages"][0]["file"] = "../escape.jsonl.zst";
  std::ofstream(scratch.path() / "c" / "corpus.json") << meta.dump();
  expect_input_error([&] { Corpus::open(scratch.path() / "c"); }, {"relative path inside"});
}

TEST(Corpus, WriteRejectsBadLanguages) {
  test::ScratchDir scratch("corpus");
  const fs::path dir = scratch.path() / "w";
  expect_input_error([&] { corpus_write(dir, {{"French", "", "high", 0}}, {{"a"}}); }, {"FineWeb-2 code"});
  expect_input_error([&] { corpus_write(dir, {{"fra_Latn", "", "top", 0}}, {{"a"}}); }, {"unknown tier"});
  expect_input_error(
      [&] { corpus_write(dir, {{"fra_Latn", "", "high", 0}, {"fra_Latn", "", "mid", 0}}, {{"a"}, {"b"}}); },
      {"given twice"});
  expect_input_error([&] { corpus_write(dir, {{"fra_Latn", "", "high", 0}}, {}); }, {"document lists"});
  EXPECT_FALSE(fs::exists(dir));
}
