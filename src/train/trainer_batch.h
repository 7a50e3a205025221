// The math of one training batch, shared by the trainer and the evaluator:
// - packed_batch_rows: a row range of a PackedBatch as its own PackedBatch (micro-batches, eval passes);
// - forward_final_hidden: the final-norm output [T, hidden] without a backward trace (frozen teacher, evaluation);
// - train_batch_gradient: forward, loss and backward over the batch's micro-batches, accumulating the full-batch
//   mean gradient into `grads` (see trainer.h for the loss weights).
#pragma once
#include <cstdint>
#include <vector>

#include "data/data_stream.h"
#include "models/model.h"
#include "models/model_train.h"
#include "train/lm_head_loss.h"

namespace hlm {

// Rows [row_begin, row_end) of `batch` (rows of seq_len = total_tokens / rows tokens each). Every row start must be
// a sequence boundary of batch.batch.cu_seqlens (the packer keeps rows separate); an internal error otherwise.
PackedBatch packed_batch_rows(const PackedBatch& batch, int64_t row_begin, int64_t row_end);

// Final hidden states [T, hidden] (input of the LM head) of one forward pass; keeps nothing else.
Tensor forward_final_hidden(Model& model, const TokenBatch& batch);

// The model's LM head in lm_head_loss.h's form.
LmHead<float> lm_head_of(const Model& model);

struct BatchLoss {
  double loss = 0.0;                          // the objective: mean CE, or τ²·mean KL over the batch
  std::vector<double> sum_by_language;        // Σ per-token values (CE, or KL without τ²) per corpus language
  std::vector<int64_t> count_by_language;     // tokens counted per corpus language
  int64_t counted = 0;                        // tokens with a loss term (CE: with a target; KL: all)
  size_t kept_bytes = 0;                      // largest activation memory kept by one micro-batch's trace
};

// grads += ∇ loss over all rows of `batch`, processed `micro_rows` rows at a time. teacher == nullptr: CE against
// batch.targets (pretrain); else forward KL at temperature tau to the teacher (distill). `num_languages` sizes the
// per-language sums (language ids index the corpus languages). The caller zeroes grads.
// recompute: per-layer activation recomputation (Layer) or kept activations (None); the gradients are the same.
// weight_count > 0: the tokens with a loss term in the WHOLE batch that `batch` is a share of (data parallel: each
// rank passes its rows and the global count, so the ranks' gradients and losses add up to the whole batch's mean);
// 0: `batch` is the whole batch. BatchLoss::counted stays the count within `batch`.
BatchLoss train_batch_gradient(Model& student, Model* teacher, const PackedBatch& batch, int64_t micro_rows,
                               double tau, DecoderWeights& grads, size_t num_languages,
                               Recompute recompute = Recompute::Layer, int64_t weight_count = 0);

}  // namespace hlm
