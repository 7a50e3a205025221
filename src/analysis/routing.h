// MoE routing divergence between languages (the seed's App. G; evals.md §3.3, after Bandarkar et al.'s
// routing_analysis code): for each routed-expert layer, how differently a parallel sentence in another language is
// routed than its English original.
//   Per sentence and MoE layer, the expert distribution P [E] is the mean over the sentence's kept tokens of
//     topk    (default): each token's routing weights as the model applies them (the top-k softmax probabilities,
//                        renormalised over the k when the config's norm_topk_prob says so; zero elsewhere), or
//     softmax: each token's full router softmax (the reference code's older mode).
//   JSD(P, Q) = ½ KL(P ‖ M) + ½ KL(Q ‖ M), M = (P + Q) / 2 clamped below at 1e-10, natural log, 0·log 0 = 0.
//   Entropy-normalised JSD = JSD / max(ln E − ½ (H(P) + H(Q)), 1e-6), H(P) = −Σ p ln(p + 1e-10).
// Reported per layer and language: the mean over the parallel pairs (anchor sentence vs the language's sentence).
// Pairs where either sentence has no kept token are skipped and counted.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "data/parallel_set.h"
#include "data/tokenizer.h"
#include "models/model.h"

namespace hlm {

enum class RoutingPool { TopK, Softmax };

double js_divergence(std::span<const double> p, std::span<const double> q);
double entropy_normalised_jsd(std::span<const double> p, std::span<const double> q);

// The mean over `rows` of the per-token expert weights (see RoutingPool) from router softmax rows probs [T, E].
std::vector<double> pooled_routing(const float* probs, const std::vector<int64_t>& rows, const MoeDims& dims,
                                   RoutingPool pool);

struct RoutingSettings {
  std::string anchor = "eng_Latn";
  std::vector<std::string> langs;  // compared with the anchor
  RoutingPool pool = RoutingPool::TopK;
  int64_t max_pairs = 0;           // per language, first pairs in file order; 0 = all
  bool keep_special = false;
};

struct RoutingResult {
  RoutingSettings settings;
  std::vector<int> layers;                      // the MoE layers, in order
  int64_t experts = 0;
  std::vector<std::vector<double>> jsd, jsd_normalised;  // [layer idx][lang]: mean over pairs
  std::vector<int64_t> pairs, skipped_pairs;    // [lang]
  int64_t units = 0;                            // forward passes (one per unit: anchor + its languages)
};

// Input errors: a model without MoE layers, a language absent from the set, no usable pair for a language.
RoutingResult routing_divergence(Model& model, const Tokenizer& tokenizer, const ParallelSet& set,
                                 const RoutingSettings& settings,
                                 const std::function<void(const std::string&)>& progress = {});

// routing.csv (layer,lang,jsd,jsd_normalised,pairs; lang "mean" = average over languages), settings.json and
// routing_jsd.svg / routing_jsd_normalised.svg (one line per language over the MoE layers) into dir (created).
void routing_write_outputs(const std::filesystem::path& dir, const RoutingResult& result, const ModelConfig& config,
                           const std::vector<std::pair<std::string, std::string>>& meta);

}  // namespace hlm
