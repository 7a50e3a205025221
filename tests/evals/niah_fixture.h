// A small corpus for the NIAH tests, written by the tests themselves: four languages in four scripts (English,
// Chinese, Russian, Hindi), documents of lines of made-up sentences. Training documents (by the fixed split with
// held_out_docs = kNiahFixtureHeldOut) carry the marker word kTrainMarker in every sentence, so a test can see that no
// training text reaches a haystack. Each document also holds a line without a full stop (a "UI string") and a short
// sentence, both of which the sentence rule drops.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/data_split.h"

namespace hlm::test {

inline constexpr int64_t kNiahFixtureHeldOut = 6;
inline constexpr const char* kTrainMarker = "TRAINONLY";

struct NiahFixtureLanguage {
  const char* code;
  std::vector<const char*> words;
  const char* space;  // between words ("" for Chinese)
  const char* stop;   // sentence end
};

inline std::vector<NiahFixtureLanguage> niah_fixture_languages() {
  return {
      {"eng_Latn", {"the", "river", "quiet", "stone", "walked", "under", "green", "light", "small", "house", "of",
                    "every", "morning", "bread", "window", "slowly"}, " ", "."},
      {"cmn_Hani", {"我们", "今天", "河边", "安静", "石头", "走过", "绿色", "灯光", "小房子", "每天", "早上", "面包",
                    "窗户", "慢慢地"}, "", "。"},
      {"rus_Cyrl", {"тихий", "берег", "камень", "шёл", "под", "зелёный", "свет", "маленький", "дом", "каждое", "утро",
                    "хлеб", "окно", "медленно"}, " ", "."},
      {"hin_Deva", {"नदी", "शांत", "पत्थर", "चला", "नीचे", "हरा", "रोशनी", "छोटा", "घर", "हर", "सुबह", "रोटी",
                    "खिड़की", "धीरे"}, " ", "।"},
  };
}

// Deterministic made-up sentence of 5..12 words.
inline std::string niah_fixture_sentence(const NiahFixtureLanguage& l, uint64_t& state, bool training) {
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  const uint64_t n = 5 + next() % 8;
  std::string s;
  for (uint64_t i = 0; i < n; ++i) {
    if (i > 0) s += l.space;
    s += l.words[next() % l.words.size()];
    if (training && i == 1) s += std::string(l.space) + kTrainMarker;
  }
  return s + l.stop;
}

inline void write_niah_fixture_corpus(const std::filesystem::path& dir, int docs_per_language = 20) {
  std::vector<CorpusLanguage> langs;
  std::vector<std::vector<std::string>> docs;
  uint64_t state = 12345;
  for (const NiahFixtureLanguage& l : niah_fixture_languages()) {
    CorpusLanguage cl;
    cl.code = l.code;
    cl.tier = std::string(l.code) == "eng_Latn" ? "anchor" : "high";
    langs.push_back(cl);
    const DocumentSplit split = split_documents(l.code, docs_per_language, kNiahFixtureHeldOut);
    std::vector<bool> training(static_cast<size_t>(docs_per_language), false);
    for (int64_t d : split.train) training[static_cast<size_t>(d)] = true;
    docs.emplace_back();
    for (int d = 0; d < docs_per_language; ++d) {
      std::string text = "Menu Label Without Stop\n";
      for (int line = 0; line < 3; ++line) {
        for (int k = 0; k < 4; ++k) text += niah_fixture_sentence(l, state, training[static_cast<size_t>(d)]) + " ";
        text += std::string("Ok") + l.stop + "\n";  // under 8 code points: dropped
      }
      docs.back().push_back(text);
    }
  }
  corpus_write(dir, langs, docs);
}

}  // namespace hlm::test
