// Trains one (task, architecture) pair of the synthetic study from scratch on the CPU and evaluates it.
//   Training: steps × batch_size items; each item's difficulty d is uniform in [train_min, train_max], or with a
//     curriculum in [train_min, synth_train_difficulty_max(step)] (n swaps, or m bits for recall; state-based recall uses m = synth_state_based_recall_m(d)); the items of a step are packed
//     into one TokenBatch (positions restart per item, attention never crosses items). Loss = mean cross-entropy at
//     each item's last input position (target = its answer token) only: the final hidden rows of those positions are
//     gathered into [B, hidden], fed to the chunked LM-head loss, and its gradient scattered back into a zero
//     [T, hidden] d_final_hidden for model_backward. AdamW (β 0.9/0.999, eps 1e-8; no decay on norms, biases,
//     A_log), global-norm clip, linear warmup + cosine decay (train/lr_schedule.h) stepped s = 1..steps.
//   Evaluation: for every difficulty in eval_difficulties, eval_items fresh items (SynthSplit::Eval streams, never
//     the training streams) in batches of eval_batch; accuracy = argmax of the last position's logits == answer
//     token. For the pointer tasks also the accuracy on items whose queried pointer moved.
// Deterministic for a fixed config and thread count (weights and data from the counter-based RNG).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "evals/synth/synth_config.h"
#include "evals/synth/synth_models.h"
#include "train/train_device.h"

namespace hlm {

struct SynthDifficultyResult {
  int64_t difficulty = 0;      // n (or m for recall)
  int64_t m = 0;               // bit-array size of the items (0 for state tracking)
  int64_t items = 0;
  double accuracy = 0.0;
  int64_t moved_items = 0;     // pointer tasks only
  double moved_accuracy = 0.0; // NaN when no item moved or the task has no pointers
  bool in_training_range = false;
};

struct SynthPairResult {
  std::string task, arch;
  int64_t parameters = 0;
  int64_t steps = 0;
  int64_t train_tokens = 0;
  double train_seconds = 0.0;
  double tokens_per_second = 0.0;  // training tokens / training wall time
  double final_loss = 0.0;         // mean answer CE over the last min(steps, log_every) steps
  double eval_seconds = 0.0;
  std::vector<SynthDifficultyResult> eval;
};

nlohmann::ordered_json synth_pair_result_to_json(const SynthPairResult& result);
SynthPairResult synth_pair_result_from_json(const nlohmann::json& json, const std::string& source);

using SynthLog = std::function<void(const std::string& line)>;

// Where a pair trains and evaluates. Default (both factories empty): the CPU loop above. With make_trainer, each
// step is one TrainDevice::step (train/train_device.h) over a PackedBatch of one row holding the step's items as
// sequences, targets −100 except each item's last input position (its answer token): the device's CE weighs each
// counted target 1/count, so the loss and gradient are the CPU loop's mean answer CE; the host AdamW carries the
// groups' scheduled lr, the device holds weights and moments (sync_to_host before evaluation). The device reports
// no per-step accuracy (the progress line shows loss only). With make_forward, evaluation runs the function it
// returns for the trained host model (logits [N, V] of each sequence's last token, as Model::forward).
// bucket_tokens > 0 pads each device step's batch with short pad-token sequences (targets −100, so the loss and the
// gradient are those of the items alone, up to summation order) to a multiple of that many tokens (fewer distinct
// step shapes: the device's per-shape host work is then paid once per bucket).
struct SynthDevice {
  std::string name = "cpu";
  int64_t bucket_tokens = 0;
  std::function<std::unique_ptr<TrainDevice>()> make_trainer;
  std::function<std::function<Tensor(const TokenBatch&)>(const Model&)> make_forward;
};

// Pads a device batch with short sequences of the pad token (targets −100 and language 0: no loss and no gradient,
// and packed sequences never mix) to a multiple of `bucket` tokens (nothing for bucket ≤ 0 or a batch already at a
// multiple), so that the steps of a run repeat a few shapes: the device's per-shape host work (cuBLASLt's algorithm
// choice for each new row count) is then paid once per bucket instead of at most steps. Pieces of at most 64 tokens
// (no pad sequence longer than one chunk of the chunked GDN kernels, nor than the items at the Table 14 sizes).
void synth_pad_batch(PackedBatch& batch, int64_t bucket);

SynthPairResult synth_train_and_eval(const SynthConfig& config, SynthTask task, SynthArch arch, const SynthLog& log,
                                     const SynthDevice& device = {});

}  // namespace hlm
