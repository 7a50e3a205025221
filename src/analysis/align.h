// Cross-lingual alignment per layer (the seed's §5, App. D/E): SoftCKA (analysis/softcka.h) between the anchor
// language (English) and each other language of a parallel set, per layer and capture point, on the model's own
// forward pass. Each English–X pair contributes h11, h22, h12 from the token states of its two sentences; the sums
// run over the pairs of X before normalising (Eq. 1). The anchor's h11 of a unit is computed once and shared by all
// languages of that unit (same σ).
//
// Bandwidth: one σ per (point, layer), shared by all pairs and languages: a given value, or the median heuristic
// σ = sqrt(median ‖x_i − x_j‖²) over distinct pairs of a token sample pooled from the first units (anchor and every
// language, kept tokens only; up to sigma_sample_tokens tokens).
//
// Pairs whose anchor or other sentence has no kept token are skipped and counted. Work: one forward per unit with
// the anchor and all its languages packed; the h11 / h22 / h12 of the unit's (point, layer) cells go to a kernel-norm
// engine (analysis/softcka_batch.h) in batches: the CPU engine (OpenMP over jobs) unless another is given, e.g. the
// CUDA one. The forward that produces the states is the CPU's Model::forward unless a StatesForward is given
// (analysis/sentence_states.h), e.g. the GPU's (analysis/cuda/cuda_states_forward.h); `--device cuda` uses both.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "analysis/sentence_states.h"
#include "analysis/softcka.h"
#include "analysis/softcka_batch.h"
#include "data/parallel_set.h"
#include "data/tokenizer.h"
#include "layers/capture.h"
#include "models/model.h"

namespace hlm {

struct AlignSettings {
  std::string anchor = "eng_Latn";
  std::vector<std::string> langs;     // compared with the anchor
  std::vector<CapturePoint> points;   // per-layer points
  CkaKernel kernel = CkaKernel::Rbf;
  std::optional<double> sigma;        // RBF bandwidth; nullopt = median heuristic per (point, layer)
  int64_t max_pairs = 0;              // per language, first pairs in file order; 0 = all
  bool keep_special = false;
  int64_t sigma_sample_tokens = 2048;
};

struct AlignResult {
  AlignSettings settings;
  int64_t layers = 0;
  std::vector<std::vector<double>> sigma;                     // [point][layer]; 0 for the linear kernel
  std::vector<std::vector<std::vector<SoftCkaTerms>>> terms;  // [point][layer][lang]
  std::vector<int64_t> pairs, skipped_pairs;                  // [lang]
  std::vector<int64_t> anchor_tokens, lang_tokens;            // [lang] kept tokens over the used pairs
  int64_t units = 0;                                          // units run through the model
  int64_t sigma_sample = 0;                                   // tokens in the median sample (0: σ given / linear)
  std::string device;                                         // the kernel-norm engine that ran: "cpu", "cuda"
  std::string forward_device = "cpu";                         // where the model forward ran (the caller's word)

  double softcka(size_t point, int layer, size_t lang) const;
  double mean_softcka(size_t point, int layer) const;  // mean over the languages with a defined score
};

using AlignProgress = std::function<void(const std::string& line)>;

// engine nullptr: the CPU engine; forward empty: Model::forward on the CPU (then forward_device says "cpu").
AlignResult align_softcka(Model& model, const Tokenizer& tokenizer, const ParallelSet& set,
                          const AlignSettings& settings, const AlignProgress& progress = {},
                          KernelNormEngine* engine = nullptr, const StatesForward& forward = {},
                          const std::string& forward_device = "cpu");

// Writes softcka.csv (layer,point,lang,softcka; lang "mean" = average over languages), settings.json and one
// softcka_<point>.svg per point (full-attention layers of a hybrid model as dotted lines) into dir (created).
// `meta` (model, tokenizer, parallel set paths) is copied into settings.json.
void align_write_outputs(const std::filesystem::path& dir, const AlignResult& result, const ModelConfig& config,
                         const std::vector<std::pair<std::string, std::string>>& meta);

}  // namespace hlm
