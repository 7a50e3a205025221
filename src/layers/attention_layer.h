// The full-attention token mixer (HF `self_attn`): q/k/v projections, optional RMSNorm of q and k — per head over
// head_dim when the norm weight has D entries (Qwen3), over the whole projection when it has H·D (OLMo 2 / OLMo-Hybrid)
// — then RoPE (skipped when `rope` is null), causal GQA softmax attention (over the last dims.window keys when
// that is > 0), o_proj. CPU reference, forward and backward.
// Input x [T, hidden] is the already-normalised residual stream; output [T, hidden] is the block's delta.
//
// Dataflow (per token; projections may carry a bias):
//   q̃ = x Wqᵀ [Hq·D], k̃ = x Wkᵀ [Hkv·D], v = x Wvᵀ [Hkv·D]
//   q = rope(rmsnorm(q̃) · q_norm), k = rope(rmsnorm(k̃) · k_norm)     (each step optional)
//   o = causal GQA softmax attention(q, k, v, scale) [Hq·D];  out = o Woᵀ
//   with an output gate (Qwen3.5, gate_proj defined): g = x Wgᵀ [Hq·D];  out = (o ⊙ sigmoid(g)) Woᵀ
//   (ops/sigmoid_gate; the loader splits HF's per-head [q_h | gate_h] q_proj into q_proj and gate_proj)
//
// Backward: recomputes the forward (or reads it from the LayerStash its forward filled), then walks it in reverse with the op
// backwards (matmul, attention, rope, rmsnorm): dx is OVERWRITTEN, parameter gradients are ADDED into AttentionGrads
// (so a trainer can sum micro-batches). Results do not depend on the OpenMP thread count.
//
// Precision: fp32 storage; projections are OpenBLAS GEMMs; norms and softmax row sums accumulate in double. The
// templated *_ref entry points run the same code in double for gradient checks.
#pragma once
#include <array>
#include <cstddef>
#include <utility>

#include "core/arena.h"
#include "layers/layer_stash.h"
#include "layers/linear.h"
#include "layers/token_batch.h"
#include "ops/rope/rope.h"

namespace hlm {

struct AttentionWeights {
  Linear q_proj;   // [Hq·D, hidden] (+ bias [Hq·D])
  Linear k_proj;   // [Hkv·D, hidden] (+ bias [Hkv·D])
  Linear v_proj;   // [Hkv·D, hidden] (+ bias [Hkv·D])
  Linear o_proj;   // [hidden, Hq·D] (+ bias [hidden])
  Linear gate_proj;  // [Hq·D, hidden], no bias: output gate (Qwen3.5 gated attention), or undefined
  Tensor q_norm;   // [D] (per head), [Hq·D] (whole projection) or undefined (no q/k norm)
  Tensor k_norm;   // [D], [Hkv·D] or undefined
};

// Parameter gradients: the same fields and shapes as the AttentionWeights they belong to (a tensor undefined in the
// weights stays undefined here). The backward accumulates (+=) into them.
struct AttentionGrads : AttentionWeights {};

// Zero-filled gradients shaped like w.
AttentionGrads attention_grads_like(const AttentionWeights& w);

struct AttentionDims {
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 0.0f;     // softmax scale
  float norm_eps = 1e-6f; // for q_norm/k_norm
  int64_t window = 0;     // sliding window (HF sliding_attention layers: keys t−W+1 .. t); 0 = full causal
};

inline constexpr size_t kAttentionParamCount = 11;

// THE parameter table: HF name (under self_attn.) and tensor of every parameter slot of an AttentionWeights /
// AttentionGrads (const or not), in a fixed order; optional slots may hold undefined tensors.
template <class S>
auto attention_param_tensors(S& s) {
  using Ptr = decltype(&s.q_norm);
  return std::array<std::pair<const char*, Ptr>, kAttentionParamCount>{{
      {"q_proj.weight", &s.q_proj.weight}, {"q_proj.bias", &s.q_proj.bias},
      {"k_proj.weight", &s.k_proj.weight}, {"k_proj.bias", &s.k_proj.bias},
      {"v_proj.weight", &s.v_proj.weight}, {"v_proj.bias", &s.v_proj.bias},
      {"o_proj.weight", &s.o_proj.weight}, {"o_proj.bias", &s.o_proj.bias},
      {"q_norm.weight", &s.q_norm},        {"k_norm.weight", &s.k_norm},
      {"gate_proj.weight", &s.gate_proj.weight},
  }};
}

// Checks every weight's shape against dims (input error naming the tensor on a mismatch).
void attention_check_weights(const AttentionWeights& w, const AttentionDims& dims);

// `positions` [T] from batch.positions(). stash (optional, layers/layer_stash.h): keep q̃, k̃ (when normalised),
// q, k (after norm and rope), v, o and a copy of out in stash->arena, so the backward need not recompute them.
void attention_layer_forward(float* out, const float* x, const AttentionWeights& w, const AttentionDims& dims,
                             const RopeTable* rope, const TokenBatch& batch, const int32_t* positions, Arena& arena,
                             LayerStash* stash = nullptr);

// dx [T, hidden] (overwritten) and grads (+=) from d_out [T, hidden]; the other arguments as in the forward. grads
// must have the shapes of w (attention_grads_like). dx may not alias d_out or x. stash: the one the forward filled
// (nullptr: recompute the forward).
void attention_layer_backward(float* dx, AttentionGrads& grads, const float* d_out, const float* x,
                              const AttentionWeights& w, const AttentionDims& dims, const RopeTable* rope,
                              const TokenBatch& batch, const int32_t* positions, Arena& arena,
                              const LayerStash* stash = nullptr);

// q [T, Hq·D] and k [T, Hkv·D] as the softmax reads them (after q/k norm and RoPE), from a stash this layer's forward
// filled; valid while the stash's arena is. For analysis (attention locality, analysis/locality.h).
struct AttentionQk {
  const float* q;
  const float* k;
};
AttentionQk attention_stash_qk(const LayerStash& stash);

// q [T, Hq·D], k and v [T, Hkv·D] of `tokens` rows of x [T, hidden] as the softmax reads them: projected, q/k
// normalised and rotated at `positions` (absolute positions; any values the rope table accepts). Scratch from `arena`
// (valid until the caller releases it). For inference, where k and v go into a KV cache (infer/).
struct AttentionQkv {
  float* q;
  float* k;
  float* v;
};
AttentionQkv attention_layer_project(const float* x, const AttentionWeights& w, const AttentionDims& dims,
                                     const RopeTable* rope, int64_t tokens, int64_t hidden, const int32_t* positions,
                                     Arena& arena);

// out [tokens, hidden] = o_proj(o), after the output gate o ← o ⊙ sigmoid(x Wgᵀ) (in place on o) when w has one: the
// rest of the forward after the softmax attention, for inference (infer/) where o comes from a KV cache. x is the
// layer input the projections read. Scratch from `arena` (released).
void attention_layer_output(float* out, float* o, const float* x, const AttentionWeights& w, const AttentionDims& dims,
                            int64_t tokens, int64_t hidden, Arena& arena);

// ---- Templated reference on raw pointers (T = float or double): the float entry points above call these. ----

// Contiguous parameter pointers, P = const T* (weights) or T* (gradients); nullptr for an absent bias or norm.
// q_norm_size / k_norm_size: entries of the norm weight (D = per head, H·D = whole projection; 0 = none).
template <class P>
struct AttentionParamPtrs {
  P q_proj, q_bias, k_proj, k_bias, v_proj, v_bias, o_proj, o_bias, q_norm, k_norm, gate_proj;
  int64_t q_norm_size = 0, k_norm_size = 0;
};

// The same table as attention_param_tensors, for pointer sets (row by row; the f32 views check the names agree).
template <class P>
auto attention_param_ptr_fields(AttentionParamPtrs<P>& p) {
  return std::array<std::pair<const char*, P*>, kAttentionParamCount>{{
      {"q_proj.weight", &p.q_proj}, {"q_proj.bias", &p.q_bias}, {"k_proj.weight", &p.k_proj},
      {"k_proj.bias", &p.k_bias},   {"v_proj.weight", &p.v_proj}, {"v_proj.bias", &p.v_bias},
      {"o_proj.weight", &p.o_proj}, {"o_proj.bias", &p.o_bias}, {"q_norm.weight", &p.q_norm},
      {"k_norm.weight", &p.k_norm}, {"gate_proj.weight", &p.gate_proj},
  }};
}

// Pointer views of f32 weights / gradients (tensors must be contiguous f32).
AttentionParamPtrs<const float*> attention_param_ptrs(const AttentionWeights& w);
AttentionParamPtrs<float*> attention_param_ptrs(AttentionGrads& g);

// Packed token layout: T tokens of `hidden` features in N sequences (cu_seqlens [N+1]), positions [T] for RoPE.
struct AttentionBatchView {
  int64_t tokens = 0;
  int64_t hidden = 0;
  const int64_t* cu_seqlens = nullptr;
  int64_t n_seqs = 0;
  const int32_t* positions = nullptr;
};

template <typename T>
void attention_layer_forward_ref(T* out, const T* x, const AttentionParamPtrs<const T*>& w, const AttentionDims& dims,
                                 const RopeTable* rope, const AttentionBatchView& batch, Arena& arena);

template <typename T>
void attention_layer_backward_ref(T* dx, const AttentionParamPtrs<T*>& grads, const T* d_out, const T* x,
                                  const AttentionParamPtrs<const T*>& w, const AttentionDims& dims,
                                  const RopeTable* rope, const AttentionBatchView& batch, Arena& arena);

}  // namespace hlm
