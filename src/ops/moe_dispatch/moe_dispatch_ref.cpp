// Routed-expert dispatch, CPU reference: routing, the stable sort of picks by expert, the combine (moe_dispatch.h).
#include <algorithm>
#include <cmath>
#include <limits>
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

void moe_route_sigmoid_grouped_ref(int32_t* expert, float* weight, float* scores, const float* logits,
                                   const float* expert_bias, int64_t T, int64_t E, int64_t k, int64_t n_group,
                                   int64_t topk_group, bool norm_topk_prob, float routed_scaling) {
  const int64_t G = n_group, per = G > 0 ? E / G : 0;
  HLM_CHECK_INPUT(E > 0 && k > 0 && G > 0 && E % G == 0 && per >= 2 && topk_group >= 1 && topk_group <= G &&
                      k <= topk_group * per,
                  "moe route (sigmoid, grouped): top_k ", k, " of ", E, " experts in ", G, " groups, ", topk_group,
                  " kept");
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  std::vector<float> s(static_cast<size_t>(E)), b(static_cast<size_t>(E)), masked(static_cast<size_t>(E));
  std::vector<float> group(static_cast<size_t>(G));
  std::vector<int32_t> order(static_cast<size_t>(std::max(E, G)));
  for (int64_t t = 0; t < T; ++t) {
    bool nan = false;
    for (int64_t e = 0; e < E; ++e) {
      s[e] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(logits[t * E + e]))));
      b[e] = s[e] + expert_bias[e];
      nan = nan || std::isnan(b[e]);
    }
    if (scores != nullptr) std::copy(s.begin(), s.end(), scores + t * E);
    if (nan) {  // no ordering of NaN scores: experts 0..k−1 (any ids in range would do), weights NaN
      for (int64_t j = 0; j < k; ++j) {
        expert[t * k + j] = static_cast<int32_t>(j);
        weight[t * k + j] = std::numeric_limits<float>::quiet_NaN();
      }
      continue;
    }
    for (int64_t g = 0; g < G; ++g) {
      float first = kMasked, second = kMasked;
      for (int64_t e = g * per; e < (g + 1) * per; ++e) {
        if (b[e] > first) {
          second = first;
          first = b[e];
        } else if (b[e] > second) {
          second = b[e];
        }
      }
      group[g] = first + second;
    }
    std::iota(order.begin(), order.begin() + G, 0);
    std::partial_sort(order.begin(), order.begin() + topk_group, order.begin() + G, [&](int32_t a, int32_t c) {
      return group[a] > group[c] || (group[a] == group[c] && a < c);
    });
    std::fill(masked.begin(), masked.end(), kMasked);
    for (int64_t j = 0; j < topk_group; ++j)
      for (int64_t e = order[j] * per; e < (order[j] + 1) * per; ++e) masked[e] = b[e];
    std::iota(order.begin(), order.begin() + E, 0);
    std::partial_sort(order.begin(), order.begin() + k, order.begin() + E, [&](int32_t a, int32_t c) {
      return masked[a] > masked[c] || (masked[a] == masked[c] && a < c);
    });
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += s[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      const float w = norm_topk_prob ? s[order[j]] / (sum + 1e-20f) : s[order[j]];
      expert[t * k + j] = order[j];
      weight[t * k + j] = w * routed_scaling;
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
    if (shared_gate == nullptr) {  // the ungated shared expert (bailing)
      for (int64_t h = 0; h < H; ++h) dst[h] += shared[t * H + h];
      continue;
    }
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
