// Per-row L2 normalisation: CPU reference, forward and backward (contract in l2norm.h).
#include <cmath>

#include "core/error.h"
#include "ops/l2norm/l2norm.h"

namespace hlm {

namespace {

// r = (Σ x² + eps)^-1/2 in double.
template <typename T>
double inv_norm(const T* x, int64_t dim, double eps) {
  double ss = 0.0;
  for (int64_t d = 0; d < dim; ++d) ss += static_cast<double>(x[d]) * static_cast<double>(x[d]);
  return 1.0 / std::sqrt(ss + eps);
}

}  // namespace

template <typename T>
void l2norm_forward(T* y, const T* x, int64_t rows, int64_t dim, double eps) {
  HLM_CHECK(rows >= 0 && dim > 0 && eps >= 0.0, "bad l2norm shape");
#pragma omp parallel for if (rows * dim > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    const double inv = inv_norm(xr, dim, eps);
    for (int64_t d = 0; d < dim; ++d) y[r * dim + d] = static_cast<T>(static_cast<double>(xr[d]) * inv);
  }
}

template <typename T>
void l2norm_backward(T* dx, const T* dy, const T* x, int64_t rows, int64_t dim, double eps) {
  HLM_CHECK(rows >= 0 && dim > 0 && eps >= 0.0, "bad l2norm shape");
#pragma omp parallel for if (rows * dim > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    const T* dyr = dy + r * dim;
    const double inv = inv_norm(xr, dim, eps);
    double y_dot_dy = 0.0;
    for (int64_t d = 0; d < dim; ++d) y_dot_dy += static_cast<double>(xr[d]) * inv * static_cast<double>(dyr[d]);
    for (int64_t d = 0; d < dim; ++d) {
      const double y = static_cast<double>(xr[d]) * inv;
      dx[r * dim + d] = static_cast<T>(inv * (static_cast<double>(dyr[d]) - y * y_dot_dy));
    }
  }
}

template void l2norm_forward<float>(float*, const float*, int64_t, int64_t, double);
template void l2norm_forward<double>(double*, const double*, int64_t, int64_t, double);
template void l2norm_backward<float>(float*, const float*, const float*, int64_t, int64_t, double);
template void l2norm_backward<double>(double*, const double*, const double*, int64_t, int64_t, double);

}  // namespace hlm
