// The Gated DeltaNet token mixer (gdn.md §1.1; HF OLMo-Hybrid `linear_attn`, Qwen3.5 `linear_attn` after name
// mapping): forward, backward and decode state, CPU reference. Input x [T, D] is the output of the block's input
// norm; the output [T, D] is the block's delta (the residual add is the caller's). Non-goals: the residual, the
// block norms, Qwen3-Next's grouped in_proj_qkvz/ba packing (the loader splits fused HF tensors into these fields),
// HF-style left padding (sequences are packed via TokenBatch::cu_seqlens instead).
//
// Dataflow per token (Ck = Hk·dk, Cv = Hv·dv; v-head h reads k-head h / (Hv/Hk)):
//   q̃ = x Wqᵀ [Ck], k̃ = x Wkᵀ [Ck], ṽ = x Wvᵀ [Cv], z = x Wgᵀ [Cv], a = x Waᵀ [Hv], b = x Wbᵀ [Hv]
//   q, k, v = SiLU(causal depthwise conv_K(q̃, k̃, ṽ))         (ops/causal_conv1d; resets at sequence starts)
//   q, k ← per-head L2 norm (eps 1e-6)                           (ops/l2norm)
//   g = −exp(A_log) softplus(a + dt_bias), β = σ(b) (×2 if neg_eigval)   (ops/gdn_gate)
//   o = gated delta rule(q, k, v, g, β, scale), state [N, Hv, dv, dk]   (ops/gated_delta_rule, recurrent form)
//   out = (rmsnorm_dv(o) · o_norm · silu(z)) Woᵀ                 (ops/gated_rmsnorm, eps = norm_eps)
//
// State (decode / continued prefill): GdnState holds, per sequence of the batch, the last K-1 raw (pre-conv) inputs of
// q̃, k̃, ṽ and the recurrent state, all fp32. When given to the forward it is the initial state and is overwritten
// with the final state (in place). A fresh sequence starts from GdnState::zeros.
//
// Backward: recomputes the forward (the projections are the only heavy part and the gated delta rule backward
// recomputes its states anyway) unless given the LayerStash its forward filled (layers/layer_stash.h: the 15
// intermediates of gdn_layer_ref.cpp, about 6·Ck + 5·Cv + 4·Hv floats per token), then returns dx (overwritten) and ADDS the parameter
// gradients into GdnGrads (so a trainer can sum micro-batches). If the forward ran from a state, pass that initial
// state (a copy taken before the forward, which overwrites it) to the backward; the state itself gets no gradient
// (truncated backpropagation at call boundaries).
//
// Precision: fp32 storage; conv, norms, gate and the recurrence accumulate in double; projections are OpenBLAS GEMMs
// with fp32 accumulation. The templated *_ref entry points below run the same code in double for gradient checks.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

#include "core/arena.h"
#include "core/tensor.h"
#include "layers/layer_stash.h"
#include "layers/linear.h"
#include "layers/token_batch.h"

namespace hlm {

struct GdnDims {
  int64_t key_heads = 0;    // Hk: q and k heads
  int64_t value_heads = 0;  // Hv: v, z, a, b, g, β and state heads; a multiple of Hk
  int64_t key_dim = 0;      // dk
  int64_t value_dim = 0;    // dv
  int64_t conv_kernel = 4;  // K
  bool neg_eigval = false;  // β = 2σ(b) (OLMo-Hybrid linear_allow_neg_eigval, decision D4)
  float norm_eps = 1e-5f;   // gated RMSNorm eps: OLMo-Hybrid 1e-5, Qwen3.5 rms_norm_eps
  float scale = 0.0f;       // query scale; 0 means key_dim^-1/2 (decision D2)

  int64_t key_channels() const { return key_heads * key_dim; }      // Ck
  int64_t value_channels() const { return value_heads * value_dim; }  // Cv
  double q_scale() const { return scale != 0.0f ? static_cast<double>(scale) : 1.0 / std::sqrt(double(key_dim)); }
};

// Parameters, named after HF OLMo-Hybrid's GDN module (model.layers.{i}.linear_attn.<name>). f32, contiguous.
struct GdnWeights {
  Linear q_proj;   // [Ck, D]
  Linear k_proj;   // [Ck, D]
  Linear v_proj;   // [Cv, D]
  Linear g_proj;   // [Cv, D]   output gate z
  Linear a_proj;   // [Hv, D]   gate input a
  Linear b_proj;   // [Hv, D]   β logits
  Linear o_proj;   // [D, Cv]
  Tensor q_conv;   // [Ck, K]   q_conv1d.weight [Ck, 1, K] reshaped
  Tensor k_conv;   // [Ck, K]
  Tensor v_conv;   // [Cv, K]
  Tensor A_log;    // [Hv]
  Tensor dt_bias;  // [Hv]
  Tensor o_norm;   // [dv]      o_norm.weight

  // Zero-filled weights of the right shapes (for initialisers and loaders).
  static GdnWeights zeros(const GdnDims& dims, int64_t hidden);
};

// Parameter gradients: the same fields and shapes as GdnWeights. The backward accumulates (+=) into them.
struct GdnGrads : GdnWeights {
  static GdnGrads zeros_like(const GdnWeights& w);
};

inline constexpr size_t kGdnParamCount = 13;

// THE parameter table: HF name (under linear_attn.) and tensor of every parameter of a GdnWeights / GdnGrads (const
// or not), in a fixed order. Loaders, initialisers, optimisers and tests iterate this instead of listing fields.
template <class S>
auto gdn_param_tensors(S& s) {
  using Ptr = decltype(&s.A_log);
  return std::array<std::pair<const char*, Ptr>, kGdnParamCount>{{
      {"q_proj.weight", &s.q_proj.weight}, {"k_proj.weight", &s.k_proj.weight},
      {"v_proj.weight", &s.v_proj.weight}, {"g_proj.weight", &s.g_proj.weight},
      {"a_proj.weight", &s.a_proj.weight}, {"b_proj.weight", &s.b_proj.weight},
      {"o_proj.weight", &s.o_proj.weight}, {"q_conv1d.weight", &s.q_conv},
      {"k_conv1d.weight", &s.k_conv},      {"v_conv1d.weight", &s.v_conv},
      {"A_log", &s.A_log},                 {"dt_bias", &s.dt_bias},
      {"o_norm.weight", &s.o_norm},
  }};
}

// Checks every weight's shape (and dims' consistency); input error naming the tensor on a mismatch.
void gdn_check_weights(const GdnWeights& w, const GdnDims& dims);

// Decode / continued-prefill state of a batch of N sequences (fp32, contiguous).
struct GdnState {
  Tensor q_conv;     // [N, Ck, K-1]   raw q̃ inputs preceding the next token, oldest first
  Tensor k_conv;     // [N, Ck, K-1]
  Tensor v_conv;     // [N, Cv, K-1]
  Tensor recurrent;  // [N, Hv, dv, dk] (decision D1; HF stores [N, Hv, dk, dv])

  static GdnState zeros(const GdnDims& dims, int64_t n_seqs);
  GdnState clone() const { return {q_conv.clone(), k_conv.clone(), v_conv.clone(), recurrent.clone()}; }
};

// out [T, D] (overwritten) from x [T, D]. state: nullptr (zero initial state, final state discarded) or the state of
// batch's N sequences, updated in place. out may not alias x.
// stash (optional, training only: state must be nullptr): keep the intermediates for the backward.
void gdn_layer_forward(float* out, const float* x, const GdnWeights& w, const GdnDims& dims, const TokenBatch& batch,
                       GdnState* state, Arena& arena, LayerStash* stash = nullptr);

// dx [T, D] (overwritten) and grads (+=) from d_out [T, D]. x, w, dims, batch as in the forward; initial_state is the
// state the forward started from (nullptr = zeros). dx may not alias d_out or x; grads may not alias w.
// stash: the one the forward filled (nullptr: recompute the forward).
void gdn_layer_backward(float* dx, GdnGrads& grads, const float* d_out, const float* x, const GdnWeights& w,
                        const GdnDims& dims, const TokenBatch& batch, const GdnState* initial_state, Arena& arena,
                        const LayerStash* stash = nullptr);

// ---- Templated reference on raw pointers (T = float or double): the float entry points above call these. ----

// Contiguous parameter pointers, P = const T* (weights) or T* (gradients); shapes as in GdnWeights.
template <class P>
struct GdnParamPtrs {
  P q_proj, k_proj, v_proj, g_proj, a_proj, b_proj, o_proj, q_conv, k_conv, v_conv, A_log, dt_bias, o_norm;
};

// The same table as gdn_param_tensors, for pointer sets (names must match row by row; gdn_param_ptrs checks it).
template <class P>
auto gdn_param_ptr_fields(GdnParamPtrs<P>& p) {
  return std::array<std::pair<const char*, P*>, kGdnParamCount>{{
      {"q_proj.weight", &p.q_proj}, {"k_proj.weight", &p.k_proj},     {"v_proj.weight", &p.v_proj},
      {"g_proj.weight", &p.g_proj}, {"a_proj.weight", &p.a_proj},     {"b_proj.weight", &p.b_proj},
      {"o_proj.weight", &p.o_proj}, {"q_conv1d.weight", &p.q_conv},   {"k_conv1d.weight", &p.k_conv},
      {"v_conv1d.weight", &p.v_conv}, {"A_log", &p.A_log},            {"dt_bias", &p.dt_bias},
      {"o_norm.weight", &p.o_norm},
  }};
}

// Pointer views of f32 weights / gradients (tensors must be contiguous f32).
GdnParamPtrs<const float*> gdn_param_ptrs(const GdnWeights& w);
GdnParamPtrs<float*> gdn_param_ptrs(GdnGrads& g);

// State pointers, T = float/double (forward, updated in place) or const float/double (backward's initial state).
template <class T>
struct GdnStatePtrs {
  T* q_conv = nullptr;     // [N, Ck, K-1]
  T* k_conv = nullptr;     // [N, Ck, K-1]
  T* v_conv = nullptr;     // [N, Cv, K-1]
  T* recurrent = nullptr;  // [N, Hv, dv, dk]
};

// Packed token layout: T tokens of D hidden features in N sequences (cu_seqlens [N+1], int64).
struct GdnBatchView {
  int64_t tokens = 0;
  int64_t hidden = 0;
  const int64_t* cu_seqlens = nullptr;
  int64_t n_seqs = 0;
};

template <typename T>
void gdn_layer_forward_ref(T* out, const T* x, const GdnParamPtrs<const T*>& w, const GdnDims& dims,
                           const GdnBatchView& batch, const GdnStatePtrs<T>* state, Arena& arena,
                           LayerStash* stash = nullptr);  // stash: T = float only

template <typename T>
void gdn_layer_backward_ref(T* dx, const GdnParamPtrs<T*>& grads, const T* d_out, const T* x,
                            const GdnParamPtrs<const T*>& w, const GdnDims& dims, const GdnBatchView& batch,
                            const GdnStatePtrs<const T>* initial_state, Arena& arena,
                            const LayerStash* stash = nullptr);  // stash: T = float only

}  // namespace hlm
