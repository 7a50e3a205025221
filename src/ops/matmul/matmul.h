// Linear layer product in the HF weight layout: y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N]), f32, via OpenBLAS sgemm
// (fp32 accumulation). `accumulate` adds into y instead of overwriting it.
#pragma once
#include <cstdint>

namespace hlm {

void matmul_forward(float* y, const float* x, const float* w, const float* bias, int64_t M, int64_t N, int64_t K,
                    bool accumulate = false);

}  // namespace hlm
