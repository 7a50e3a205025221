// LayerNorm without bias: CPU reference, forward and backward (contract in layernorm.h).
#include "ops/layernorm/layernorm.h"

#include <cmath>

namespace hlm {

namespace {

// Mean and 1/sqrt(var + eps) of one row, in double.
template <typename T>
void row_stats(const T* x, int64_t D, double eps, double& mean, double& inv) {
  double sum = 0.0;
  for (int64_t d = 0; d < D; ++d) sum += static_cast<double>(x[d]);
  mean = sum / static_cast<double>(D);
  double var = 0.0;
  for (int64_t d = 0; d < D; ++d) {
    const double c = static_cast<double>(x[d]) - mean;
    var += c * c;
  }
  inv = 1.0 / std::sqrt(var / static_cast<double>(D) + eps);
}

}  // namespace

template <typename T>
void layernorm_forward(T* out, const T* x, const T* weight, int64_t R, int64_t D, double eps) {
#pragma omp parallel for if (R * D > 32768)
  for (int64_t r = 0; r < R; ++r) {
    double mean = 0.0, inv = 0.0;
    row_stats(x + r * D, D, eps, mean, inv);
    for (int64_t d = 0; d < D; ++d) {
      const double n = (static_cast<double>(x[r * D + d]) - mean) * inv;
      out[r * D + d] = static_cast<T>(static_cast<double>(weight[d]) * n);
    }
  }
}

template <typename T>
void layernorm_backward(T* dx, T* dweight, const T* d_out, const T* x, const T* weight, int64_t R, int64_t D,
                        double eps) {
  if (dweight != nullptr) {  // rows in order, one thread: independent of the thread count
    for (int64_t r = 0; r < R; ++r) {
      double mean = 0.0, inv = 0.0;
      row_stats(x + r * D, D, eps, mean, inv);
      for (int64_t d = 0; d < D; ++d)
        dweight[d] += static_cast<T>(static_cast<double>(d_out[r * D + d]) *
                                     ((static_cast<double>(x[r * D + d]) - mean) * inv));
    }
  }
#pragma omp parallel for if (R * D > 32768)
  for (int64_t r = 0; r < R; ++r) {
    double mean = 0.0, inv = 0.0;
    row_stats(x + r * D, D, eps, mean, inv);
    double g_mean = 0.0, gn_mean = 0.0;
    for (int64_t d = 0; d < D; ++d) {
      const double g = static_cast<double>(d_out[r * D + d]) * static_cast<double>(weight[d]);
      const double n = (static_cast<double>(x[r * D + d]) - mean) * inv;
      g_mean += g;
      gn_mean += g * n;
    }
    g_mean /= static_cast<double>(D);
    gn_mean /= static_cast<double>(D);
    for (int64_t d = 0; d < D; ++d) {
      const double g = static_cast<double>(d_out[r * D + d]) * static_cast<double>(weight[d]);
      const double n = (static_cast<double>(x[r * D + d]) - mean) * inv;
      dx[r * D + d] = static_cast<T>(inv * (g - g_mean - n * gn_mean));
    }
  }
}

template void layernorm_forward<float>(float*, const float*, const float*, int64_t, int64_t, double);
template void layernorm_forward<double>(double*, const double*, const double*, int64_t, int64_t, double);
template void layernorm_backward<float>(float*, float*, const float*, const float*, const float*, int64_t, int64_t,
                                        double);
template void layernorm_backward<double>(double*, double*, const double*, const double*, const double*, int64_t,
                                         int64_t, double);

}  // namespace hlm
