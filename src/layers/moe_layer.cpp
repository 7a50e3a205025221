// Routed experts: routing (softmax, top-k, renormalisation) and the expert-grouped forward; contract in moe_layer.h.
#include "layers/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "ops/matmul/matmul.h"
#include "ops/moe_dispatch/moe_dispatch.h"

namespace hlm {

void moe_select(const float* p, const MoeDims& d, int32_t* expert, float* weight) {
  const int64_t E = d.experts, k = d.top_k;
  std::vector<int32_t> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  float chosen = 0.0f;  // float, as HF sums the k fp32 probabilities
  for (int64_t j = 0; j < k; ++j) chosen += p[order[j]];
  for (int64_t j = 0; j < k; ++j) {
    expert[j] = order[j];
    weight[j] = d.norm_topk_prob ? p[order[j]] / chosen : p[order[j]];
  }
}

MoeRoute moe_route(const float* logits, const MoeDims& d, int64_t T, float* probs) {
  const int64_t E = d.experts, k = d.top_k;
  HLM_CHECK_INPUT(E > 0 && k > 0 && k <= E, "moe: top_k ", k, " with ", E, " experts");
  MoeRoute route;
  route.expert.resize(static_cast<size_t>(T * k));
  route.weight.resize(static_cast<size_t>(T * k));
  std::vector<float> p(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* row = logits + t * E;
    const float max = *std::max_element(row, row + E);
    double sum = 0.0;  // softmax over all E experts (fp32 values, the normaliser summed in double)
    for (int64_t e = 0; e < E; ++e) sum += p[e] = std::exp(row[e] - max);
    for (int64_t e = 0; e < E; ++e) p[e] = static_cast<float>(p[e] / sum);
    if (probs != nullptr) std::copy(p.begin(), p.end(), probs + t * E);
    moe_select(p.data(), d, route.expert.data() + t * k, route.weight.data() + t * k);
  }
  return route;
}

MoeRoute moe_route_sigmoid_grouped(const float* logits, const float* expert_bias, const MoeDims& d, int64_t T,
                                   float* scores) {
  HLM_CHECK_INPUT(expert_bias != nullptr, "moe: the sigmoid router needs mlp.gate.expert_bias");
  MoeRoute route;
  route.expert.resize(static_cast<size_t>(T * d.top_k));
  route.weight.resize(static_cast<size_t>(T * d.top_k));
  // The op folder's reference is the rule (fp32 sigmoid and biased scores, as HF's fp32 router); the CUDA kernel is
  // checked against it.
  moe_route_sigmoid_grouped_ref(route.expert.data(), route.weight.data(), scores, logits, expert_bias, T, d.experts,
                                d.top_k, d.n_group, d.topk_group, d.norm_topk_prob, d.routed_scaling);
  return route;
}

void moe_layer_forward(float* out, const float* x, const MoeWeights& w, const MoeDims& d, int64_t T, Arena& arena,
                       float* router_probs) {
  HLM_CHECK_INPUT(w.router.weight.defined() && w.router.weight.rank() == 2 && w.router.out_features() == d.experts,
                  "moe: router weight must be [", d.experts, ", hidden]");
  HLM_CHECK_INPUT(static_cast<int64_t>(w.experts.size()) == d.experts, "moe: ", w.experts.size(),
                  " experts loaded, config says ", d.experts);
  const int64_t H = w.router.in_features(), E = d.experts, k = d.top_k;
  const Arena::Mark mark = arena.mark();
  Tensor logits = arena.tensor({T, E});
  linear_forward(logits.f32(), x, w.router, T);
  const MoeRoute route =
      d.sigmoid_grouped
          ? moe_route_sigmoid_grouped(logits.f32(), w.expert_bias.defined() ? w.expert_bias.f32() : nullptr, d, T,
                                      router_probs)
          : moe_route(logits.f32(), d, T, router_probs);

  // Tokens of each expert, in token order, with the weight of that expert for the token.
  std::vector<std::vector<std::pair<int64_t, float>>> assigned(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j)
      assigned[static_cast<size_t>(route.expert[t * k + j])].emplace_back(t, route.weight[t * k + j]);

  std::fill(out, out + T * H, 0.0f);
  Tensor gathered = arena.tensor({T, H});
  Tensor expert_out = arena.tensor({T, H});
  for (int64_t e = 0; e < E; ++e) {
    const auto& tokens = assigned[static_cast<size_t>(e)];
    if (tokens.empty()) continue;
    const int64_t n = static_cast<int64_t>(tokens.size());
    for (int64_t r = 0; r < n; ++r) std::copy_n(x + tokens[r].first * H, H, gathered.f32() + r * H);
    mlp_layer_forward(expert_out.f32(), gathered.f32(), w.experts[static_cast<size_t>(e)], n, arena);
    for (int64_t r = 0; r < n; ++r) {
      float* dst = out + tokens[r].first * H;
      const float* src = expert_out.f32() + r * H;
      const float weight = tokens[r].second;
      for (int64_t h = 0; h < H; ++h) dst[h] += src[h] * weight;
    }
  }
  if (w.has_ungated_shared_expert()) {  // bailing: out += shared_expert(x)
    Tensor shared = arena.tensor({T, H});
    mlp_layer_forward(shared.f32(), x, w.shared_expert, T, arena);
    for (int64_t j = 0; j < T * H; ++j) out[j] += shared.f32()[j];
  }
  if (w.has_shared_expert()) {  // out += sigmoid(x · w_sgᵀ) · shared_expert(x), rounded to float as HF's fp32 product
    HLM_CHECK_INPUT(w.shared_expert_gate.weight.rank() == 2 && w.shared_expert_gate.out_features() == 1 &&
                        w.shared_expert_gate.in_features() == H,
                    "moe: shared_expert_gate weight must be [1, ", H, "]");
    Tensor shared = arena.tensor({T, H});
    Tensor gate = arena.tensor({T, 1});
    mlp_layer_forward(shared.f32(), x, w.shared_expert, T, arena);
    linear_forward(gate.f32(), x, w.shared_expert_gate, T);
    for (int64_t t = 0; t < T; ++t) {
      const float s = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(gate.f32()[t]))));
      for (int64_t h = 0; h < H; ++h) out[t * H + h] += s * shared.f32()[t * H + h];
    }
  }
  arena.release(mark);
}

}  // namespace hlm
