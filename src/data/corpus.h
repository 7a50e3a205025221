// Corpus format ([data] issue, item 2): a directory holding
//   corpus.json              {"format": "hybridlm-corpus", "version": 1, "languages": [{"code": "fra_Latn",
//                             "file": "fra_Latn.jsonl.zst", "documents": N, "bytes": B, "sha256": "...",
//                             "tier": "anchor|high|mid|low"}], "sources": [...],
//                            "packages": [...], "source_bytes": {...}, "left_out": {...}}   (optional provenance,
//                                                                          data/corpus_provenance.h)
//   <code>.jsonl.zst         zstd-compressed JSONL, one {"text": "..."} object per document
// Language codes follow FineWeb-2 (ISO 639-3 + script, e.g. eng_Latn, cmn_Hani).
// Reading validates: unknown format/version, a listed file missing, truncated zstd, invalid JSON lines, a missing
// "text", invalid UTF-8 -> input errors naming the file and line; empty documents are skipped and counted.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/corpus_provenance.h"

namespace hlm {

struct CorpusLanguage {
  std::string code;        // "fra_Latn"
  std::string file;        // relative to the corpus directory
  std::string tier;        // "anchor", "high", "mid", "low" (mixture shares, see data_mixture.h)
  int64_t documents = 0;   // as listed in corpus.json: lines of the file, empty documents included
  int64_t bytes = 0;       // UTF-8 text bytes of all documents; -1 when corpus.json omits it (checked when listed)
  std::string sha256{};    // hex SHA-256 of the .jsonl.zst file (optional; checked when listed, written by corpus_write)
};

struct CorpusDocuments {
  std::vector<std::string> texts;  // in file order
  int64_t skipped_empty = 0;       // documents with empty text (skipped, reported)
};

class Corpus {
 public:
  static Corpus open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const std::vector<CorpusLanguage>& languages() const { return languages_; }
  const CorpusProvenance& provenance() const { return provenance_; }  // empty when corpus.json records none
  const CorpusLanguage& language(const std::string& code) const;  // input error for an unknown code
  // Every document of one language, decompressed and validated.
  CorpusDocuments read_documents(const std::string& code) const;

 private:
  std::filesystem::path dir_;
  std::vector<CorpusLanguage> languages_;
  CorpusProvenance provenance_;
};

// Writes a corpus directory (used by `hybridlm corpus import`, `make corpus` and by tests): one .jsonl.zst per
// language and corpus.json, each file atomically. docs[i] belongs to languages[i]. Codes must look like FineWeb-2's
// ([a-z]{2,3}_[A-Z][a-z]{3}); an empty `file` becomes "<code>.jsonl.zst"; documents, bytes and sha256 are computed
// (the given values are ignored). `sources` (free text, e.g. "fra_Latn=path (jsonl)") goes to corpus.json "sources".
// `provenance` is recorded as given; its source_bytes must name written languages and sum to each one's text bytes.
void corpus_write(const std::filesystem::path& dir, const std::vector<CorpusLanguage>& languages,
                  const std::vector<std::vector<std::string>>& docs, const std::vector<std::string>& sources = {},
                  const CorpusProvenance& provenance = {});

// The four tiers in mixture order: "anchor", "high", "mid", "low" (index 1..3 = DataConfig::tier_ratio[0..2]).
int corpus_tier_index(const std::string& tier);  // input error listing the four for anything else

}  // namespace hlm
