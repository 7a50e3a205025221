// Configuration of a synthetic expressivity sweep (`hybridlm synth --config synth.json`). One flat JSON object; the
// schema is ONE table (fields() in synth_config.cpp: key, type, meaning, reader, writer), which drives parsing,
// defaults, the resolved-config dump and the field list that `hybridlm synth --help` prints.
// Unknown keys, wrong types and out-of-range values are input errors naming the key (exit code 2).
// Defaults = Olmo Hybrid Table 14's small models (4 layers, d_model 256, d_ff 1024, 4 heads of 64, max positions
// 1024 for recall, 4096 for the other tasks); training ranges and budgets are our choices [I] (evals.md §1.2).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "evals/synth/synth_task.h"

namespace hlm {

struct SynthConfig {
  std::vector<std::string> tasks{"state_tracking", "recall", "state_based_recall"};
  std::vector<std::string> architectures{"transformer", "gdn_neg", "gdn_pos", "hybrid_neg", "hybrid_pos"};
  // Model (shared by the five architectures; only the layer kinds and β's range differ).
  int64_t num_layers = 4;
  int64_t hidden_size = 256;
  int64_t intermediate_size = 1024;
  int64_t num_heads = 4;
  int64_t head_dim = 64;
  int64_t gdn_value_head_dim = 64;
  std::vector<std::string> hybrid_layer_types;  // empty: every 4th layer full attention, the last one if < 4 layers
  int64_t max_positions_recall = 1024;
  int64_t max_positions_other = 4096;
  int64_t max_address = 1024;  // address tokens 0..max_address−1 (fixes the vocabulary: 11 + max_address)
  // Data.
  int64_t train_min = 2, train_max = 32;       // training difficulties, uniform per item (n, or m for recall)
  std::vector<int64_t> eval_difficulties{4, 8, 16, 32, 64, 128};
  int64_t state_based_recall_m = 0;            // 0: m = max(n, V) (the main sweep's m = n); else a fixed m
  bool no_undo = false;                        // forbid a swap repeating the previous swap's pair
  int64_t variables = 5;                       // pointer variables V (2..5); 2 makes state tracking parity
  bool swap_delimiter = false;                 // OPS before every swap pair (synth_task.h's encoding note)
  SynthGenOptions gen_options() const { return {no_undo, static_cast<int>(variables), swap_delimiter}; }
  // Curriculum: over the first `curriculum` share of the steps the largest training difficulty grows linearly from
  // train_min to train_max (step s draws uniformly from [train_min, d_max(s)]); 0 = off (uniform over the whole range
  // from the first step). See synth_train_difficulty_max().
  double curriculum = 0.0;
  // Training.
  int64_t steps = 2000;
  int64_t batch_size = 64;   // items per step
  double lr = 1e-3;
  double min_lr = 1e-5;
  double warmup_fraction = 0.05;
  double weight_decay = 0.0;
  double clip = 1.0;
  uint64_t seed = 0;
  // Evaluation.
  int64_t eval_items = 1000;  // fresh held-out items per difficulty
  int64_t eval_batch = 64;
  int64_t log_every = 50;     // progress line every this many steps
};

// Parses and validates (input errors name the key and `source`).
SynthConfig synth_config_parse(const nlohmann::json& json, const std::string& source);
SynthConfig synth_config_load(const std::string& path);
// Every field, defaults filled in (the resolved config written beside the outputs).
nlohmann::ordered_json synth_config_to_json(const SynthConfig& config);
// The field table as text: "key  type  default  meaning" lines (for --help and docs).
std::string synth_config_fields_text();

// The hybrid layer_types the config implies for `num_layers` layers.
std::vector<std::string> synth_hybrid_layer_types(const SynthConfig& config);
// The array size m of a state-based-recall item with n swaps (state_based_recall_m, or max(n, variables)).
int64_t synth_state_based_recall_m(const SynthConfig& config, int64_t n);
// The largest training difficulty at step s (1-based) under the curriculum: train_min + ⌈(train_max − train_min) ·
// s / ⌈curriculum · steps⌉⌉, capped at train_max; train_max when the curriculum is off or over.
int64_t synth_train_difficulty_max(const SynthConfig& config, int64_t step);
// Input length of the longest item (training or evaluation) the config asks for, for `task`.
int64_t synth_max_sequence_length(const SynthConfig& config, SynthTask task);

}  // namespace hlm
