// The full-attention token mixer (HF `self_attn`): q/k/v projections, optional RMSNorm of q and k — per head over
// head_dim when the norm weight has D entries (Qwen3), over the whole projection when it has H·D (OLMo 2 / OLMo-Hybrid)
// — then RoPE (skipped when `rope` is null), causal GQA softmax attention, o_proj.
// Input x [T, hidden] is the already-normalised residual stream; output [T, hidden] is the block's delta.
#pragma once
#include "core/arena.h"
#include "layers/linear.h"
#include "layers/token_batch.h"
#include "ops/rope/rope.h"

namespace hlm {

struct AttentionWeights {
  Linear q_proj;   // [Hq·D, hidden]
  Linear k_proj;   // [Hkv·D, hidden]
  Linear v_proj;   // [Hkv·D, hidden]
  Linear o_proj;   // [hidden, Hq·D]
  Tensor q_norm;   // [D] (per head), [Hq·D] (whole projection) or undefined (no q/k norm)
  Tensor k_norm;   // [D], [Hkv·D] or undefined
};

struct AttentionDims {
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 0.0f;     // softmax scale
  float norm_eps = 1e-6f; // for q_norm/k_norm
};

// `positions` [T] from batch.positions().
void attention_layer_forward(float* out, const float* x, const AttentionWeights& w, const AttentionDims& dims,
                             const RopeTable* rope, const TokenBatch& batch, const int32_t* positions, Arena& arena);

}  // namespace hlm
