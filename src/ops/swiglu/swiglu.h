// SwiGLU gate of the Llama/Qwen3 MLP: out = silu(gate) ⊙ up, silu(x) = x · sigmoid(x). CPU reference, forward and
// backward. Shapes: all [n]; out may alias gate or up.
//
// Backward: needs gate and up (nothing saved). With σ = sigmoid(gate):
//   dgate = d_out · up · σ · (1 + gate · (1 − σ)),   dup = d_out · silu(gate)     (both OVERWRITTEN)
// Elementwise, each element read before it is written: dgate / dup may alias d_out, gate or up (not each other).
// Computed in double and rounded once.
//
// The templates run the same code for T = float (the engine) and T = double (gradient checks); the float overload of
// the forward is the historical entry point and calls the float instantiation (bit-identical to it).
#pragma once
#include <cstdint>

namespace hlm {

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n);

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n);

template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* d_out, const T* gate, const T* up, int64_t n);

}  // namespace hlm
