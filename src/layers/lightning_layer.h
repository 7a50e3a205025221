// Lightning Attention-2 token mixer of the bailing hybrid-linear models (Ring-mini-linear-2.0's
// BailingMoeV2LinearAttention; ../shared/docs/families.md §6): CPU forward over packed sequences, optionally
// continuing from and returning a per-sequence state.
//   [q | k | v] = x · query_key_valueᵀ              each [T, Hq, D] (MHA: Hq heads for k and v too)
//   q = rope(rmsnorm(q) · q_norm), k = rope(rmsnorm(k) · k_norm)   per head over D; partial RoPE (the model's table)
//   o = simple GLA(q, k, v, g)                        ops/simple_gla: S_t = exp(g_h)·S_{t−1} + k_tᵀ v_t,
//                                                     o_t = D^−1/2 · q_t S_t (chunked form; state fp32)
//   o = group_rmsnorm(o) · g_norm                     RMS over each of group_norm_size groups of Hq·D / G channels
//   out = dense( o ⊙ sigmoid(x · g_projᵀ) )           norm first, then the sigmoid gate
// g_h is the layer's fixed decay (ring_linear_decay(layer, L, Hq), cast to float as HF's fp32 buffer).
// Non-goals: biases (use_bias refused by the config), linear_silu, a backward (training refuses these models). The CUDA
// twin is layers/cuda/lightning_layer_cuda.h.
#pragma once
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "layers/linear.h"
#include "layers/token_batch.h"
#include "ops/rope/rope.h"

namespace hlm {

struct LightningDims {
  int64_t heads = 0;            // Hq
  int64_t head_dim = 0;         // D
  int64_t group_norm_size = 1;  // groups of the output norm
  float norm_eps = 1e-6f;       // q/k norms and the group norm (rms_norm_eps)
  std::vector<float> decay;     // g [Hq], log-decay per head
  int64_t inner() const { return heads * head_dim; }
  int64_t state_elements() const { return heads * head_dim * head_dim; }  // per sequence
};

struct LightningWeights {
  Linear qkv;     // attention.query_key_value: weight [3·Hq·D, hidden]
  Tensor q_norm;  // attention.query_layernorm.weight [D]
  Tensor k_norm;  // attention.key_layernorm.weight [D]
  Linear g_proj;  // attention.g_proj: weight [Hq·D, hidden]
  Tensor g_norm;  // attention.g_norm.weight [Hq·D]
  Linear dense;   // attention.dense: weight [hidden, Hq·D]
};

// The decay of global layer `layer` of `num_layers` for `heads` heads, as HF's fp32 slope buffer.
std::vector<float> lightning_decay(int64_t layer, int64_t num_layers, int64_t heads);

// out [T, hidden] (overwritten), x [T, hidden] (the block's normed input), positions [T] (RoPE; absolute positions
// when continuing a sequence). state_in / state_out: [N_seq, Hq, D, D] (nullptr = fresh / not wanted; may alias).
void lightning_layer_forward(float* out, const float* x, const LightningWeights& w, const LightningDims& d,
                             const RopeTable* rope, const int32_t* positions, const TokenBatch& batch,
                             const float* state_in, float* state_out, Arena& arena);

}  // namespace hlm
