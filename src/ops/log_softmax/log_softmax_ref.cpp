#include "ops/log_softmax/log_softmax.h"

#include <cmath>
#include <limits>

namespace hlm {

// Returns the row max m and log Σ exp(x - m) separately: out = (x - m) - log_sum keeps full precision even when
// |m| is large (x - m is exact for the values that matter; m + log_sum would round at ulp(m)).
struct RowLse {
  float max_value;
  float log_sum;
};

static RowLse row_logsumexp(const float* x, int64_t V) {
  float max_value = -std::numeric_limits<float>::infinity();
  for (int64_t v = 0; v < V; ++v) {
    if (std::isnan(x[v])) return {x[v], 0.0f};
    if (x[v] > max_value) max_value = x[v];
  }
  if (std::isinf(max_value)) return {max_value, 0.0f};  // all -inf -> -inf; any +inf -> +inf
  double sum = 0.0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(x[v] - max_value));
  return {max_value, static_cast<float>(std::log(sum))};
}

void logsumexp_forward(float* lse, const float* x, int64_t R, int64_t V) {
#pragma omp parallel for if (R * V > 65536)
  for (int64_t r = 0; r < R; ++r) {
    const RowLse l = row_logsumexp(x + r * V, V);
    lse[r] = l.max_value + l.log_sum;
  }
}

void log_softmax_forward(float* out, const float* x, int64_t R, int64_t V) {
#pragma omp parallel for if (R * V > 65536)
  for (int64_t r = 0; r < R; ++r) {
    const RowLse l = row_logsumexp(x + r * V, V);
    for (int64_t v = 0; v < V; ++v) out[r * V + v] = (x[r * V + v] - l.max_value) - l.log_sum;
  }
}

}  // namespace hlm
