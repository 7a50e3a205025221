// Gated RMSNorm y = rmsnorm(x) · w · silu(z): CPU reference, forward and backward (contract in gated_rmsnorm.h).
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/gated_rmsnorm/gated_rmsnorm.h"

namespace hlm {

namespace {

double sigmoid(double u) { return 1.0 / (1.0 + std::exp(-u)); }

template <typename T>
double inv_rms(const T* x, int64_t dim, double eps) {
  double ss = 0.0;
  for (int64_t d = 0; d < dim; ++d) ss += static_cast<double>(x[d]) * static_cast<double>(x[d]);
  return 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
}

bool worth_threads(int64_t rows, int64_t dim) { return rows * dim > 65536; }

}  // namespace

template <typename T>
void gated_rmsnorm_forward(T* y, const T* x, const T* z, const T* w, int64_t rows, int64_t dim, double eps) {
  HLM_CHECK(rows >= 0 && dim > 0 && y && x && z && w, "bad gated rmsnorm arguments");
#pragma omp parallel for if (worth_threads(rows, dim))
  for (int64_t r = 0; r < rows; ++r) {
    const double inv = inv_rms(x + r * dim, dim, eps);
    for (int64_t d = 0; d < dim; ++d) {
      const int64_t i = r * dim + d;
      const double zi = static_cast<double>(z[i]);
      y[i] = static_cast<T>(static_cast<double>(x[i]) * inv * static_cast<double>(w[d]) * zi * sigmoid(zi));
    }
  }
}

template <typename T>
void gated_rmsnorm_backward(T* dx, T* dz, T* dw, const T* dy, const T* x, const T* z, const T* w, int64_t rows,
                            int64_t dim, double eps) {
  HLM_CHECK(rows >= 0 && dim > 0 && dx && dz && dy && x && z && w, "bad gated rmsnorm backward arguments");
  std::vector<double> inv_r(static_cast<size_t>(rows));  // r per row, reused by the dw sums
#pragma omp parallel for if (worth_threads(rows, dim))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * dim;
    const double inv = inv_rms(x + base, dim, eps);
    inv_r[r] = inv;
    double gn_dot_n = 0.0;
    for (int64_t d = 0; d < dim; ++d) {
      const double zi = static_cast<double>(z[base + d]), n = static_cast<double>(x[base + d]) * inv;
      gn_dot_n += static_cast<double>(dy[base + d]) * static_cast<double>(w[d]) * zi * sigmoid(zi) * n;
    }
    const double mean = gn_dot_n / static_cast<double>(dim);
    for (int64_t d = 0; d < dim; ++d) {
      const int64_t i = base + d;
      const double zi = static_cast<double>(z[i]), s = sigmoid(zi), n = static_cast<double>(x[i]) * inv;
      const double dyw = static_cast<double>(dy[i]) * static_cast<double>(w[d]);
      dx[i] = static_cast<T>(inv * (dyw * zi * s - n * mean));
      dz[i] = static_cast<T>(dyw * n * s * (1.0 + zi * (1.0 - s)));
    }
  }
  if (dw == nullptr) return;
#pragma omp parallel for if (worth_threads(rows, dim))
  for (int64_t d = 0; d < dim; ++d) {
    double acc = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r * dim + d;
      const double zi = static_cast<double>(z[i]);
      acc += static_cast<double>(dy[i]) * static_cast<double>(x[i]) * inv_r[r] * zi * sigmoid(zi);
    }
    dw[d] = static_cast<T>(acc);
  }
}

template void gated_rmsnorm_forward<float>(float*, const float*, const float*, const float*, int64_t, int64_t,
                                           double);
template void gated_rmsnorm_forward<double>(double*, const double*, const double*, const double*, int64_t, int64_t,
                                            double);
template void gated_rmsnorm_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                            const float*, int64_t, int64_t, double);
template void gated_rmsnorm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                             const double*, int64_t, int64_t, double);

}  // namespace hlm
