// RMSNorm as HF Llama/Qwen3 compute it in fp32: out = x · (mean(x²) + eps)^-1/2 · weight. CPU reference, forward and
// backward. Shapes: x, out, d_out, dx [R, D] (out may alias x), weight, dweight [D]. Accumulation in double.
//
// Backward: needs x and weight (the forward is recomputed, nothing saved). With r = (mean_d x² + eps)^-1/2,
// n = x · r and g = d_out · weight:
//   dx = r · (g − n · mean_d(g · n))      (OVERWRITTEN; dx may alias d_out)
//   dweight[d] += Σ_rows d_out · n         (ACCUMULATED, parameter gradient; nullptr = not wanted)
// Parallelism: OpenMP over rows (dx) and over columns in fixed row order (dweight): results independent of the
// thread count.
//
// The templates run the same code for T = float (the engine) and T = double (gradient checks); the float overload of
// the forward is the historical entry point and calls the float instantiation (bit-identical to it).
#pragma once
#include <cstdint>

namespace hlm {

void rmsnorm_forward(float* out, const float* x, const float* weight, int64_t R, int64_t D, float eps);

template <typename T>
void rmsnorm_forward(T* out, const T* x, const T* weight, int64_t R, int64_t D, double eps);

template <typename T>
void rmsnorm_backward(T* dx, T* dweight, const T* d_out, const T* x, const T* weight, int64_t R, int64_t D,
                      double eps);

}  // namespace hlm
