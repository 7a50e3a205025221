// RMSNorm: CPU reference, forward and backward (contract in rmsnorm.h).
#include <cmath>
#include <vector>

#include "ops/rmsnorm/rmsnorm.h"

namespace hlm {

namespace {

// (mean_d x² + eps)^-1/2 in double.
template <typename T>
double inv_rms(const T* x, int64_t D, double eps) {
  double sum_sq = 0.0;
  for (int64_t d = 0; d < D; ++d) sum_sq += static_cast<double>(x[d]) * static_cast<double>(x[d]);
  return 1.0 / std::sqrt(sum_sq / static_cast<double>(D) + eps);
}

}  // namespace

template <typename T>
void rmsnorm_forward(T* out, const T* x, const T* weight, int64_t R, int64_t D, double eps) {
#pragma omp parallel for if (R * D > 32768)
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + r * D;
    // HF computes variance in fp32 then rsqrt; double here differs by ≤ 1 ulp of the result.
    const T inv = static_cast<T>(inv_rms(xr, D, eps));
    T* o = out + r * D;
    for (int64_t d = 0; d < D; ++d) o[d] = weight[d] * (xr[d] * inv);
  }
}

void rmsnorm_forward(float* out, const float* x, const float* weight, int64_t R, int64_t D, float eps) {
  rmsnorm_forward<float>(out, x, weight, R, D, eps);
}

template <typename T>
void rmsnorm_backward(T* dx, T* dweight, const T* d_out, const T* x, const T* weight, int64_t R, int64_t D,
                      double eps) {
  std::vector<double> inv(static_cast<size_t>(R));
#pragma omp parallel for if (R * D > 32768)
  for (int64_t r = 0; r < R; ++r) inv[static_cast<size_t>(r)] = inv_rms(x + r * D, D, eps);
  // dweight first: dx may alias d_out.
  if (dweight != nullptr) {
#pragma omp parallel for if (R * D > 32768)
    for (int64_t d = 0; d < D; ++d) {
      double acc = 0.0;
      for (int64_t r = 0; r < R; ++r)
        acc += static_cast<double>(d_out[r * D + d]) * static_cast<double>(x[r * D + d]) * inv[static_cast<size_t>(r)];
      dweight[d] += static_cast<T>(acc);
    }
  }
#pragma omp parallel for if (R * D > 32768)
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + r * D;
    const T* gr = d_out + r * D;
    const double ir = inv[static_cast<size_t>(r)];
    double gn = 0.0;  // Σ_d g · n
    for (int64_t d = 0; d < D; ++d)
      gn += static_cast<double>(gr[d]) * static_cast<double>(weight[d]) * static_cast<double>(xr[d]) * ir;
    const double mean_gn = gn / static_cast<double>(D);
    T* o = dx + r * D;
    for (int64_t d = 0; d < D; ++d) {
      const double g = static_cast<double>(gr[d]) * static_cast<double>(weight[d]);
      o[d] = static_cast<T>(ir * (g - static_cast<double>(xr[d]) * ir * mean_gn));
    }
  }
}

template void rmsnorm_forward<float>(float*, const float*, const float*, int64_t, int64_t, double);
template void rmsnorm_forward<double>(double*, const double*, const double*, int64_t, int64_t, double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*, int64_t, int64_t,
                                      double);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*, const double*, int64_t,
                                       int64_t, double);

}  // namespace hlm
