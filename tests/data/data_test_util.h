// Shared helpers for the data tests: a small synthetic multilingual corpus whose documents identify themselves
// ("<code>:<index>|<filler>#", '#' only at the end), a raw corpus writer for malformed inputs, and an error matcher.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/corpus.h"
#include "data/text_io.h"
#include "support/run_binary.h"

namespace hlm::test {

// Filler text: ASCII words and a few multibyte characters (2-, 3- and 4-byte UTF-8), never '#' or '|'.
inline std::string filler(uint64_t seed, size_t min_len, size_t max_len) {
  static const char* kPieces[] = {"le ", "chat ", "डेटा ", "数据 ", "ok ", "🙂 ", "ĳ ", "x", "\n", "tab\t"};
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s >> 33;
  };
  const size_t len = min_len + next() % (max_len - min_len + 1);
  std::string out;
  while (out.size() < len) out += kPieces[next() % 10];
  return out;
}

struct SyntheticLanguage {
  std::string code, tier;
  int docs;
};

inline std::vector<SyntheticLanguage> default_languages() {
  return {{"eng_Latn", "anchor", 240}, {"fra_Latn", "high", 160}, {"hin_Deva", "mid", 120}, {"bod_Tibt", "low", 60}};
}

inline std::string synthetic_doc(const std::string& code, int i, size_t min_len = 5, size_t max_len = 300) {
  return code + ":" + std::to_string(i) + "|" + filler(std::hash<std::string>{}(code) + static_cast<uint64_t>(i),
                                                       min_len, max_len) + "#";
}

// Writes the synthetic corpus to dir; returns the documents per language (file order).
inline std::vector<std::vector<std::string>> write_synthetic_corpus(
    const std::filesystem::path& dir, const std::vector<SyntheticLanguage>& spec = default_languages()) {
  std::vector<CorpusLanguage> langs;
  std::vector<std::vector<std::string>> docs;
  for (const SyntheticLanguage& s : spec) {
    CorpusLanguage l;
    l.code = s.code;
    l.tier = s.tier;
    langs.push_back(l);
    docs.emplace_back();
    for (int i = 0; i < s.docs; ++i) docs.back().push_back(synthetic_doc(s.code, i));
  }
  corpus_write(dir, langs, docs);
  return docs;
}

// A corpus with one language whose file holds `raw` (compressed unless `compress` is false) and a corpus.json listing
// `documents` documents and no checksum.
inline void write_raw_corpus(const std::filesystem::path& dir, const std::string& raw, int64_t documents,
                             bool compress = true) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "fra_Latn.jsonl.zst", std::ios::binary) << (compress ? zstd_compress(raw) : raw);
  nlohmann::json meta = {{"format", "hybridlm-corpus"},
                         {"version", 1},
                         {"languages",
                          {{{"code", "fra_Latn"}, {"file", "fra_Latn.jsonl.zst"}, {"tier", "high"},
                            {"documents", documents}}}},
                         {"sources", nlohmann::json::array()}};
  std::ofstream(dir / "corpus.json") << meta.dump(2);
}

// Runs fn and expects an input error whose message contains every needle.
inline void expect_input_error(const std::function<void()>& fn, const std::vector<std::string>& needles) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
    for (const std::string& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "message lacks '" << n << "': " << e.what();
    return;
  }
  ADD_FAILURE() << "expected an input error mentioning " << (needles.empty() ? "" : needles[0]);
}

}  // namespace hlm::test
