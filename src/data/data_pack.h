// Helpers shared by the training stream and the held-out sets: packing document pieces into rows of a PackedBatch,
// and reading every language of a corpus in parallel (per-language work, so the result is thread-count independent).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "data/corpus.h"
#include "data/data_stream.h"

namespace hlm {

// Appends `piece` as one sequence: target t = piece[t+1], kIgnoreTarget for the last token; language ids = lang.
void packed_append_piece(PackedBatch& out, std::span<const int32_t> piece, int16_t lang);

// Removes the tokens after the last full row of seq_len tokens (and the cu_seqlens entries inside them).
void packed_drop_partial_row(PackedBatch& out, int64_t seq_len);

// Packing "continuous" (data_stream.h): after packed_drop_partial_row, makes every row of seq_len tokens one
// sequence and gives each document piece's last token inside a row the next piece's first token as its target.
void packed_join_rows(PackedBatch& out, int64_t seq_len);

// Every language's documents, in corpus order (OpenMP over languages; the first error in language order is thrown).
std::vector<CorpusDocuments> corpus_read_all(const Corpus& corpus);

// Checks the fields of a DataConfig that every consumer needs (seq_len, held_out_docs, eval tokens, language count).
void data_config_check(const DataConfig& config, const Corpus& corpus);

}  // namespace hlm
