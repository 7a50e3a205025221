// The corpus of issue #27 (tests/train/test_trainer_preflight.cpp, tests/cli/test_cli_preflight.cpp): documents that
// alternate long and very short, so that with --held-out-docs 1 one held-out split of eng_Latn is a 12-token document
// (no full row of 512 tokens) while the other one is long.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/data_split.h"
#include "data/data_stream.h"

namespace hlm::test {

// Documents alternating long (~1500 bytes) and very short (~12 bytes) in file order. `short_split` picks which of
// eng_Latn's two held-out documents (--held-out-docs 1: canonical positions 0 = validation, 1 = test) is the short
// one; every other language keeps both held-out documents long.
inline void write_alternating_corpus(const std::filesystem::path& dir, Split short_split, int docs_per_language = 40) {
  const std::vector<CorpusLanguage> languages = {
      {"eng_Latn", "", "anchor", 0}, {"fra_Latn", "", "high", 0}, {"deu_Latn", "", "mid", 0},
      {"rus_Cyrl", "", "low", 0}};
  const std::vector<std::string> phrase = {"the cat sat on the mat. ", "le chat dort sur le tapis. ",
                                           "die katze schlaeft. ", "кошка спит на ковре. "};
  std::vector<std::vector<std::string>> docs(languages.size());
  for (size_t l = 0; l < languages.size(); ++l) {
    const DocumentSplit split = split_documents(languages[l].code, docs_per_language, 1);
    // Parity of the long documents: eng_Latn's chosen held-out document short, the other one long; elsewhere the
    // test document long (so is the validation one unless it has the other parity: then it is made long too).
    const int64_t target = l == 0 ? (short_split == Split::Test ? split.test[0] : split.valid[0]) : -1;
    const int64_t long_parity = l == 0 ? 1 - target % 2 : split.test[0] % 2;
    for (int d = 0; d < docs_per_language; ++d) {
      const bool held_out_other = l != 0 && d == split.valid[0];
      const bool long_doc = d % 2 == long_parity || held_out_other;
      std::string text;
      const int reps = long_doc ? 1500 / static_cast<int>(phrase[l].size()) + 1 : 1;
      for (int r = 0; r < reps; ++r) text += phrase[l];
      if (!long_doc) text = "short note. ";  // 12 bytes = 12 tokens of the bytes tokenizer
      docs[l].push_back(text);
    }
    if (l == 0) {  // the intended case: one held-out document long, the other short
      const int64_t other = short_split == Split::Test ? split.valid[0] : split.test[0];
      EXPECT_GT(docs[l][static_cast<size_t>(other)].size(), 1000u);
      EXPECT_LT(docs[l][static_cast<size_t>(target)].size(), 20u);
    }
  }
  corpus_write(dir, languages, docs);
}

}  // namespace hlm::test
