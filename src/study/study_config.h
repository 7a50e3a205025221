// The settings of `hybridlm study` (docs/study.md): one JSON object, read over the compiled-in defaults (the demo
// study, `--print-default-config`), so a config file names only what it changes. Sections:
//   data / tokenizer / parallel    corpus directory, "bytes" or a tokenizer.json, parallel set for SoftCKA + locality
//   teacher   {dir | model_config, architecture, granite}  an existing dense qwen3/granite model directory, or an
//                                   HF-style config (an object or a path to a JSON file) that the pretrain stage trains
//                                   from scratch; architecture (qwen3 | granite) sets a model_config object's
//                                   model_type, granite {embedding_multiplier, attention_multiplier,
//                                   residual_multiplier, logits_scaling} its Granite scalars
//   pretrain / distill              TrainConfig keys (train/trainer_options.h), over the job's defaults (distill:
//                                   the seed's Table C.3); path keys and stop_after_steps are not allowed here
//   placements {names, full, full_fraction, convert_seed, neg_eigval}   names from models/placements.h or "i,j,k"
//   compare {exclude, exclude_mnw_Mymr}  languages left out of R, δ̄, the mean D_KL, the curves and Figure 6; Mon
//                                   (mnw_Mymr) is left out whenever the corpus has it, as the seed does, unless
//                                   exclude_mnw_Mymr is false
//   replicates {data_seeds, placements}  data seeds of the study (the first is distill.data_seed, every placement
//                                   runs with it) and the placements that also run with each of the others
//   analysis {anchor, langs, points, max_pairs, sigma_sample, locality_k, locality_max_units, device}
// Unknown keys, wrong types and bad values are input errors naming the key. Relative paths are taken relative to the
// current directory.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/trainer.h"

namespace hlm {

// Granite's four config scalars for a granite teacher that the study pretrains. Defaults: the values of IBM's
// Granite-4.0-micro config.json (hidden 2560, 40 layers, 40 / 8 heads of 64: the geometry the seed's Table C.3 gives
// for Granite-4.1-3B), the same muP-style set as the Granite 3.x dense configs (embedding 12, residual 0.22,
// attention 1/head_dim, logits_scaling = hidden / 256).
struct StudyGraniteMultipliers {
  double embedding_multiplier = 12.0;
  double attention_multiplier = 0.015625;  // 1/64 = 1/head_dim at Granite-4's head_dim 64 (the softmax scale)
  double residual_multiplier = 0.22;
  double logits_scaling = 10.0;            // logits are divided by it
};

struct StudyConfig {
  std::string data;                   // corpus directory (data/corpus.h)
  std::string tokenizer = "bytes";
  std::string parallel;               // parallel set; "" skips the align and locality stages
  std::string teacher_dir;            // existing teacher model; "" = pretrain one from teacher_model
  nlohmann::json teacher_model;       // HF-style config object, or a string: path to a config JSON
  // The teacher's model_type: "qwen3" or "granite". With a model_config object it is that object's model_type (the
  // study writes it, with the Granite scalars of teacher_granite for granite); with teacher_dir or a config path it
  // is "" (the file's) or must match the file's.
  std::string teacher_architecture = "qwen3";
  StudyGraniteMultipliers teacher_granite;
  TrainConfig pretrain;               // job Pretrain; paths are filled in by the study
  TrainConfig distill;                // job Distill; the same settings for every student
  std::vector<std::string> placements;  // table names or custom lists "i,j,k"; must include standard_periodic
  int full = 0;                       // F; 0 = round(full_fraction · L)
  double full_fraction = 0.25;
  uint64_t convert_seed = 0;
  bool neg_eigval = false;
  std::vector<std::string> exclude;   // languages left out of R, δ̄ and Figure 6
  bool exclude_mnw_Mymr = true;       // also leave out kSeedExcludedLanguage when the corpus has it
  std::vector<uint64_t> data_seeds;   // empty: {distill.data_seed}; else data_seeds[0] == distill.data_seed
  std::vector<std::string> replicate; // placements (entries of `placements`) run with every data seed
  std::string anchor = "eng_Latn";
  std::vector<std::string> align_langs;   // empty: every language of the parallel set but the anchor
  std::vector<std::string> align_points = {"attn_in", "attn_out"};
  int64_t max_pairs = 64;
  int64_t sigma_sample = 2048;
  std::vector<int64_t> locality_k = {1, 4, 16, 64};
  int64_t locality_max_units = 32;
  std::string analysis_device = "cpu";  // "cpu", or "cuda": the align stage's model forward and SoftCKA sums on GPU 0
};

inline constexpr const char* kStudyBaseline = "standard_periodic";  // R = 1 and Figure 6's target
inline constexpr const char* kSeedExcludedLanguage = "mnw_Mymr";    // Mon: the seed leaves it out of its averages

StudyConfig study_config_defaults();  // the demo study
// `json` over the defaults; input errors (naming `source` and the key) for unknown keys and wrong types.
StudyConfig study_config_from_json(const nlohmann::json& json, const std::string& source);
nlohmann::json study_config_to_json(const StudyConfig& config);  // every key, resolved (format hybridlm-study)

// Checks values and inputs before any work: corpus and parallel set exist, teacher source, placements against the
// teacher's layer count (returned through study_resolve_students), trainer settings (train_config_validate).
void study_config_validate(const StudyConfig& config);

// The languages left out of every aggregate: compare.exclude, plus mnw_Mymr when the corpus has it and
// exclude_mnw_Mymr is set (reads the corpus's corpus.json).
std::set<std::string> study_excluded_languages(const StudyConfig& config);
// The study's data seeds: data_seeds, or {distill.data_seed} when it is empty.
std::vector<uint64_t> study_data_seeds(const StudyConfig& config);

// One student of the study: its label (placement name, or "custom_0-4-8") and full-attention layers.
struct StudyStudent {
  std::string label;
  std::string placement;  // the config entry
  std::vector<int> full_layers;
};
// Resolves the placements against the teacher's layer count (input errors: unknown name, bad list, duplicates,
// no standard_periodic). The baseline comes first.
std::vector<StudyStudent> study_resolve_students(const StudyConfig& config, int layers);
// The teacher's layer count, from teacher_dir/config.json or teacher_model.
int study_teacher_layers(const StudyConfig& config);

}  // namespace hlm
