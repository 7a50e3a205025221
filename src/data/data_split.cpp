// Splits and shuffles (see data_split.h); counter-based, so they depend only on (seed, language, document count).
#include "data/data_split.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/rng.h"
#include "data/data_stream.h"

namespace hlm {

std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, uint64_t stream) {
  std::vector<std::pair<uint64_t, int64_t>> keyed(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const auto w = philox4x32(seed, stream, static_cast<uint64_t>(i));
    keyed[i] = {(uint64_t{w[0]} << 32) | w[1], i};
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = keyed[i].second;
  return order;
}

DocumentSplit split_documents(const std::string& code, int64_t documents, int64_t held_out_docs) {
  HLM_CHECK_INPUT(held_out_docs >= 0, "held-out documents per language must be >= 0, got ", held_out_docs);
  const std::vector<int64_t> order = shuffled_indices(documents, kSplitSeed, rng_stream_id(("split/" + code).c_str()));
  const int64_t n_valid = std::min(held_out_docs, documents);
  const int64_t n_test = std::min(held_out_docs, documents - n_valid);
  DocumentSplit split;
  split.valid.assign(order.begin(), order.begin() + n_valid);
  split.test.assign(order.begin() + n_valid, order.begin() + n_valid + n_test);
  split.train.assign(order.begin() + n_valid + n_test, order.end());
  return split;
}

std::vector<int64_t> training_order(const std::string& code, const DocumentSplit& split, uint64_t data_seed) {
  const auto n = static_cast<int64_t>(split.train.size());
  const std::vector<int64_t> perm = shuffled_indices(n, data_seed, rng_stream_id(("train-order/" + code).c_str()));
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = split.train[perm[i]];
  return order;
}

std::vector<int64_t> pass_order(const std::string& code, int64_t n, uint64_t data_seed, int64_t pass) {
  HLM_CHECK(pass >= 1, "pass_order: pass ", pass, " is not >= 1 (pass 0 is training_order itself)");
  const std::string stream = "train-order/" + code + "/pass-" + std::to_string(pass);
  return shuffled_indices(n, data_seed, rng_stream_id(stream.c_str()));
}

}  // namespace hlm
