// Routed-expert FFN backward; the derivation is in moe_layer_backward.h.
#include "layers/moe_layer_backward.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/matmul/matmul.h"

namespace hlm {

MoeGrads moe_grads_like(const MoeWeights& w) {
  MoeGrads g;
  g.router.weight = Tensor::zeros(w.router.weight.shape());
  for (const MlpWeights& e : w.experts) g.experts.push_back(mlp_grads_like(e));
  if (w.has_shared_expert()) {
    g.shared_expert = mlp_grads_like(w.shared_expert);
    g.shared_expert_gate.weight = Tensor::zeros(w.shared_expert_gate.weight.shape());
  }
  return g;
}

void moe_layer_backward(float* dx, MoeGrads& grads, const float* d_out, const float* x, const MoeWeights& w,
                        const MoeDims& d, int64_t T, Arena& arena) {
  HLM_CHECK_INPUT(!d.sigmoid_grouped && !w.has_ungated_shared_expert(),
                  "moe backward: the sigmoid group-limited router and the ungated shared expert (bailing) have no "
                  "backward (training is not supported)");
  HLM_CHECK_INPUT(static_cast<int64_t>(w.experts.size()) == d.experts &&
                      static_cast<int64_t>(grads.experts.size()) == d.experts && grads.router.weight.defined(),
                  "moe backward: weights or gradients do not hold ", d.experts, " experts");
  const int64_t H = w.router.in_features(), E = d.experts, k = d.top_k;
  const Arena::Mark mark = arena.mark();
  Tensor logits = arena.tensor({T, E});
  Tensor probs = arena.tensor({T, E});
  linear_forward(logits.f32(), x, w.router, T);
  const MoeRoute route = moe_route(logits.f32(), d, T, probs.f32());

  std::vector<std::vector<std::pair<int64_t, int64_t>>> assigned(static_cast<size_t>(E));  // (token, slot j)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) assigned[static_cast<size_t>(route.expert[t * k + j])].emplace_back(t, j);

  std::fill(dx, dx + T * H, 0.0f);
  std::vector<double> g(static_cast<size_t>(T * k), 0.0);  // d loss / d w_tj
  Tensor xs = arena.tensor({T, H}), ys = arena.tensor({T, H}), dys = arena.tensor({T, H}), dxs = arena.tensor({T, H});
  for (int64_t e = 0; e < E; ++e) {
    const auto& tokens = assigned[static_cast<size_t>(e)];
    if (tokens.empty()) continue;
    const int64_t n = static_cast<int64_t>(tokens.size());
    for (int64_t r = 0; r < n; ++r) {
      const int64_t t = tokens[r].first;
      const float weight = route.weight[t * k + tokens[r].second];
      std::copy_n(x + t * H, H, xs.f32() + r * H);
      for (int64_t h = 0; h < H; ++h) dys.f32()[r * H + h] = weight * d_out[t * H + h];
    }
    const MlpWeights& ew = w.experts[static_cast<size_t>(e)];
    mlp_layer_forward(ys.f32(), xs.f32(), ew, n, arena);
    MlpGrads eg;  // views of this expert's gradient tensors (shared storage: the backward's += lands in grads)
    static_cast<MlpWeights&>(eg) = grads.experts[static_cast<size_t>(e)];
    mlp_layer_backward(dxs.f32(), eg, dys.f32(), xs.f32(), ew, n, arena);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t t = tokens[r].first;
      double dot = 0.0;
      for (int64_t h = 0; h < H; ++h) {
        dx[t * H + h] += dxs.f32()[r * H + h];
        dot += static_cast<double>(d_out[t * H + h]) * ys.f32()[r * H + h];
      }
      g[t * k + tokens[r].second] = dot;
    }
  }

  // Through the weights and the softmax to the router logits.
  Tensor dlogits = arena.tensor({T, E});
  std::vector<double> dp(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* p = probs.f32() + t * E;
    std::fill(dp.begin(), dp.end(), 0.0);
    double chosen = 0.0, gw = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      chosen += p[route.expert[t * k + j]];
      gw += g[t * k + j] * route.weight[t * k + j];
    }
    for (int64_t j = 0; j < k; ++j)
      dp[route.expert[t * k + j]] = d.norm_topk_prob ? (g[t * k + j] - gw) / chosen : g[t * k + j];
    double pdp = 0.0;
    for (int64_t e = 0; e < E; ++e) pdp += p[e] * dp[e];
    for (int64_t e = 0; e < E; ++e) dlogits.f32()[t * E + e] = static_cast<float>(p[e] * (dp[e] - pdp));
  }
  matmul_backward<float>(dxs.f32(), grads.router.weight.f32(), nullptr, dlogits.f32(), x, w.router.weight.f32(), T,
                         E, H);
  for (int64_t j = 0; j < T * H; ++j) dx[j] += dxs.f32()[j];

  if (w.has_shared_expert()) {
    HLM_CHECK_INPUT(grads.has_shared_expert() && grads.shared_expert.down_proj.weight.defined(),
                    "moe backward: the gradients lack the shared expert");
    Tensor shared = arena.tensor({T, H}), gate = arena.tensor({T, 1}), dgate = arena.tensor({T, 1});
    mlp_layer_forward(shared.f32(), x, w.shared_expert, T, arena);
    linear_forward(gate.f32(), x, w.shared_expert_gate, T);
    for (int64_t t = 0; t < T; ++t) {
      const double sg = 1.0 / (1.0 + std::exp(-static_cast<double>(gate.f32()[t])));
      double dot = 0.0;
      for (int64_t h = 0; h < H; ++h) {
        dot += static_cast<double>(d_out[t * H + h]) * shared.f32()[t * H + h];
        dys.f32()[t * H + h] = static_cast<float>(sg * d_out[t * H + h]);
      }
      dgate.f32()[t] = static_cast<float>(dot * sg * (1.0 - sg));
    }
    MlpGrads sg;  // views of the shared expert's gradient tensors
    static_cast<MlpWeights&>(sg) = grads.shared_expert;
    mlp_layer_backward(dxs.f32(), sg, dys.f32(), x, w.shared_expert, T, arena);
    for (int64_t j = 0; j < T * H; ++j) dx[j] += dxs.f32()[j];
    matmul_backward<float>(dxs.f32(), grads.shared_expert_gate.weight.f32(), nullptr, dgate.f32(), x,
                           w.shared_expert_gate.weight.f32(), T, 1, H);
    for (int64_t j = 0; j < T * H; ++j) dx[j] += dxs.f32()[j];
  }
  arena.release(mark);
}

}  // namespace hlm
