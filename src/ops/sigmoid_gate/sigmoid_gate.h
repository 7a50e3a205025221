// Elementwise sigmoid gate: out = x ⊙ sigmoid(g), the output gate of Qwen3.5 / Qwen3-Next full attention
// (attn_output · sigmoid(gate) before o_proj). CPU reference, forward and backward. Shapes: all [n].
//
// Backward (nothing saved; needs x and g): with σ = sigmoid(g),
//   dx = d_out · σ,   dg = d_out · x · σ · (1 − σ)          (both OVERWRITTEN)
// Elementwise, each element read before it is written: out may alias x or g; dx / dg may alias d_out, x or g (not
// each other). σ and the products are computed in double and rounded once; 1 − σ is taken as σ(−g) (no cancellation).
// The templates run the same code for T = float (the engine) and T = double (gradient checks).
#pragma once
#include <cstdint>

namespace hlm {

template <typename T>
void sigmoid_gate_forward(T* out, const T* x, const T* g, int64_t n);

template <typename T>
void sigmoid_gate_backward(T* dx, T* dg, const T* d_out, const T* x, const T* g, int64_t n);

}  // namespace hlm
