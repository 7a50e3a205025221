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
// Packed mode (train_data.packed; niah_train_data_write with spec.packed): a row holds as many whole examples as fit,
// back to back, each "prompt + answer" followed by kNiahPackSeparator, the next example right after it; the rest of
// the row is filler ("\n\n" + training prose cut to seq_len, as above). Examples j, j+1, ... of a language run on
// from row to row (an example that does not fit starts the next row), so no example is ever cut. The trainer's hook
// splits every row into one sequence per example (niah_split_packed_examples): positions, attention and GDN state
// restart at each example, as in the evaluation, where the prompt sits at position 0; the filler is a sequence of its
// own.
// The loss (niah_experiment_config.h, train.loss): "all" is pretrain's CE on every token of the row (the answer is a
// small share of it); "answer" keeps only the targets that predict the answer's tokens (niah_answer_targets).
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
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

// What follows each example's answer in a packed row (the next example, or the filler, starts after it).
inline constexpr std::string_view kNiahPackSeparator = "\n\n";

// The answer loss: sets to kIgnoreTarget (−100) every target of `batch` except those that predict a token holding a
// byte of an answer "\n<Answer> ... </Answer>" (niah_answer_text: the newline and opening tag, the values or the
// none word, the end tag). Per sequence of batch.batch.cu_seqlens: the sequence's tokens are decoded; an answer
// starts at the "\n<Answer>" of a "</Answer>\n<Answer>" (the prompt's instruction ends with the example tags
// "<Answer> the numbers </Answer>" and the answer follows it; filler prose holds no tag) and ends with the next
// "</Answer>"; every such answer of the sequence is kept (one per example: a packed row split by
// niah_split_packed_examples has one per sequence, an unsplit one several) when its example's "<text>" lies between
// the previous answer's end (or the sequence start) and the answer, i.e. the haystack is in the sequence; its byte
// range is mapped to tokens by decoding prefixes (binary search).
// Under the bytes tokenizer the kept targets are exactly the answer's bytes; under a BPE tokenizer the first and last
// kept tokens may also hold a neighbouring byte (">\n" where the prompt's tag and the answer's newline merge). A
// sequence without the whole answer after its instruction, or without the haystack's "<text>" before it (a row
// piece cut by packing), keeps no target for it. A pure function of the tokens, so a resumed run sees the same
// targets.
void niah_answer_targets(PackedBatch& batch, const Tokenizer& tokenizer);

// Packed rows: splits every sequence of `batch` after each answer's "</Answer>" + kNiahPackSeparator, so that each
// example (and the filler after the last one) is a sequence of its own; the new sequence starts at the token holding
// the next example's first byte (under bytes exactly there; under a BPE tokenizer a token that straddles the
// separator goes with the next example). The target of each new sequence's last token becomes −100 (it would predict
// the next example's first token). Rows and ids are unchanged; a pure function of the tokens. Run it before
// niah_answer_targets (the experiment's hook does both).
void niah_split_packed_examples(PackedBatch& batch, const Tokenizer& tokenizer);

struct NiahTrainExample {
  std::string text;
  int64_t tokens = 0;        // tokens of text under the tokenizer
  int64_t prompt_tokens = 0;  // of prompt + answer (packed: of the examples and their separators); the rest is filler
  bool exact = false;        // tokens == seq_len
  int64_t examples = 1;      // examples in the row (packed mode; 1 otherwise)
};

// One example's text for a packed row (prompt + answer) and how to name it in an error.
struct NiahPackItem {
  std::string text, what;
};

class NiahTrainExampleBuilder {
 public:
  // `sentences` (niah_training_sentences) and `tokenizer` must outlive the builder.
  NiahTrainExampleBuilder(const NiahLanguage& lang, const std::vector<std::string>& sentences,
                          const Tokenizer& tokenizer, int64_t seq_len);
  // Input error when prompt + answer alone exceed seq_len (naming the language, task and length).
  NiahTrainExample build(const NiahTaskSpec& task, int64_t length, uint64_t seed, int64_t index);
  // Values of [n, 7] digits instead of 7 (NiahGenerator::set_value_digits_min).
  void set_value_digits_min(int n) { gen_.set_value_digits_min(n); }
  // prompt + answer of sample `index` (no filler).
  std::string example_text(const NiahTaskSpec& task, int64_t length, uint64_t seed, int64_t index);
  // A packed row: item(first), item(first + 1), ... each followed by kNiahPackSeparator while the row stays within
  // seq_len (the separator after the last one is the filler's "\n\n"), then filler drawn with (seed, filler_index).
  // Input error naming item(first).what when that example alone exceeds seq_len.
  NiahTrainExample build_packed(const std::function<NiahPackItem(int64_t)>& item, int64_t first, uint64_t seed,
                                int64_t filler_index);

 private:
  // Appends "\n\n" + training sentences from a drawn start (stream niah-train-filler/<code>, counter `index`) cut to
  // the longest code-point prefix that keeps ex within seq_len, then spaces; sets tokens and exact.
  void fill(NiahTrainExample& ex, uint64_t seed, int64_t index);

  const NiahLanguage& lang_;
  const std::vector<std::string>& sentences_;
  const Tokenizer& tokenizer_;
  int64_t seq_len_;
  NiahGenerator gen_;
};

// Writes the derived corpus `dir` (data/corpus.h format, every language tier "high": equal token quotas): per
// language `docs_per_language` documents (rows of seq_len tokens); example i (i = 0, 1, ...; one per document, or as
// many per document as fit when `packed`) is sample first_index + i of task tasks[i % |tasks|] and haystack length
// lengths[(i / |tasks|) % |lengths|]; with keys > 0 the multikey and none tasks hold that many needle keys
// (niah_train_task). Returns per language {"documents", "examples", "tokens", "exact", "sentences"}
// and the totals, the JSON written to dir/niah_train_data.json after corpus.json (the stage's done marker).
struct NiahTrainDataSpec {
  std::string corpus;  // source corpus
  std::string tokenizer;
  std::vector<std::string> langs, tasks;
  std::vector<int64_t> lengths;
  int64_t held_out_docs = 0;  // M of the source corpus
  int64_t seq_len = 0;
  int64_t docs_per_language = 0;
  uint64_t seed = 1;
  bool packed = false;
  int64_t first_index = 0;  // sample index of example 0 (curriculum stages draw disjoint samples)
  int value_digits_min = 7;  // values of [value_digits_min, 7] digits (train_data.value_digits_min; 7: OneRULER's)
  int keys = 0;  // needle keys of the multikey and none prompts (a stage's keys, 2-4); 0: the tasks' own (4)
};
// Whether `keys` is a usable needle-key count for training (0: the tasks' own; else 2-4: at least one distractor, at
// most OneRULER's 4).
constexpr bool niah_train_keys_valid(int keys) { return keys == 0 || (keys >= 2 && keys <= 4); }
// The task `name` as the training data builds it: OneRULER's spec, with `keys` needle keys for multikey and none when
// keys > 0 (input error for keys that are not niah_train_keys_valid, or an unknown name).
NiahTaskSpec niah_train_task(const std::string& name, int keys);
nlohmann::json niah_train_data_write(const std::string& dir, const NiahTrainDataSpec& spec,
                                     const std::function<void(const std::string&)>& log);

}  // namespace hlm
