// Held-out rows (seed App. C.1): per language, the split's documents in canonical order (no data seed), tokenized and
// packed exactly like training rows, up to eval_tokens_per_language (validation) or twice that (test), full rows only.
// Languages are processed in parallel; each one's rows depend only on its own documents.
#include <algorithm>
#include <exception>
#include <span>

#include "core/error.h"
#include "data/data_pack.h"
#include "data/data_split.h"
#include "data/data_stream.h"

namespace hlm {
namespace {

PackedBatch pack_documents(const std::vector<std::string>& texts, const std::vector<int64_t>& order,
                           const Tokenizer& tokenizer, int64_t seq_len, DataPacking packing, int64_t max_rows,
                           int16_t lang, int64_t* tokens_read) {
  PackedBatch out;
  const int64_t limit = max_rows * seq_len;
  for (int64_t d : order) {
    if (out.batch.total_tokens() >= limit) break;
    const std::vector<int32_t> ids = tokenizer.encode(texts[static_cast<size_t>(d)]);
    *tokens_read += static_cast<int64_t>(ids.size());
    for (size_t pos = 0; pos < ids.size() && out.batch.total_tokens() < limit;) {
      const int64_t room = seq_len - out.batch.total_tokens() % seq_len;
      const size_t take = std::min(static_cast<size_t>(room), ids.size() - pos);
      packed_append_piece(out, std::span<const int32_t>(ids.data() + pos, take), lang);
      pos += take;
    }
  }
  packed_drop_partial_row(out, seq_len);
  if (packing == DataPacking::Continuous) packed_join_rows(out, seq_len);
  return out;
}

}  // namespace

HeldOutSet held_out_set(const Corpus& corpus, const Tokenizer& tokenizer, const DataConfig& config, Split split) {
  data_config_check(config, corpus);
  const std::vector<CorpusDocuments> all = corpus_read_all(corpus);
  const int64_t tokens = config.eval_tokens_per_language * (split == Split::Test ? 2 : 1);
  const int64_t max_rows = tokens / config.seq_len;
  const auto n = static_cast<int64_t>(all.size());
  HeldOutSet set;
  set.per_language.resize(static_cast<size_t>(n));
  set.documents.resize(static_cast<size_t>(n));
  set.document_tokens.resize(static_cast<size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t l = 0; l < n; ++l) {
    try {
      const std::string& code = corpus.languages()[static_cast<size_t>(l)].code;
      const DocumentSplit s =
          split_documents(code, static_cast<int64_t>(all[l].texts.size()), config.held_out_docs);
      const std::vector<int64_t>& docs = split == Split::Test ? s.test : s.valid;
      set.documents[l] = static_cast<int64_t>(docs.size());
      set.per_language[l] = pack_documents(all[l].texts, docs, tokenizer, config.seq_len, config.packing, max_rows,
                                           static_cast<int16_t>(l), &set.document_tokens[l]);
    } catch (...) {
      errors[l] = std::current_exception();
    }
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  for (const CorpusLanguage& lang : corpus.languages()) set.languages.push_back(lang.code);
  return set;
}

void held_out_check(const HeldOutSet& set, Split split, const DataConfig& config) {
  const char* name = split == Split::Test ? "test" : "validation";
  for (size_t l = 0; l < set.languages.size(); ++l) {
    const PackedBatch& rows = set.per_language[l];
    const bool has_target = std::any_of(rows.targets.begin(), rows.targets.end(), [](int32_t t) { return t >= 0; });
    if (rows.rows > 0 && has_target) continue;
    const int64_t docs = l < set.documents.size() ? set.documents[l] : 0;
    const int64_t tokens = l < set.document_tokens.size() ? set.document_tokens[l] : 0;
    throw_input_error(
        "the ", name, " split of ", set.languages[l], " has no full row of --seq-len ", config.seq_len,
        " tokens to evaluate: its ", docs, " held-out document(s) (--held-out-docs ", config.held_out_docs,
        ") hold ", tokens, " token(s)",
        docs == 0 ? " (the language has too few documents for this split)" : "",
        "; use a larger --held-out-docs or a smaller --seq-len");
  }
}

}  // namespace hlm
