#include "infer/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace hlm {

void sampling_check(const SamplingParams& p) {
  HLM_CHECK_INPUT(std::isfinite(p.temperature) && p.temperature >= 0.0, "--temperature must be >= 0, got ",
                  p.temperature);
  HLM_CHECK_INPUT(p.top_k >= 0, "--top-k must be >= 0 (0 = no limit), got ", p.top_k);
  HLM_CHECK_INPUT(std::isfinite(p.top_p) && p.top_p > 0.0 && p.top_p <= 1.0, "--top-p must be in (0, 1], got ",
                  p.top_p);
}

bool sampling_is_greedy(const SamplingParams& p) { return p.temperature == 0.0 || p.top_k == 1; }

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, uint64_t stream, uint64_t index) {
  const auto V = static_cast<int64_t>(logits.size());
  HLM_CHECK(V > 0, "sampling from an empty vocabulary");
  if (sampling_is_greedy(p)) {
    int64_t best = 0;
    for (int64_t v = 1; v < V; ++v)
      if (logits[v] > logits[best]) best = v;
    return static_cast<int32_t>(best);
  }
  // Candidates by descending logit (ties: lower id first), cut to top_k.
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const int64_t k = p.top_k > 0 ? std::min(p.top_k, V) : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), by_logit);
  order.resize(static_cast<size_t>(k));
  std::vector<double> prob(order.size());
  const double top = static_cast<double>(logits[order[0]]) / p.temperature;
  double sum = 0.0;
  for (size_t i = 0; i < order.size(); ++i) {
    prob[i] = std::exp(static_cast<double>(logits[order[i]]) / p.temperature - top);
    sum += prob[i];
  }
  // top_p: the shortest prefix whose mass reaches top_p.
  size_t keep = order.size();
  if (p.top_p < 1.0) {
    double mass = 0.0;
    for (size_t i = 0; i < order.size(); ++i) {
      mass += prob[i] / sum;
      if (mass >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0.0;
  for (size_t i = 0; i < keep; ++i) kept += prob[i];
  const double u = static_cast<double>(rng_uniform(p.seed, stream, index)) * kept;
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += prob[i];
    if (u < acc) return order[i];
  }
  return order[keep - 1];  // u rounds up to the total: the last kept candidate
}

}  // namespace hlm
