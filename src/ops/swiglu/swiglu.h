// SwiGLU gate of the Llama/Qwen3 MLP: out = silu(gate) ⊙ up, silu(x) = x · sigmoid(x). Shapes: all [n]; out may
// alias gate or up.
#pragma once
#include <cstdint>

namespace hlm {

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n);

}  // namespace hlm
