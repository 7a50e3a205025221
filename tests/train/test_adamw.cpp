// AdamW (train/adamw.h) against the torch.optim.AdamW formula evaluated by hand in double, for three steps on two
// tiny parameters in two groups (different lr and weight decay; the lr changes between steps as a schedule would).
// Tolerance: the optimizer keeps p, m, v in fp32, rounding p once per step (≤ 0.5 ulp = 6e-8 relative) and m, v once
// per step (which moves the update lr·m̂/(√v̂+eps) by ~1e-7 relative, i.e. ~1e-9 absolute at lr ≤ 3e-2); after
// three steps |p − p_ref| ≤ 4e-7·|p_ref| + 1e-8 covers this with margin, while a missing bias correction, eps in the
// wrong place or decay applied with the wrong lr moves p by ≥ 1e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "train/adamw.h"

using namespace hlm;

namespace {

Tensor make_tensor(const std::vector<float>& values) {
  Tensor t = Tensor::zeros({static_cast<int64_t>(values.size())});
  std::memcpy(t.f32(), values.data(), values.size() * sizeof(float));
  return t;
}

void set_values(const Tensor& t, const std::vector<float>& values) {
  std::memcpy(t.f32(), values.data(), values.size() * sizeof(float));
}

// torch.optim.AdamW, single-tensor path, in double: one parameter's state.
struct ReferenceAdamW {
  std::vector<double> p, m, v;
  void step(const std::vector<float>& g, double lr, double wd, int t, double b1 = 0.9, double b2 = 0.999,
            double eps = 1e-8) {
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1.0 - lr * wd;                        // param.mul_(1 - lr * weight_decay)
      m[i] = b1 * m[i] + (1.0 - b1) * g[i];         // exp_avg.lerp_(grad, 1 - beta1)
      v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
      const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
      p[i] -= lr / bc1 * m[i] / denom;  // param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)
    }
  }
};

TEST(AdamW, MatchesTorchFormulaForThreeSteps) {
  const std::vector<float> w0 = {0.5f, -1.25f, 2.0f, 0.75f, 3.0f}, n0 = {1.0f, 0.9f, 1.1f};
  Tensor w = make_tensor(w0), gw = make_tensor(std::vector<float>(5, 0.0f));
  Tensor n = make_tensor(n0), gn = make_tensor(std::vector<float>(3, 0.0f));
  std::vector<AdamWGroup> groups = {{"rec", 1e-2, 0.1, 0.0}, {"rest_no_decay", 3e-2, 0.0, 0.0}};
  AdamW opt(groups, {{"model.layers.0.mlp.up_proj.weight", w, gw, 0}, {"model.norm.weight", n, gn, 1}});

  // Gradients per step: a zero gradient (decay only), a tiny one (1e-9, where eps = 1e-8 dominates the denominator),
  // sign changes between steps.
  const std::vector<std::vector<float>> grads_w = {{0.2f, -0.1f, 0.0f, 1e-9f, 5.0f},
                                                   {-0.3f, -0.1f, 0.0f, 1e-9f, 4.0f},
                                                   {0.05f, 0.2f, 0.0f, -1e-9f, -6.0f}};
  const std::vector<std::vector<float>> grads_n = {{0.01f, -0.02f, 0.3f}, {0.02f, 0.0f, 0.3f}, {-0.01f, 0.02f, 0.1f}};
  const double lr_factor[3] = {1.0, 0.5, 0.25};

  ReferenceAdamW ref_w{{w0.begin(), w0.end()}, std::vector<double>(5), std::vector<double>(5)};
  ReferenceAdamW ref_n{{n0.begin(), n0.end()}, std::vector<double>(3), std::vector<double>(3)};
  for (int t = 1; t <= 3; ++t) {
    opt.groups()[0].lr = 1e-2 * lr_factor[t - 1];
    opt.groups()[1].lr = 3e-2 * lr_factor[t - 1];
    set_values(gw, grads_w[t - 1]);
    set_values(gn, grads_n[t - 1]);
    opt.step();
    ref_w.step(grads_w[t - 1], 1e-2 * lr_factor[t - 1], 0.1, t);
    ref_n.step(grads_n[t - 1], 3e-2 * lr_factor[t - 1], 0.0, t);
    double max_err = 0.0;
    for (int i = 0; i < 5; ++i) {
      const double err = std::abs(w.f32()[i] - ref_w.p[i]);
      max_err = std::max(max_err, err / (std::abs(ref_w.p[i]) + 1e-8));
      EXPECT_LE(err, 4e-7 * std::abs(ref_w.p[i]) + 1e-8) << "step " << t << " element " << i;
      // m is rounded to fp32 each step (≤ 0.5 ulp of |m| ≤ max_s |g_s|), so compare against the gradient scale.
      double g_max = 0.0;
      for (const auto& gs : grads_w) g_max = std::max(g_max, std::abs(static_cast<double>(gs[i])));
      EXPECT_LE(std::abs(opt.exp_avg(0).f32()[i] - ref_w.m[i]), 2e-7 * g_max) << "step " << t << " element " << i;
    }
    for (int i = 0; i < 3; ++i)
      EXPECT_LE(std::abs(n.f32()[i] - ref_n.p[i]), 4e-7 * std::abs(ref_n.p[i]) + 1e-8) << "step " << t;
    std::printf("AdamW step %d: max relative error of p %.2e\n", t, max_err);
  }
  EXPECT_EQ(opt.step_count(), 3);

  // Step 1 by hand for element 0: m̂ = g, v̂ = g², so p1 = p0·(1 − lr·wd) − lr·g/(|g| + eps)
  //   = 0.5·0.999 − 0.01·0.2/(0.2 + 1e-8) = 0.4995 − 0.0099999995 = 0.4895000005.
  ReferenceAdamW one{{0.5}, {0.0}, {0.0}};
  one.step({0.2f}, 1e-2, 0.1, 1);
  EXPECT_NEAR(one.p[0], 0.4895000005, 1e-9);  // float 0.2f ≠ 0.2 only moves g/(|g|+eps) by ~1e-15
}

TEST(AdamW, DefaultWeightDecayRule) {
  EXPECT_TRUE(default_weight_decay("model.embed_tokens.weight"));
  EXPECT_TRUE(default_weight_decay("lm_head.weight"));
  EXPECT_TRUE(default_weight_decay("model.layers.3.self_attn.q_proj.weight"));
  EXPECT_TRUE(default_weight_decay("model.layers.3.mlp.down_proj.weight"));
  EXPECT_TRUE(default_weight_decay("model.layers.1.linear_attn.q_conv1d.weight"));
  EXPECT_TRUE(default_weight_decay("model.layers.1.linear_attn.a_proj.weight"));
  EXPECT_FALSE(default_weight_decay("model.norm.weight"));
  EXPECT_FALSE(default_weight_decay("model.layers.0.input_layernorm.weight"));
  EXPECT_FALSE(default_weight_decay("model.layers.0.post_attention_layernorm.weight"));
  EXPECT_FALSE(default_weight_decay("model.layers.0.self_attn.q_norm.weight"));
  EXPECT_FALSE(default_weight_decay("model.layers.0.attention_layer_norm.weight"));
  EXPECT_FALSE(default_weight_decay("model.layers.1.linear_attn.o_norm.weight"));
  EXPECT_FALSE(default_weight_decay("model.layers.1.linear_attn.norm.weight"));
  EXPECT_FALSE(default_weight_decay("model.layers.1.linear_attn.A_log"));
  EXPECT_FALSE(default_weight_decay("model.layers.1.linear_attn.dt_bias"));
  EXPECT_FALSE(default_weight_decay("model.layers.2.self_attn.q_proj.bias"));
}

TEST(AdamW, StateRoundTripAndInputChecks) {
  Tensor p = make_tensor({1.0f, 2.0f}), g = make_tensor({0.5f, -0.5f});
  AdamW a({{"g", 1e-3, 0.01, 1e-3}}, {{"x", p, g, 0}});
  a.step();
  Tensor q = make_tensor({1.0f, 2.0f});
  AdamW b({{"g", 1e-3, 0.01, 1e-3}}, {{"x", q, g, 0}});
  set_values(q, {p.f32()[0], p.f32()[1]});
  b.set_state(0, a.exp_avg(0), a.exp_avg_sq(0));
  b.set_step_count(a.step_count());
  a.step();
  b.step();
  EXPECT_EQ(p.f32()[0], q.f32()[0]);  // resumed optimizer is bit-identical
  EXPECT_EQ(p.f32()[1], q.f32()[1]);

  Tensor wrong = make_tensor({0.0f, 0.0f, 0.0f});
  EXPECT_THROW(AdamW({{"g", 1e-3, 0.0, 0.0}}, {{"x", p, wrong, 0}}), Error);   // grad shape
  EXPECT_THROW(AdamW({{"g", 1e-3, 0.0, 0.0}}, {{"x", p, g, 1}}), Error);       // group index
  EXPECT_THROW(AdamW({{"g", 1e-3, 0.0, 0.0}}, {{"x", p, g, 0}, {"x", q, g, 0}}), Error);  // duplicate name
}

// moments_initial(): true from construction until a step or a state setter (the GPU attach skips uploading initial
// 8-bit moments on it), in both state formats; set_step_count alone leaves the moments as they are.
TEST(AdamW, MomentsInitialUntilAStepOrAStateSetter) {
  for (const AdamWStateFormat state : {AdamWStateFormat::F32, AdamWStateFormat::Q8}) {
    AdamWConfig config;
    config.state = state;
    Tensor p = make_tensor({1.0f, 2.0f}), g = make_tensor({0.5f, -0.5f});
    AdamW a({{"g", 1e-3, 0.01, 1e-3}}, {{"x", p, g, 0}}, config);
    EXPECT_TRUE(a.moments_initial());
    a.set_step_count(3);
    EXPECT_TRUE(a.moments_initial()) << "set_step_count does not touch the moments";
    a.step();
    EXPECT_FALSE(a.moments_initial());

    Tensor q = make_tensor({1.0f, 2.0f});
    AdamW b({{"g", 1e-3, 0.01, 1e-3}}, {{"x", q, g, 0}}, config);
    b.set_state(0, a.exp_avg(0), a.exp_avg_sq(0));
    EXPECT_FALSE(b.moments_initial());
    if (state == AdamWStateFormat::Q8) {
      Tensor r = make_tensor({1.0f, 2.0f});
      AdamW c({{"g", 1e-3, 0.01, 1e-3}}, {{"x", r, g, 0}}, config);
      c.set_q8_state(0, a.q8_state(0));
      EXPECT_FALSE(c.moments_initial());
      // What the attach relies on: the initial 8-bit moments are the codebooks' zero codes and zero scales.
      AdamW d({{"g", 1e-3, 0.01, 1e-3}}, {{"x", r, g, 0}}, config);
      const AdamWQ8State& s0 = d.q8_state(0);
      for (uint8_t code : s0.q_m) EXPECT_EQ(code, q8_codebook_signed().zero);
      for (uint8_t code : s0.q_v) EXPECT_EQ(code, q8_codebook_unsigned().zero);
      for (float scale : s0.absmax_m) EXPECT_EQ(scale, 0.0f);
      for (float scale : s0.absmax_v) EXPECT_EQ(scale, 0.0f);
    }
  }
}

}  // namespace
