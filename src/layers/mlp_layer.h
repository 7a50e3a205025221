// The SwiGLU MLP of Llama-family decoders (HF `mlp`): down_proj(silu(gate_proj(x)) ⊙ up_proj(x)). CPU reference,
// forward and backward. x [T, hidden] (already normalised) -> out [T, hidden]; F = intermediate size.
//
// Backward: recomputes the forward (or, given the LayerStash its forward filled, reads gate, up and h from it:
// 3·T·F floats kept; layers/layer_stash.h), then
//   dh = d_out Wd; dWd += d_outᵀ h (h = silu(gate) ⊙ up);  (dgate, dup) = swiglu_backward(dh)
//   dx = dgate Wg + dup Wu (OVERWRITTEN);  dWg += dgateᵀ x;  dWu += dupᵀ x;  biases += column sums
// Parameter gradients are ADDED into MlpGrads. The templated *_ref entry points run the same code in double.
#pragma once
#include <array>
#include <cstddef>
#include <utility>

#include "core/arena.h"
#include "layers/layer_stash.h"
#include "layers/linear.h"

namespace hlm {

struct MlpWeights {
  Linear gate_proj;  // [F, hidden] (+ bias [F])
  Linear up_proj;    // [F, hidden] (+ bias [F])
  Linear down_proj;  // [hidden, F] (+ bias [hidden])
};

// Parameter gradients: the same fields and shapes as the MlpWeights they belong to (undefined stays undefined).
struct MlpGrads : MlpWeights {};

// Zero-filled gradients shaped like w.
MlpGrads mlp_grads_like(const MlpWeights& w);

inline constexpr size_t kMlpParamCount = 6;

// THE parameter table: HF name (under mlp.) and tensor of every parameter slot of an MlpWeights / MlpGrads, in a
// fixed order; bias slots may hold undefined tensors.
template <class S>
auto mlp_param_tensors(S& s) {
  using Ptr = decltype(&s.gate_proj.weight);
  return std::array<std::pair<const char*, Ptr>, kMlpParamCount>{{
      {"gate_proj.weight", &s.gate_proj.weight}, {"gate_proj.bias", &s.gate_proj.bias},
      {"up_proj.weight", &s.up_proj.weight},     {"up_proj.bias", &s.up_proj.bias},
      {"down_proj.weight", &s.down_proj.weight}, {"down_proj.bias", &s.down_proj.bias},
  }};
}

// stash (optional): keep gate, up, h and a copy of out in stash->arena for the backward.
void mlp_layer_forward(float* out, const float* x, const MlpWeights& w, int64_t T, Arena& arena,
                       LayerStash* stash = nullptr);

// dx [T, hidden] (overwritten) and grads (+=) from d_out [T, hidden]. grads must have the shapes of w
// (mlp_grads_like). dx may not alias d_out or x. stash: the one the forward filled (nullptr: recompute).
void mlp_layer_backward(float* dx, MlpGrads& grads, const float* d_out, const float* x, const MlpWeights& w,
                        int64_t T, Arena& arena, const LayerStash* stash = nullptr);

// ---- Templated reference on raw pointers (T = float or double): the float entry points above call these. ----

// Contiguous parameter pointers, P = const T* (weights) or T* (gradients); nullptr for an absent bias.
template <class P>
struct MlpParamPtrs {
  P gate_proj, gate_bias, up_proj, up_bias, down_proj, down_bias;
};

// The same table as mlp_param_tensors, for pointer sets.
template <class P>
auto mlp_param_ptr_fields(MlpParamPtrs<P>& p) {
  return std::array<std::pair<const char*, P*>, kMlpParamCount>{{
      {"gate_proj.weight", &p.gate_proj}, {"gate_proj.bias", &p.gate_bias}, {"up_proj.weight", &p.up_proj},
      {"up_proj.bias", &p.up_bias},       {"down_proj.weight", &p.down_proj}, {"down_proj.bias", &p.down_bias},
  }};
}

MlpParamPtrs<const float*> mlp_param_ptrs(const MlpWeights& w);
MlpParamPtrs<float*> mlp_param_ptrs(MlpGrads& g);

// n tokens of `hidden` features, intermediate size F.
template <typename T>
void mlp_layer_forward_ref(T* out, const T* x, const MlpParamPtrs<const T*>& w, int64_t n, int64_t hidden, int64_t F,
                           Arena& arena);

template <typename T>
void mlp_layer_backward_ref(T* dx, const MlpParamPtrs<T*>& grads, const T* d_out, const T* x,
                            const MlpParamPtrs<const T*>& w, int64_t n, int64_t hidden, int64_t F, Arena& arena);

}  // namespace hlm
