// Gated RMSNorm, the output norm of a Gated DeltaNet layer (gdn.md §1.1 step 6; HF Qwen3NextRMSNormGated /
// OLMo-Hybrid o_norm, FLA FusedRMSNormGated): CPU reference, forward and backward. Norm BEFORE the gate, plain
// weight w (not 1 + w). Non-goals: the zero-centred (1 + w) variant, norm-after-gate variants.
//
// Shapes (contiguous): x, z, y, dy, dx, dz [rows, dim] (rows = tokens · value heads, dim = dv); w, dw [dim].
//   r = (mean_d x² + eps)^-1/2,  n = x · r,  y = n · w · silu(z),  silu(z) = z · σ(z)
// eps: OLMo-Hybrid 1e-5 (fixed), Qwen3.5 rms_norm_eps.
// Backward (forward recomputed, nothing saved; every output overwritten; dw may be nullptr):
//   gn = dy · w · silu(z);  dx = r · (gn − n · mean_d(gn · n));  dz = dy · n · w · σ(z)(1 + z(1 − σ(z)));
//   dw[d] = Σ_rows dy · n · silu(z)
// Parallelism: OpenMP over rows (dx, dz) and over columns (dw, fixed row order): results independent of the thread
// count. Accumulation in double. y may alias x or z; dx and dz may not alias inputs.
#pragma once
#include <cstdint>

namespace hlm {

template <typename T>
void gated_rmsnorm_forward(T* y, const T* x, const T* z, const T* w, int64_t rows, int64_t dim, double eps);

template <typename T>
void gated_rmsnorm_backward(T* dx, T* dz, T* dw, const T* dy, const T* x, const T* z, const T* w, int64_t rows,
                            int64_t dim, double eps);

}  // namespace hlm
