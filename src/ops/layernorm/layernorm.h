// LayerNorm without a bias, as HF Cohere2LayerNorm computes it in fp32: out = weight · (x − μ) · (σ² + eps)^-1/2
// with μ and σ² the mean and (biased) variance of the row. CPU reference, forward and backward. Shapes: x, out,
// d_out, dx [R, D] (out may alias x), weight, dweight [D]. Accumulation in double.
//
// Backward: needs x and weight (the forward is recomputed, nothing saved). With r = (σ² + eps)^-1/2,
// n = (x − μ) · r and g = d_out · weight:
//   dx = r · (g − mean_d(g) − n · mean_d(g · n))   (OVERWRITTEN; dx may alias d_out)
//   dweight[d] += Σ_rows d_out · n                  (ACCUMULATED; nullptr = not wanted)
// Parallelism: OpenMP over rows (dx); dweight sums the rows in order: independent of the thread count.
// Non-goals: a bias (Cohere2 has none), CUDA (the families using it run on the CPU).
#pragma once
#include <cstdint>

namespace hlm {

template <typename T>
void layernorm_forward(T* out, const T* x, const T* weight, int64_t R, int64_t D, double eps);

template <typename T>
void layernorm_backward(T* dx, T* dweight, const T* d_out, const T* x, const T* weight, int64_t R, int64_t D,
                        double eps);

}  // namespace hlm
