#include "ops/rmsnorm/rmsnorm.h"

#include <cmath>

namespace hlm {

void rmsnorm_forward(float* out, const float* x, const float* weight, int64_t R, int64_t D, float eps) {
#pragma omp parallel for if (R * D > 32768)
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = x + r * D;
    double sum_sq = 0.0;
    for (int64_t d = 0; d < D; ++d) sum_sq += static_cast<double>(xr[d]) * xr[d];
    // HF computes variance in fp32 then rsqrt; double here differs by ≤ 1 ulp of the result.
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(D) + eps));
    float* o = out + r * D;
    for (int64_t d = 0; d < D; ++d) o[d] = weight[d] * (xr[d] * inv_rms);
  }
}

}  // namespace hlm
