// Routed-expert dispatch, CPU reference: routing, the stable sort of picks by expert, the combine (moe_dispatch.h).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "ops/moe_dispatch/moe_dispatch.h"

namespace hlm {

void moe_route_ref(int32_t* expert, float* weight, float* probs, const float* logits, int64_t T, int64_t E,
                   int64_t k, bool norm_topk_prob) {
  HLM_CHECK_INPUT(E > 0 && k > 0 && k <= E, "moe route: top_k ", k, " with ", E, " experts");
  std::vector<float> p(static_cast<size_t>(E));
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* row = logits + t * E;
    const float max = *std::max_element(row, row + E);
    double sum = 0.0;
    for (int64_t e = 0; e < E; ++e) sum += p[e] = std::exp(row[e] - max);
    for (int64_t e = 0; e < E; ++e) p[e] = static_cast<float>(p[e] / sum);
    if (probs != nullptr) std::copy(p.begin(), p.end(), probs + t * E);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float chosen = 0.0f;
    for (int64_t j = 0; j < k; ++j) chosen += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      expert[t * k + j] = order[j];
      weight[t * k + j] = norm_topk_prob ? p[order[j]] / chosen : p[order[j]];
    }
  }
}

void moe_dispatch_ref(int32_t* counts, int32_t* offsets, int32_t* perm, int32_t* slot, const int32_t* expert,
                      int64_t T, int64_t k, int64_t E) {
  const int64_t n = T * k;
  std::fill(counts, counts + E, 0);
  for (int64_t i = 0; i < n; ++i) {
    HLM_CHECK_INPUT(expert[i] >= 0 && expert[i] < E, "moe dispatch: expert id ", expert[i], " outside [0, ", E, ")");
    ++counts[expert[i]];
  }
  offsets[0] = 0;
  for (int64_t e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + counts[e];
  std::vector<int32_t> next(offsets, offsets + E);
  for (int64_t i = 0; i < n; ++i) {  // increasing i: stable within each expert
    const int32_t r = next[static_cast<size_t>(expert[i])]++;
    perm[r] = static_cast<int32_t>(i);
    slot[i] = r;
  }
}

void moe_combine_ref(float* out, const float* y, const float* weight, const int32_t* expert, const int32_t* slot,
                     const float* shared, const float* shared_gate, int64_t T, int64_t k, int64_t H) {
  std::vector<int64_t> order(static_cast<size_t>(k));
  for (int64_t t = 0; t < T; ++t) {
    float* dst = out + t * H;
    std::fill(dst, dst + H, 0.0f);
    std::iota(order.begin(), order.end(), t * k);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return expert[a] < expert[b]; });
    for (const int64_t i : order) {
      const float* src = y + static_cast<int64_t>(slot[i]) * H;
      const float w = weight[i];
      for (int64_t h = 0; h < H; ++h) dst[h] += src[h] * w;
    }
    if (shared == nullptr) continue;
    const float s = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(shared_gate[t]))));
    for (int64_t h = 0; h < H; ++h) dst[h] += s * shared[t * H + h];
  }
}

void moe_swiglu_ref(float* h, const float* gu, int64_t R, int64_t F) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t f = 0; f < F; ++f) {
      const float g = gu[r * 2 * F + f], u = gu[r * 2 * F + F + f];
      h[r * F + f] = g / (1.0f + std::exp(-g)) * u;
    }
}

}  // namespace hlm
