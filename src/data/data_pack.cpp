// Packing and parallel corpus reading (see data_pack.h).
#include "data/data_pack.h"

#include <exception>
#include <limits>

#include "core/error.h"

namespace hlm {

void packed_append_piece(PackedBatch& out, std::span<const int32_t> piece, int16_t lang) {
  HLM_CHECK(!piece.empty(), "empty document piece");
  out.batch.ids.insert(out.batch.ids.end(), piece.begin(), piece.end());
  out.batch.cu_seqlens.push_back(out.batch.total_tokens());
  for (size_t t = 0; t + 1 < piece.size(); ++t) out.targets.push_back(piece[t + 1]);
  out.targets.push_back(kIgnoreTarget);
  out.language.insert(out.language.end(), piece.size(), lang);
}

void packed_drop_partial_row(PackedBatch& out, int64_t seq_len) {
  const int64_t keep = out.batch.total_tokens() / seq_len * seq_len;
  out.rows = keep / seq_len;
  out.batch.ids.resize(static_cast<size_t>(keep));
  out.targets.resize(static_cast<size_t>(keep));
  out.language.resize(static_cast<size_t>(keep));
  std::vector<int64_t>& cu = out.batch.cu_seqlens;
  while (cu.size() > 1 && cu.back() > keep) cu.pop_back();
  HLM_CHECK(cu.back() == keep, "a document piece crosses a row boundary");  // pieces never span two rows
}

void packed_join_rows(PackedBatch& out, int64_t seq_len) {
  const int64_t total = out.batch.total_tokens();
  HLM_CHECK(seq_len >= 1 && total % seq_len == 0, "packed_join_rows: ", total, " tokens are not whole rows of ",
            seq_len);
  std::vector<int64_t> rows{0};
  for (int64_t r = seq_len; r <= total; r += seq_len) rows.push_back(r);
  for (const int64_t end : out.batch.cu_seqlens)
    if (end % seq_len != 0) out.targets[static_cast<size_t>(end - 1)] = out.batch.ids[static_cast<size_t>(end)];
  out.batch.cu_seqlens = std::move(rows);
}

const char* data_packing_name(DataPacking packing) {
  return packing == DataPacking::Continuous ? "continuous" : "reset";
}

DataPacking data_packing_from_name(const std::string& name, const std::string& option) {
  if (name == "reset") return DataPacking::Reset;
  if (name == "continuous") return DataPacking::Continuous;
  throw_input_error(option, ": '", name, "' is not a packing (reset: sequences end at document boundaries; "
                    "continuous: one sequence per row, across documents)");
}

std::vector<CorpusDocuments> corpus_read_all(const Corpus& corpus) {
  const auto n = static_cast<int64_t>(corpus.languages().size());
  std::vector<CorpusDocuments> docs(static_cast<size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t l = 0; l < n; ++l) {
    try {
      docs[l] = corpus.read_documents(corpus.languages()[l].code);
    } catch (...) {
      errors[l] = std::current_exception();
    }
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return docs;
}

void data_config_check(const DataConfig& config, const Corpus& corpus) {
  HLM_CHECK_INPUT(config.seq_len >= 1, "data: seq_len must be >= 1, got ", config.seq_len);
  HLM_CHECK_INPUT(config.held_out_docs >= 0, "data: held_out_docs must be >= 0, got ", config.held_out_docs);
  HLM_CHECK_INPUT(config.eval_tokens_per_language >= 0, "data: eval_tokens_per_language must be >= 0, got ",
                  config.eval_tokens_per_language);
  HLM_CHECK_INPUT(config.token_budget >= 0, "data: token_budget must be >= 0, got ", config.token_budget);
  HLM_CHECK_INPUT(config.passes >= 1, "data: passes must be >= 1, got ", config.passes);
  HLM_CHECK_INPUT(corpus.languages().size() <= static_cast<size_t>(std::numeric_limits<int16_t>::max()),
                  "data: too many languages for int16 language ids: ", corpus.languages().size());
}

}  // namespace hlm
