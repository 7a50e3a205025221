// NIAH-format training examples for the trained retrieval experiment (issue #21 item 4; niah_experiment.h).
//
// Source text: a language's TRAINING documents only, positions [2M, n) of the fixed canonical order of
// data/data_split.h (M = held_out_docs, the same M whose [0, 2M) documents the evaluation haystacks come from), so
// no sentence an evaluation prompt holds is ever trained on. Sentences by niah_split_sentences.
//
// One example (niah_train_example_build), sample i of (language, task, seed):
//   prompt  = NiahGenerator's prompt (haystack of `length` tokens from the training sentences, needles, question:
//             the evaluation's exact layout and templates, drawn from `seed`, which must differ from the evaluation's)
//   answer  = "\n<Answer> " + the expected values joined by ", " (or the none word) + " </Answer>"
//   filler  = "\n\n" + training sentences from a drawn start (stream "niah-train-filler/<code>", counter i), cut so
//             that prompt + answer + filler is exactly `seq_len` tokens, then padded with single spaces when a cut
//             cannot reach seq_len (a BPE merge); `exact` says whether it was reached.
// Why exactly seq_len: the trainer packs documents into rows of seq_len tokens and continues a document that does not
// fit in the next row as a new sequence (data/data_stream.h); a continuation would hold a question without its
// haystack. An example of exactly one row is never split. The filler after the answer keeps the prompt at position 0,
// as in the evaluation, and is plain language modelling on training prose.
// The loss (niah_experiment_config.h, train.loss): "all" is pretrain's CE on every token of the row (the answer is a
// small share of it); "answer" keeps only the targets that predict the answer's tokens (niah_answer_targets).
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/data_stream.h"
#include "data/tokenizer.h"
#include "evals/niah/niah_generate.h"

namespace hlm {

// Sentences of the language's training documents (split_documents(..., held_out_docs).train), in canonical order.
// Input error naming the language when it has no training document or no sentence.
std::vector<std::string> niah_training_sentences(const Corpus& corpus, const std::string& code, int64_t held_out_docs);

// "\n<Answer> 1234567, 2345678 </Answer>" (number tasks) or "\n<Answer> none </Answer>".
std::string niah_answer_text(const NiahSample& sample);

// The answer loss: sets to kIgnoreTarget (−100) every target of `batch` except those that predict a token holding a
// byte of the answer "\n<Answer> ... </Answer>" (niah_answer_text: the newline and opening tag, the values or the
// none word, the end tag). Per sequence of batch.batch.cu_seqlens: the sequence's tokens are decoded; the answer
// starts at the "\n<Answer>" of the last "</Answer>\n<Answer>" (the prompt's instruction ends with the example tags
// "<Answer> the numbers </Answer>" and the answer follows it; filler prose holds no tag) and ends with the next
// "</Answer>"; its byte range is mapped to tokens by decoding prefixes (binary search).
// Under the bytes tokenizer the kept targets are exactly the answer's bytes; under a BPE tokenizer the first and last
// kept tokens may also hold a neighbouring byte (">\n" where the prompt's tag and the answer's newline merge). A
// sequence without the whole answer after its instruction (a row piece cut by packing) keeps no target. A pure function of the tokens, so a
// resumed run sees the same targets.
void niah_answer_targets(PackedBatch& batch, const Tokenizer& tokenizer);

struct NiahTrainExample {
  std::string text;
  int64_t tokens = 0;        // tokens of text under the tokenizer
  int64_t prompt_tokens = 0;  // of prompt + answer (the rest is filler)
  bool exact = false;        // tokens == seq_len
};

class NiahTrainExampleBuilder {
 public:
  // `sentences` (niah_training_sentences) and `tokenizer` must outlive the builder.
  NiahTrainExampleBuilder(const NiahLanguage& lang, const std::vector<std::string>& sentences,
                          const Tokenizer& tokenizer, int64_t seq_len);
  // Input error when prompt + answer alone exceed seq_len (naming the language, task and length).
  NiahTrainExample build(const NiahTaskSpec& task, int64_t length, uint64_t seed, int64_t index);

 private:
  const NiahLanguage& lang_;
  const std::vector<std::string>& sentences_;
  const Tokenizer& tokenizer_;
  int64_t seq_len_;
  NiahGenerator gen_;
};

// Writes the derived corpus `dir` (data/corpus.h format, every language tier "high": equal token quotas): per
// language `docs_per_language` examples, example i of task tasks[i % |tasks|] and haystack length
// lengths[(i / |tasks|) % |lengths|]. Returns per language {"documents", "tokens", "exact", "sentences"} and the
// totals, the JSON written to dir/niah_train_data.json after corpus.json (the stage's done marker).
struct NiahTrainDataSpec {
  std::string corpus;  // source corpus
  std::string tokenizer;
  std::vector<std::string> langs, tasks;
  std::vector<int64_t> lengths;
  int64_t held_out_docs = 0;  // M of the source corpus
  int64_t seq_len = 0;
  int64_t docs_per_language = 0;
  uint64_t seed = 1;
};
nlohmann::json niah_train_data_write(const std::string& dir, const NiahTrainDataSpec& spec,
                                     const std::function<void(const std::string&)>& log);

}  // namespace hlm
