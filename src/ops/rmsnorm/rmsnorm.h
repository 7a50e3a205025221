// RMSNorm as HF Llama/Qwen3 compute it in fp32: out = x · (mean(x²) + eps)^-1/2 · weight.
// Shapes: x, out [R, D] (out may alias x), weight [D]. Accumulation in double for the reference.
#pragma once
#include <cstdint>

namespace hlm {

void rmsnorm_forward(float* out, const float* x, const float* weight, int64_t R, int64_t D, float eps);

}  // namespace hlm
