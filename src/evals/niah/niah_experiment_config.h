// Settings of the trained retrieval experiment (`hybridlm niah experiment --config cfg.json --out DIR`, issue #21
// item 4; docs/niah.md "Trained retrieval experiment"). One JSON object read over compiled-in defaults (a tiny CPU
// run), so a config names only what it changes. Sections:
//   corpus, tokenizer, langs, held_out_docs   the source corpus; langs default to every corpus language with a
//                        template; held_out_docs is M of the fixed split (data/data_split.h): evaluation haystacks
//                        come from the validation/test documents [0, 2M), training haystacks from the rest
//   device               "cpu" or "cuda" (training steps and evaluation; `--device` replaces it)
//   architectures        "full_attention", "gdn" (every layer Gated DeltaNet) and placement names
//                        (models/placements.h: standard_periodic, reverse_periodic, ...); the first must be
//                        full_attention, the baseline of the deficits
//   model                HF-style fields shared by every architecture (model_type qwen3_hybrid, layer_types and
//                        vocab_size are filled in; vocab_size defaults to the tokenizer's)
//   full, full_fraction  full-attention layers F of the placement hybrids (0: round(full_fraction · L))
//   train_data {tasks, lengths, seed, docs_margin, packed, stages, value_digits_min}   the NIAH-format training
//                        examples (value_digits_min n < 7: each training value has a uniform [n, 7] digits, so
//                        short values bootstrap the copy; the evaluation always asks 7 digits; docs/niah.md, session
//                        17); haystack
//                        token targets and tasks in round robin; seed must differ from eval.seed. packed: several
//                        examples per training row, each its own sequence (niah_train_data.h). stages: a curriculum,
//                        [{lengths, tokens, tasks, keys}, ...] trained in order, each stage a pretrain run of its own
//                        (own data, own LR schedule and fresh AdamW moments) that starts from the previous stage's
//                        model; a stage's tasks (default: train_data.tasks) and keys (2-4: needle keys of its
//                        multikey and none prompts, fewer distractors than OneRULER's 4, to teach the key match
//                        first; the evaluation always asks OneRULER's); with stages, lengths and train.tokens are
//                        derived (the stages' lengths in order of first use, the sum of their tokens) and may only be
//                        given with those values
//   train                TrainConfig keys of `hybridlm pretrain` (train/trainer_options.h; "lr" sets both peak
//                        rates); path keys are owned by the experiment
//   eval {tasks, lengths, n, seed, max_new_tokens, stop, max_batch, max_memory, split, precision, prefill_chunk}
//                        precision: fp32 (default; the CPU's only one) or bf16 (device cuda only: the engine of
//                        `hybridlm generate --device cuda`, evals/niah/cuda/niah_cuda_backend.h); prefill_chunk:
//                        prompt tokens per prefill step over the batch (default 512)
// Unknown keys, wrong types and bad values are input errors naming the key.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/trainer.h"

namespace hlm {

inline constexpr const char* kNiahBaselineArch = "full_attention";
inline constexpr const char* kNiahGdnArch = "gdn";

// One stage of the training curriculum (train_data.stages).
struct NiahTrainStage {
  std::vector<int64_t> lengths;  // haystack token targets of this stage's examples
  int64_t tokens = 0;            // training tokens of this stage (its own pretrain run)
  std::vector<std::string> tasks;  // this stage's training tasks; empty: train_data.tasks
  int keys = 0;  // needle keys of this stage's multikey and none prompts (2-4); 0: OneRULER's 4 (NiahTrainDataSpec)
  bool operator==(const NiahTrainStage&) const = default;
};

struct NiahExperimentConfig {
  std::string corpus = "data/corpus/demo";
  std::string tokenizer = "bytes";
  std::vector<std::string> langs;  // empty: every corpus language with a template (resolved by validate)
  int64_t held_out_docs = 20;
  std::string device = "cpu";
  std::vector<std::string> architectures{"full_attention", "standard_periodic", "reverse_periodic", "gdn"};
  nlohmann::json model;  // shared HF-style fields
  int64_t full = 0;
  double full_fraction = 0.25;
  // Training examples.
  std::vector<std::string> train_tasks{"single", "multikey", "multivalue", "multiquery", "none"};
  std::vector<int64_t> train_lengths{64, 128, 256};
  uint64_t train_seed = 1;
  double docs_margin = 1.05;  // documents per language: margin × the language's token quota / seq_len, + held-out
  int train_value_digits_min = 7;  // train_data.value_digits_min: training values of [n, 7] digits (session 17)
  bool train_packed = false;  // train_data.packed: as many whole examples per row as fit, each its own sequence
  std::vector<NiahTrainStage> train_stages;  // train_data.stages; empty: one stage of train_lengths, train.tokens
  // Trainer (job pretrain).
  TrainConfig train;
  // train.loss: "answer" (CE only on the targets that predict an answer's tokens, niah_answer_targets; the mean is
  // over those) or "all" (pretrain's CE on every token of the row).
  std::string train_loss = "answer";
  // Evaluation.
  std::vector<std::string> eval_tasks{"single", "multikey", "multivalue", "multiquery", "none"};
  std::vector<int64_t> eval_lengths{128, 256, 512};
  int64_t eval_n = 4;
  uint64_t eval_seed = 0;
  int64_t max_new_tokens = 64;
  std::string stop = "</Answer>";
  int64_t max_batch = 8;
  std::string max_memory;  // "" = the run mode's default (half the host memory; 90 % of free device memory)
  std::string split = "both";
  std::string eval_precision = "fp32";  // fp32 or bf16 (device cuda only)
  int64_t prefill_chunk = 512;          // prompt tokens per prefill step (over the batch's prompts)
};

NiahExperimentConfig niah_experiment_defaults();
// `json` over the defaults; input errors naming `source` and the key.
NiahExperimentConfig niah_experiment_config_from_json(const nlohmann::json& json, const std::string& source);
// Every key, resolved (format hybridlm-niah-experiment); from_json(to_json(c)) == c.
nlohmann::json niah_experiment_config_to_json(const NiahExperimentConfig& config);
// Values and inputs: the corpus exists and has every language (langs resolved when empty), templates, tasks,
// lengths, architectures, the model fields, the trainer settings, seeds. Returns the config with langs filled in.
NiahExperimentConfig niah_experiment_resolve(const NiahExperimentConfig& config);

// The HF-style config.json object of one architecture: `model` + model_type qwen3_hybrid + layer_types
// (+ vocab_size when absent).
nlohmann::json niah_arch_model_config(const NiahExperimentConfig& config, const std::string& arch, int64_t vocab_size);
// "ARRR" style layout of an architecture (A full attention, R recurrent).
std::string niah_arch_layout(const NiahExperimentConfig& config, const std::string& arch);

// The curriculum's stages: train_stages, or (when empty) one stage of train_lengths and train.tokens.
std::vector<NiahTrainStage> niah_experiment_stages(const NiahExperimentConfig& config);

// The keys of every section, for --help.
std::string niah_experiment_fields_text();

}  // namespace hlm
