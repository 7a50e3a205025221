// From a corpus to training batches and held-out sets (seed App. C.1):
// - splits: each language's documents are put in a canonical order by a FIXED permutation (seed kSplitSeed, never the
//   data seed); the first M are validation, the next M test, the rest training. M = held_out_docs (seed: 1000).
// - mixture: token quotas per language from tier shares (English anchor share, then High:Mid:Low per-language shares
//   in a ratio; seed: 30% and 3.5:2:1) over a token budget; the training documents of each language are reshuffled
//   by the data seed and consumed in order; languages are interleaved by a data-seeded draw proportional to their
//   remaining quota.
// - passes: with passes > 1, a stream that runs out (every language used up: out of documents, or at its quota)
//   starts over: pass p (0-based) consumes each language's training documents again in a new order, a permutation
//   keyed by the data seed, the language and p (pass_order, data_split.h); pass 0 is the order above, so passes = 1
//   is the single-pass stream. Quotas count over the whole run, so a language at its quota stays out of later
//   passes. Only training documents are ever drawn: held-out documents never enter any pass.
// - packing: tokens of consecutive documents fill rows of exactly seq_len tokens; a document that does not fit
//   continues in the next row; document boundaries inside a row are kept as sequence boundaries (cu_seqlens), so
//   attention, GDN state and conv reset per document. Targets: the next token of the same document; the last token of
//   a document piece has target −100 (ignored). That is packing "reset" (the default). Packing "continuous" (as
//   HF-style packing: concatenated documents, one sequence per row) makes each row one sequence: attention, state and
//   positions run across the documents of a row, and a document's last token in a row gets the next document's first
//   token as its target; only the last token of a row has no target. Rows hold the same tokens in both modes, and
//   held-out rows are packed with the same mode as training rows.
// Everything is deterministic given (corpus, tokenizer, config, data seed) and independent of thread count.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/tokenizer.h"
#include "layers/token_batch.h"

namespace hlm {

// Key of the split permutation (data_split.h): fixed for good, so every run and data seed sees the same held-out sets.
inline constexpr uint64_t kSplitSeed = 0xC1'5EED'0000'0001ull;
inline constexpr int32_t kIgnoreTarget = -100;  // target of a document piece's last token

enum class DataPacking { Reset, Continuous };
const char* data_packing_name(DataPacking packing);  // "reset" / "continuous"
// "reset" / "continuous"; input error naming `option` otherwise.
DataPacking data_packing_from_name(const std::string& name, const std::string& option);

struct DataConfig {
  int64_t seq_len = 1024;          // tokens per packed row
  int64_t held_out_docs = 1000;    // M: validation and test documents per language
  double anchor_share = 0.30;      // share of the budget for tier "anchor" languages (together)
  double tier_ratio[3] = {3.5, 2.0, 1.0};  // per-language shares of high : mid : low
  int64_t token_budget = 0;        // training tokens the quotas are computed for (0: no quotas, natural sizes)
  uint64_t data_seed = 0;
  int64_t eval_tokens_per_language = 16 * 1024;  // validation tokens per language (test: 2×), packed as training
  DataPacking packing = DataPacking::Reset;       // sequence boundaries inside a row (see above)
  int64_t passes = 1;              // times the stream may go through the training documents (>= 1; see above)
};

// A packed batch: `batch` holds rows × seq_len tokens split at document boundaries.
struct PackedBatch {
  TokenBatch batch;
  std::vector<int32_t> targets;    // [T] next-token targets, −100 = none
  std::vector<int16_t> language;   // [T] index into the corpus languages
  int64_t rows = 0;
};

// Where a training stream stands: enough to resume bit-identically (saved in checkpoints as JSON).
struct StreamCursor {
  std::map<std::string, int64_t> next_document;  // per language: index into its shuffled training documents
  std::map<std::string, int64_t> tokens_taken;   // per language, for quotas
  std::vector<int32_t> carry_tokens;             // unfinished document piece carried into the next row
  int32_t carry_language = -1;
  uint64_t draws = 0;                            // language draws made so far (counter-based RNG index)
  int64_t pass = 0;                              // 0-based pass the stream is in (next_document counts within it)
  bool exhausted = false;
};

// Reads every language's documents once at construction (in parallel; the result does not depend on thread count)
// and keeps the training texts; documents are tokenized when drawn. `tokenizer` must outlive the stream.
// Quotas: a drawn document is taken whole, so a language may exceed its quota by less than one document; a language
// stops being drawn once its tokens_taken reach the quota or its documents run out. With token_budget 0, languages
// are drawn in proportion to their remaining text bytes, and every training document is used once.
// A final partial row (stream used up in the middle of a row) is dropped.
class TrainStream {
 public:
  TrainStream(const Corpus& corpus, const Tokenizer& tokenizer, const DataConfig& config);
  ~TrainStream();
  TrainStream(TrainStream&&) noexcept;
  TrainStream& operator=(TrainStream&&) noexcept;
  // The next `rows` packed rows; fewer (possibly 0) when every quota / document is used up.
  PackedBatch next(int64_t rows);
  const StreamCursor& cursor() const;
  void restore(const StreamCursor& cursor);  // input error when it does not fit this corpus
  // Per-language quota in tokens (empty map when token_budget is 0).
  const std::map<std::string, int64_t>& quotas() const;
  // The 0-based pass the stream is in (cursor().pass without building the cursor).
  int64_t pass() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Checkpoint form of a cursor: {"next_document": {code: n}, "tokens_taken": {code: n}, "carry_tokens": [...],
// "carry_language": i, "draws": n, "pass": p, "exhausted": b}. from_json: input error on a missing or mistyped
// field; "pass" may be missing (checkpoints written before passes existed: pass 0).
nlohmann::json stream_cursor_to_json(const StreamCursor& cursor);
StreamCursor stream_cursor_from_json(const nlohmann::json& j);

// Held-out rows of one split, per language: packed like training rows from the split's documents, up to
// eval_tokens_per_language (validation) or twice that (test), only full rows.
struct HeldOutSet {
  std::vector<std::string> languages;           // codes
  std::vector<PackedBatch> per_language;        // one PackedBatch per language (all its rows)
  std::vector<int64_t> documents;               // per language: the split's documents
  std::vector<int64_t> document_tokens;         // per language: their tokens read (up to the row limit)
};

enum class Split { Valid, Test };
HeldOutSet held_out_set(const Corpus& corpus, const Tokenizer& tokenizer, const DataConfig& config, Split split);
// Every language of `set` must have at least one full row with a next-token target (an evaluation needs one), else
// an input error naming the language and split, what its documents held, and the settings to change (--seq-len,
// --held-out-docs). Run it before training: an empty test split found after the last step loses the run.
void held_out_check(const HeldOutSet& set, Split split, const DataConfig& config);

}  // namespace hlm
