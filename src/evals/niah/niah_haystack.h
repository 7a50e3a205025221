// NIAH haystacks: held-out sentences of one corpus language, sized to a token target with the evaluated model's
// tokenizer (../shared/docs/evals.md §2; docs/niah.md).
//
// Source text: the language's held-out documents only (data/data_split.h: validation [0, M), test [M, 2M) of the
// fixed canonical order; never a training document), in canonical order.
//
// Sentence rule (niah_split_sentences), standing in for OneRULER's Stanza / "[?.!] + space" split:
//   1. a document is split into lines at '\n' (corpus documents hold one paragraph or UI string per line);
//   2. each line's whitespace runs become one space, ends trimmed;
//   3. a line is cut after a sentence terminator, optionally followed by closing quotes or brackets, when a space
//      follows (the space is dropped): . ? ! and the script full stops । ॥ ۔ ؟ ። ፧ ។ ။ ། ։; after 。！？ (U+3002,
//      U+FF01, U+FF1F) the cut needs no space;
//   4. a piece is kept as a sentence when it ends with a terminator (+ closers) and has at least 8 code points, so
//      headings, menu labels and other UI strings without a full stop are not used.
//
// Sizing (NiahHaystackSizer::build): the haystack is the sentences from a start index onward, cycling through the
// list as OneRULER does when the text is short, joined by the language's joiner (" ", "" for Chinese). The target
// counts the haystack alone, as OneRULER does (the prompt adds the template, needles and question: every language
// gets the same haystack token budget, so high-inflation languages get less text). The number k of whole sentences is
// the largest whose joined text encodes to <= target tokens, found by a galloping + binary search on exact encodes of
// the joined text, started from the sum of per-sentence counts. When the gap left is over 0.5 % of the target, the
// next sentence is cut to its longest prefix that still fits: at a space first and, if the gap is still over 0.5 %
// (a long word at a small target), at a code point inside the following word; Chinese (joiner "") cuts at code
// points. So the haystack ends within 0.5 % below the target, up to one token's granularity (OneRULER stops at whole
// sentences; at 1K tokens one sentence can be several percent).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/corpus.h"
#include "data/tokenizer.h"

namespace hlm {

std::vector<std::string> niah_split_sentences(std::string_view document);

enum class NiahSplit { Valid, Test, Both };
NiahSplit niah_split_from_name(const std::string& name);  // "valid", "test", "both"; input error otherwise

// Sentences of the language's held-out documents (split_documents with held_out_docs = M), in canonical order.
// Input error naming the language when it has no held-out document or no sentence under the rule above.
std::vector<std::string> niah_held_out_sentences(const Corpus& corpus, const std::string& code, int64_t held_out_docs,
                                                 NiahSplit split);

struct NiahHaystack {
  std::vector<std::string> pieces;  // whole sentences, the last one possibly a cut prefix
  int64_t tokens = 0;               // tokens of the pieces joined by the joiner (exact encode)
  bool last_cut = false;            // whether the last piece is a cut sentence
};

class NiahHaystackSizer {
 public:
  // `sentences` and `tokenizer` must outlive the sizer; `joiner` is " " or "".
  NiahHaystackSizer(const std::vector<std::string>& sentences, const Tokenizer& tokenizer, std::string joiner);

  // The haystack of at most `target_tokens` tokens starting at sentence `start` (mod the sentence count).
  NiahHaystack build(size_t start, int64_t target_tokens);

  int64_t count_tokens(std::string_view text) const;
  int64_t encodes() const { return encodes_; }  // exact encodes of joined text done so far (for tests and logs)

 private:
  const std::string& sentence(size_t start, int64_t i) const;
  int64_t sentence_tokens(size_t index);  // tokens of joiner + sentence, cached per sentence
  std::string joined(size_t start, int64_t k) const;

  const std::vector<std::string>& sentences_;
  const Tokenizer& tokenizer_;
  std::string joiner_;
  std::vector<int32_t> sentence_tokens_;  // -1 = not counted yet
  mutable int64_t encodes_ = 0;
};

}  // namespace hlm
