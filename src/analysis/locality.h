// Attention locality per full-attention layer (the seed's §5: hybrids' few full-attention layers attend more
// locally). For every full-attention layer, language and window k: the share of attention probability on the k most
// recent tokens (the query's own token included), averaged over query heads and over every query position of every
// sentence of that language (ops/attention/attention_locality.h; queries with t + 1 ≤ k count as 1).
// q and k come from the layers' forward stash (post norm and RoPE, what the softmax reads). The forward keeps every
// layer's intermediates for the one sentence it runs, so memory grows with the sentence length, not the set size.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data/parallel_set.h"
#include "data/tokenizer.h"
#include "models/model.h"

namespace hlm {

struct LocalitySettings {
  std::vector<int64_t> windows = {1, 4, 16, 64};
  std::vector<std::string> langs;  // empty: every language of the set
  int64_t max_units = 0;           // first units of each language; 0 = all
};

struct LocalityResult {
  std::string model;                             // label (the model directory)
  std::vector<int> layers;                       // full-attention layer indices
  int64_t num_layers = 0;
  std::vector<std::string> langs;
  std::vector<int64_t> windows;
  std::vector<std::vector<std::vector<double>>> share;  // [layer idx][lang][window]
  std::vector<int64_t> sentences, queries;              // [lang]
};

LocalityResult attention_locality(Model& model, const std::string& label, const Tokenizer& tokenizer,
                                  const ParallelSet& set, const LocalitySettings& settings,
                                  const std::function<void(const std::string&)>& progress = {});

// locality.csv (model,layer,lang,k,share) with every model's rows, and one locality_k<k>.svg per window: share
// (mean over languages) against relative depth layer / layers, one series per model.
void locality_write_outputs(const std::filesystem::path& dir, const std::vector<LocalityResult>& results);

}  // namespace hlm
