// Held-out evaluation on the GPU: the device twin of eval_pass_sums (train/eval.h) over CudaModels. Used by
// CudaTrainDevice::evaluate_pass (validation and the final test of `pretrain|distill --device cuda`) and by
// `hybridlm eval --device cuda` (cuda_evaluate).
//
// One pass over a packed batch of N tokens: the student's forward_train (only its final hidden states [N, hidden] are
// kept; the per-layer streams go back to the allocator at once), lm_head_cross_entropy_cuda against the targets
// (no token weights, no gradient); with a teacher, its forward, its CE, and lm_head_forward_kl_cuda at τ = 1 (no
// gradient). The per-token values ([N] floats each) come back to the host and are added by eval_sums_add in token
// order into fp64, as the CPU pass does, so the two differ only by the per-token values.
// Numerics: the CUDA forward (≤ ~5e-6 relative to the CPU's hidden states on the goldens) and the CUDA LM-head losses
// (fp32 logits, fp64 after them, docs/cuda.md); expect per-language CE within ~1e-6 relative of the CPU's and KL
// within ~1e-5 (a small difference of two nearly equal distributions). Deterministic run to run. A model in bf16
// compute mode (CudaModel::set_bf16_compute, `--device cuda` training with bf16) runs its layers' and its LM head's
// products in bf16 as in training (CudaModel::lm_head_for); the bounds above are for fp32.
// Memory: one model's forward_train trace at a time (2·L + 2 tensors of [N, hidden]), then both final hidden
// states, the LM-head workspace ([row_block, vocab_chunk] tiles, two for the KL) and [N] per-token values.
// Bad input: a token id outside the vocabulary is the forward's input error; a target ≥ V is an input error too
// (checked on the host before anything runs), as on the CPU.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "models/cuda/cuda_model.h"
#include "train/eval.h"

namespace hlm {

struct HeldOutSet;
struct PackedBatch;

// Adds `batch`'s values into `sums` (EvalPass contract, train/eval.h): student CE, and with `teacher` (nullptr:
// none) the teacher's CE and KL(teacher ‖ student) at τ = 1. Neither model changes.
void cuda_eval_pass(CudaContext& ctx, CudaModel& model, CudaModel* teacher, const PackedBatch& batch, EvalSums& sums);

// evaluate() (train/eval.h) on GPU 0: uploads `model` (and `teacher` when not null) once, then evaluate_with over
// cuda_eval_pass. An input error when no usable GPU is present or the vocabularies differ.
EvalResult cuda_evaluate(const Model& model, const Model* teacher, const HeldOutSet& set, int64_t rows_per_pass);

}  // namespace hlm
