// Gradient zero / scale / global-norm clipping (contract in grad_utils.h).
#include "train/grad_utils.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace hlm {

static float* grad_data(const Tensor& g) {
  HLM_CHECK_INPUT(g.dtype() == DType::F32 && g.is_contiguous(), "gradients must be contiguous f32");
  return g.f32();
}

void grad_zero(std::span<const Tensor> grads) {
  for (const Tensor& g : grads) std::memset(grad_data(g), 0, g.nbytes());
}

void grad_scale(std::span<const Tensor> grads, double factor) {
  for (const Tensor& g : grads) {
    float* x = grad_data(g);
    const int64_t n = g.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<double>(x[i]) * factor);
  }
}

double grad_global_norm(std::span<const Tensor> grads) {
  double sum_sq = 0.0;
  bool has_nan = false;
  for (const Tensor& g : grads) {
    const float* x = grad_data(g);
    const int64_t n = g.numel();
    double part = 0.0;
#pragma omp parallel for reduction(+ : part) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) part += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    if (std::isnan(part)) has_nan = true;  // NaN, or inf − inf cannot occur (squares are ≥ 0): NaN input
    sum_sq += part;
  }
  if (has_nan || std::isnan(sum_sq)) return std::numeric_limits<double>::quiet_NaN();
  return std::sqrt(sum_sq);  // +inf when any element was ±inf
}

double clip_grad_norm(std::span<const Tensor> grads, double max_norm) {
  HLM_CHECK_INPUT(max_norm > 0.0, "max gradient norm must be positive, got ", max_norm);
  const double norm = grad_global_norm(grads);
  if (!std::isfinite(norm)) return norm;  // leave the gradients alone; the caller skips the step
  if (norm > max_norm) grad_scale(grads, max_norm / norm);
  return norm;
}

}  // namespace hlm
