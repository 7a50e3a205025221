// Per-row L2 normalisation, as GDN applies it to q and k per head (gdn.md §1.1 step 3): CPU reference, forward and
// backward. HF: x * rsqrt(Σx² + 1e-6); FLA: x / sqrt(Σx² + 1e-6) (the same up to rounding). Non-goals: the
// llama.cpp variant rsqrt(max(Σx², eps²)).
//
// Shapes (contiguous): x, y, dy, dx [rows, dim].  y = r · x with r = (Σ_d x² + eps)^-1/2, eps = kL2NormEps by default.
// Backward: dx = r · (dy − y · (y·dy)), the forward recomputed from x (nothing saved); dx is overwritten.
// Aliasing: y may alias x; dx may alias dy. Accumulation in double; OpenMP over rows (results independent of the
// thread count: each row is one work item).
#pragma once
#include <cstdint>

namespace hlm {

inline constexpr double kL2NormEps = 1e-6;

template <typename T>
void l2norm_forward(T* y, const T* x, int64_t rows, int64_t dim, double eps = kL2NormEps);

template <typename T>
void l2norm_backward(T* dx, const T* dy, const T* x, int64_t rows, int64_t dim, double eps = kL2NormEps);

}  // namespace hlm
