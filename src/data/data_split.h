// Document order and splits (seed App. C.1 "Held-out sets and replicate runs"). A language's documents (its
// non-empty documents in file order, indices 0..n-1) get a canonical order from a permutation keyed by kSplitSeed
// and the language code, never by the data seed: positions [0, M) are validation, [M, 2M) test, the rest training
// (M = held_out_docs; a language with fewer than 2M documents fills validation first, then test, and has no or few
// training documents). The data seed then reshuffles the training documents only.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hlm {

// A random permutation of 0..n-1: index i sorted by the 64-bit Philox word at (seed, stream, i), ties by i.
std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, uint64_t stream);

struct DocumentSplit {
  std::vector<int64_t> valid, test, train;  // document indices; valid/test in canonical order, train too
};

DocumentSplit split_documents(const std::string& code, int64_t documents, int64_t held_out_docs);

// Training document indices in the order a run with `data_seed` consumes them.
std::vector<int64_t> training_order(const std::string& code, const DocumentSplit& split, uint64_t data_seed);

// Pass `pass` >= 1 of a multi-pass stream (data_stream.h): a permutation of positions 0..n-1 in the pass-0 order
// (training_order), keyed by the data seed, the language and the pass; a fresh shuffle per pass, not a repeat.
std::vector<int64_t> pass_order(const std::string& code, int64_t n, uint64_t data_seed, int64_t pass);

}  // namespace hlm
