// A routed-expert layer's backward against central differences, shared by the MoE families' tests (qwen3_moe,
// qwen3_5's shared expert). The layer runs in fp32 on random weights: T tokens of width H, E experts of width F, an
// optional shared expert of width S with its sigmoid gate. The loss is L = Σ d_out · out summed in double; step 1e-2
// and tolerance 2e-3 · max(1, max |grad|) cover fp32 rounding (truncation O(eps²), rounding ~1e-6 / eps, both well
// below it). An element whose perturbation changes some token's expert choice is skipped (the loss is not
// differentiable across a switch); `skipped` and `checked` count them so that a test can require few skips.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "layers/linear.h"
#include "layers/moe_layer.h"
#include "layers/moe_layer_backward.h"

namespace hlm::test {

struct MoeFdCheck {
  int64_t T, H;
  MoeDims d;
  MoeWeights w;
  MoeGrads g;
  Tensor x, d_out, dx;
  std::vector<int32_t> base_routes;  // each token's experts at the unperturbed weights
  int checked = 0, skipped = 0;
  Arena arena;

  // Draws the weights (stream, stream + 1, … in the order router, experts, shared expert, its gate, x, d_out) and
  // runs the backward once. shared_width 0: no shared expert.
  MoeFdCheck(int64_t tokens, int64_t hidden, int64_t expert_width, MoeDims dims, uint64_t stream,
             int64_t shared_width = 0)
      : T(tokens), H(hidden), d(dims) {
    const auto randn = [&](Shape s, float std) {
      Tensor t = Tensor::zeros(s);
      rng_fill_normal(t.f32(), static_cast<uint64_t>(t.numel()), 0.0f, std, 7, stream++);
      return t;
    };
    const int64_t F = expert_width, S = shared_width;
    w.router.weight = randn({d.experts, H}, 1.0f);
    for (int64_t e = 0; e < d.experts; ++e)
      w.experts.push_back({{randn({F, H}, 0.5f), {}}, {randn({F, H}, 0.5f), {}}, {randn({H, F}, 0.5f), {}}});
    if (S > 0) {
      w.shared_expert = {{randn({S, H}, 0.5f), {}}, {randn({S, H}, 0.5f), {}}, {randn({H, S}, 0.5f), {}}};
      w.shared_expert_gate.weight = randn({1, H}, 0.7f);
    }
    x = randn({T, H}, 1.0f);
    d_out = randn({T, H}, 1.0f);
    g = moe_grads_like(w);
    dx = Tensor::zeros({T, H});
    moe_layer_backward(dx.f32(), g, d_out.f32(), x.f32(), w, d, T, arena);
    base_routes = routes();
  }

  std::vector<int32_t> routes() {
    Tensor logits = Tensor::zeros({T, d.experts});
    linear_forward(logits.f32(), x.f32(), w.router, T);
    return moe_route(logits.f32(), d, T).expert;
  }

  double loss() {
    Tensor out = Tensor::zeros({T, H});
    moe_layer_forward(out.f32(), x.f32(), w, d, T, arena);
    double l = 0;
    for (int64_t j = 0; j < T * H; ++j) l += static_cast<double>(out.f32()[j]) * d_out.f32()[j];
    return l;
  }

  // Every element of `param` (a tensor of w, or x) against `grad`, its analytic gradient; `name` labels failures.
  void check(Tensor& param, const Tensor& grad, const std::string& name) {
    double max_grad = 1.0;
    for (int64_t j = 0; j < grad.numel(); ++j) max_grad = std::max(max_grad, std::abs(double(grad.f32()[j])));
    for (int64_t j = 0; j < param.numel(); ++j) {
      const float saved = param.f32()[j];
      const float eps = 1e-2f;
      param.f32()[j] = saved + eps;
      const double lp = loss();
      const bool same_p = routes() == base_routes;
      param.f32()[j] = saved - eps;
      const double lm = loss();
      const bool same_m = routes() == base_routes;
      param.f32()[j] = saved;
      if (!same_p || !same_m) {
        ++skipped;
        continue;
      }
      ++checked;
      EXPECT_NEAR(grad.f32()[j], (lp - lm) / (2.0 * eps), 2e-3 * max_grad) << name << "[" << j << "]";
    }
  }
};

}  // namespace hlm::test
