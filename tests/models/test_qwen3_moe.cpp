// Qwen3-MoE (qwen3_moe): config keys and the dense/MoE layer schedule, the routed-expert FFN against an independent
// double-precision recomputation (softmax over all experts, top-k, optional renormalisation, Σ w·SwiGLU), routing
// ties, the router-distribution hook, per-expert tensor names through save/load, the layer backward against finite
// differences and training through the whole decoder.
// HF parity itself is GoldenParity's qwen3_moe_tiny case (tools/goldens/make_goldens.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <nlohmann/json.hpp>

#include "layers/moe_layer.h"
#include "models/checkpoint.h"
#include "models/model.h"
#include "models/model_train.h"
#include "core/rng.h"
#include "support/moe_fd_check.h"
#include "support/run_binary.h"
#include "train/checkpoint_io.h"

using namespace hlm;

namespace {

// 4 layers: layer 0 dense (mlp_only_layers), 1 and 3 MoE ((i+1) % 2 == 0), 2 dense by the sparse step. GQA 4:2,
// heads·head_dim (64) != hidden (32) as Qwen3 allows.
nlohmann::json moe_config(bool norm_topk_prob) {
  return {{"model_type", "qwen3_moe"},      {"vocab_size", 120},           {"hidden_size", 32},
          {"intermediate_size", 48},        {"num_hidden_layers", 4},      {"num_attention_heads", 4},
          {"num_key_value_heads", 2},       {"head_dim", 16},               {"num_experts", 6},
          {"num_experts_per_tok", 3},       {"moe_intermediate_size", 16}, {"norm_topk_prob", norm_topk_prob},
          {"decoder_sparse_step", 2},       {"mlp_only_layers", {0}},      {"router_aux_loss_coef", 0.001},
          {"tie_word_embeddings", false}};
}

TokenBatch two_sequences() {
  TokenBatch b;
  b.add_sequence({5, 17, 110, 3, 99, 42, 7, 64, 12});
  b.add_sequence({1, 2, 3, 4, 5, 6, 7});
  return b;
}

// Double-precision FFN of one layer from its normalised input x̂ [T, H].
std::vector<double> naive_ffn(const ModelConfig& c, const DecoderLayerWeights& layer, const std::vector<double>& xn,
                              int64_t T, bool moe) {
  const int64_t H = c.hidden_size;
  const auto swiglu = [&](const MlpWeights& m, const double* x, double* y) {
    const int64_t F = m.gate_proj.weight.dim(0);
    std::vector<double> h(static_cast<size_t>(F));
    for (int64_t f = 0; f < F; ++f) {
      double g = 0, u = 0;
      for (int64_t k = 0; k < H; ++k) {
        g += static_cast<double>(m.gate_proj.weight.f32()[f * H + k]) * x[k];
        u += static_cast<double>(m.up_proj.weight.f32()[f * H + k]) * x[k];
      }
      h[f] = g / (1.0 + std::exp(-g)) * u;
    }
    for (int64_t o = 0; o < H; ++o) {
      double s = 0;
      for (int64_t f = 0; f < F; ++f) s += static_cast<double>(m.down_proj.weight.f32()[o * F + f]) * h[f];
      y[o] = s;
    }
  };
  std::vector<double> out(static_cast<size_t>(T * H), 0.0), y(static_cast<size_t>(H));
  for (int64_t t = 0; t < T; ++t) {
    const double* x = xn.data() + t * H;
    if (!moe) {
      swiglu(layer.mlp, x, out.data() + t * H);
      continue;
    }
    const int64_t E = c.moe->num_experts, k = c.moe->num_experts_per_tok;
    std::vector<double> p(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      double s = 0;
      for (int64_t j = 0; j < H; ++j) s += static_cast<double>(layer.moe.router.weight.f32()[e * H + j]) * x[j];
      p[e] = s;
    }
    const double mx = *std::max_element(p.begin(), p.end());
    double z = 0;
    for (double& v : p) z += v = std::exp(v - mx);
    for (double& v : p) v /= z;
    std::vector<int> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    double chosen = 0;
    for (int64_t j = 0; j < k; ++j) chosen += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      const double w = c.moe->norm_topk_prob ? p[order[j]] / chosen : p[order[j]];
      swiglu(layer.moe.experts[static_cast<size_t>(order[j])], x, y.data());
      for (int64_t o = 0; o < H; ++o) out[t * H + o] += w * y[o];
    }
  }
  return out;
}

}  // namespace

TEST(Qwen3Moe, ConfigSchedulesDenseAndExpertLayers) {
  const ModelConfig c = parse_model_config(moe_config(true), "test");
  EXPECT_EQ(c.architecture, Architecture::Qwen3Moe);
  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(c.moe->num_experts, 6);
  EXPECT_EQ(c.moe->num_experts_per_tok, 3);
  EXPECT_TRUE(c.moe->norm_topk_prob);
  EXPECT_EQ(c.ffn_kinds, (std::vector<FfnKind>{FfnKind::Dense, FfnKind::Moe, FfnKind::Dense, FfnKind::Moe}));
  EXPECT_TRUE(c.unknown_keys.empty()) << c.unknown_keys.front();

  nlohmann::json defaults = moe_config(false);
  for (const char* key : {"norm_topk_prob", "decoder_sparse_step", "mlp_only_layers", "head_dim"}) defaults.erase(key);
  const ModelConfig d = parse_model_config(defaults, "test");
  EXPECT_FALSE(d.moe->norm_topk_prob);  // Qwen3MoeConfig's default
  EXPECT_EQ(d.head_dim, 32 / 4);        // no head_dim field in the class: hidden / heads
  for (FfnKind k : d.ffn_kinds) EXPECT_EQ(k, FfnKind::Moe);  // step 1, no dense-only layers

  nlohmann::json too_many = moe_config(false);
  too_many["num_experts_per_tok"] = 7;
  EXPECT_THROW(parse_model_config(too_many, "test"), Error);
  nlohmann::json bad_layer = moe_config(false);
  bad_layer["mlp_only_layers"] = {4};
  EXPECT_THROW(parse_model_config(bad_layer, "test"), Error);
  nlohmann::json none = moe_config(false);
  none["num_experts"] = 0;  // HF: no expert layers at all
  for (FfnKind k : parse_model_config(none, "test").ffn_kinds) EXPECT_EQ(k, FfnKind::Dense);
}

TEST(Qwen3Moe, RoutingPicksTopKWithLowerIndexOnTiesAndRenormalises) {
  const float logits[2 * 4] = {0.0f, 1.0f, 1.0f, 0.5f,   // experts 1 and 2 tie at the top
                               2.0f, 2.0f, 2.0f, 2.0f};  // all tie
  float probs[8];
  const MoeRoute plain = moe_route(logits, {4, 2, false}, 2, probs);
  EXPECT_EQ(plain.expert, (std::vector<int32_t>{1, 2, 0, 1}));
  EXPECT_FLOAT_EQ(plain.weight[3], 0.25f);  // softmax probability as it is
  EXPECT_FLOAT_EQ(probs[4] + probs[5] + probs[6] + probs[7], 1.0f);
  const MoeRoute norm = moe_route(logits, {4, 2, true}, 2);
  EXPECT_FLOAT_EQ(norm.weight[0], 0.5f);  // two equal picks renormalised
  EXPECT_FLOAT_EQ(norm.weight[2] + norm.weight[3], 1.0f);
}

// Every layer's FFN output (mlp_delta) against the naive recomputation from that layer's attn_out, both settings of
// norm_topk_prob. Tolerance 1e-5 relative to the largest |value|: fp32 GEMMs of length ≤ 48 against double.
TEST(Qwen3Moe, FfnMatchesNaiveRecomputation) {
  for (const bool norm_topk : {false, true}) {
    const ModelConfig c = parse_model_config(moe_config(norm_topk), "test");
    Model model = Model::create(c, 5);
    // Larger router weights than the 0.02 init, so the softmax is far from uniform and the top-k choice matters.
    for (int i : {1, 3})
      for (int64_t j = 0; j < model.weights().layers[i].moe.router.weight.numel(); ++j)
        model.mutable_weights().layers[i].moe.router.weight.f32()[j] *= 60.0f;
    std::map<std::string, Tensor> cap;
    const Capture capture = [&](CapturePoint p, int layer, const Tensor& v) {
      cap[std::string(capture_point_info(p).name) + "." + std::to_string(layer)] = v.clone();
    };
    model.forward(two_sequences(), {.all_logits = true}, capture);
    const int64_t T = two_sequences().total_tokens(), H = c.hidden_size;
    for (int i = 0; i < 4; ++i) {
      const Tensor& attn_out = cap.at("attn_out." + std::to_string(i));
      const Tensor& got = cap.at("mlp_delta." + std::to_string(i));
      const DecoderLayerWeights& layer = model.weights().layers[static_cast<size_t>(i)];
      std::vector<double> xn(static_cast<size_t>(T * H));
      for (int64_t t = 0; t < T; ++t) {
        double ss = 0;
        for (int64_t h = 0; h < H; ++h) ss += std::pow(static_cast<double>(attn_out.f32()[t * H + h]), 2);
        const double r = 1.0 / std::sqrt(ss / static_cast<double>(H) + c.rms_norm_eps);
        for (int64_t h = 0; h < H; ++h)
          xn[t * H + h] = attn_out.f32()[t * H + h] * r * layer.post_attention_layernorm.f32()[h];
      }
      const std::vector<double> want = naive_ffn(c, layer, xn, T, c.moe_layer(i));
      double scale = 0, err = 0;
      for (int64_t j = 0; j < T * H; ++j) {
        scale = std::max(scale, std::abs(want[j]));
        err = std::max(err, std::abs(want[j] - static_cast<double>(got.f32()[j])));
      }
      ASSERT_GT(scale, 0.0);
      EXPECT_LE(err / scale, 1e-5) << "layer " << i << " norm_topk_prob " << norm_topk;
    }
  }
}

TEST(Qwen3Moe, RouterDistributionHookSeesEveryExpertLayer) {
  const ModelConfig c = parse_model_config(moe_config(false), "test");
  Model model = Model::create(c, 9);
  std::map<int, std::vector<float>> probs;
  ForwardOptions options;
  options.router_probs = [&](int layer, int64_t T, int64_t E) {
    probs[layer].assign(static_cast<size_t>(T * E), -1.0f);
    return probs[layer].data();
  };
  model.forward(two_sequences(), options);
  ASSERT_EQ(probs.size(), 2u);
  for (const auto& [layer, p] : probs) {
    EXPECT_TRUE(layer == 1 || layer == 3) << layer;
    for (size_t t = 0; t < p.size() / 6; ++t) {
      double s = 0;
      for (size_t e = 0; e < 6; ++e) s += p[t * 6 + e];
      EXPECT_NEAR(s, 1.0, 1e-6);
    }
  }
}

TEST(Qwen3Moe, SaveLoadUsesPerExpertNamesAndIsExact) {
  const ModelConfig c = parse_model_config(moe_config(true), "test");
  Model created = Model::create(c, 21);
  test::ScratchDir scratch("qwen3-moe");
  created.save(scratch.path());
  const Checkpoint ck = Checkpoint::open(scratch.path());
  EXPECT_NE(ck.find("model.layers.1.mlp.gate.weight"), nullptr);
  EXPECT_NE(ck.find("model.layers.3.mlp.experts.5.down_proj.weight"), nullptr);
  EXPECT_EQ(ck.find("model.layers.1.mlp.gate_proj.weight"), nullptr);  // no dense MLP in an expert layer
  EXPECT_NE(ck.find("model.layers.2.mlp.gate_proj.weight"), nullptr);
  EXPECT_EQ(ck.find("model.layers.0.mlp.experts.0.up_proj.weight"), nullptr);
  EXPECT_EQ(ck.find("model.layers.3.mlp.experts.5.down_proj.weight")->shape, (Shape{32, 16}));

  Model loaded = Model::load(scratch.path());
  EXPECT_TRUE(loaded.unused_tensors().empty());
  EXPECT_TRUE(loaded.config().moe->norm_topk_prob);
  EXPECT_EQ(loaded.config().ffn_kinds, c.ffn_kinds);
  const Tensor a = created.forward(two_sequences(), {.all_logits = true});
  const Tensor b = loaded.forward(two_sequences(), {.all_logits = true});
  ASSERT_EQ(a.numel(), b.numel());
  for (int64_t j = 0; j < a.numel(); ++j) ASSERT_EQ(a.f32()[j], b.f32()[j]) << j;
}

// Training starts from model_load_trainable (train/checkpoint_io.h), which walks every expected tensor: the per-expert
// tensors are reached through their spec (tensor_slot), not the table row alone, and come back as private copies.
TEST(Qwen3Moe, LoadTrainableReachesEveryExpertTensor) {
  const ModelConfig c = parse_model_config(moe_config(false), "test");
  Model created = Model::create(c, 23);
  test::ScratchDir scratch("qwen3-moe-trainable");
  created.save(scratch.path());
  Model loaded = model_load_trainable(scratch.path());
  const Tensor a = created.forward(two_sequences(), {.all_logits = true});
  const Tensor b = loaded.forward(two_sequences(), {.all_logits = true});
  ASSERT_EQ(a.numel(), b.numel());
  for (int64_t j = 0; j < a.numel(); ++j) ASSERT_EQ(a.f32()[j], b.f32()[j]) << j;
}

// The layer backward against central differences (support/moe_fd_check.h: fp32 layer, double loss, elements whose
// perturbation switches an expert skipped), with and without renormalised top-k weights; the test asserts that few
// elements are skipped.
TEST(Qwen3Moe, LayerBackwardMatchesFiniteDifferences) {
  for (const bool norm_topk : {false, true}) {
    const int64_t E = 4;
    test::MoeFdCheck c(/*tokens=*/5, /*hidden=*/8, /*expert_width=*/6, MoeDims{E, 2, norm_topk},
                       /*stream=*/norm_topk ? 100 : 200);
    const std::string tag = norm_topk ? " (norm_topk_prob)" : "";
    c.check(c.x, c.dx, "x" + tag);
    c.check(c.w.router.weight, c.g.router.weight, "router" + tag);
    for (int64_t e = 0; e < E; ++e) {
      c.check(c.w.experts[e].gate_proj.weight, c.g.experts[e].gate_proj.weight, "gate_proj" + tag);
      c.check(c.w.experts[e].up_proj.weight, c.g.experts[e].up_proj.weight, "up_proj" + tag);
      c.check(c.w.experts[e].down_proj.weight, c.g.experts[e].down_proj.weight, "down_proj" + tag);
    }
    EXPECT_LT(c.skipped, c.checked / 10) << "too many perturbations switched experts" << tag;
  }
}

// The whole decoder trains through expert layers on the CPU: the two recompute modes give bit-identical gradients
// (expert layers recompute in both), and the routers and routed experts get gradients.
TEST(Qwen3Moe, ModelBackwardThroughExpertLayers) {
  const ModelConfig c = parse_model_config(moe_config(true), "test");
  Model model = Model::create(c, 1);
  const TokenBatch batch = two_sequences();
  Tensor d_final = Tensor::zeros({batch.total_tokens(), c.hidden_size});
  rng_fill_normal(d_final.f32(), static_cast<uint64_t>(d_final.numel()), 0.0f, 1.0f, 5, 1);
  std::vector<DecoderWeights> grads;
  for (const Recompute mode : {Recompute::Layer, Recompute::None}) {
    const ForwardTrace trace = model_forward_train(model, batch, mode);
    grads.push_back(zero_grads_like(c));
    model_backward(model, batch, trace, d_final, grads.back());
  }
  DecoderWeights& a = grads[0];
  DecoderWeights& b = grads[1];
  const auto pa = named_parameters(c, model.mutable_weights(), a);
  const auto pb = named_parameters(c, model.mutable_weights(), b);
  ASSERT_EQ(pa.size(), pb.size());
  double router_norm = 0, expert_norm = 0;
  for (size_t p = 0; p < pa.size(); ++p) {
    for (int64_t j = 0; j < pa[p].grad.numel(); ++j) {
      ASSERT_EQ(pa[p].grad.f32()[j], pb[p].grad.f32()[j]) << pa[p].name;
      ASSERT_TRUE(std::isfinite(pa[p].grad.f32()[j])) << pa[p].name;
      const double v = pa[p].grad.f32()[j];
      if (pa[p].name.find("mlp.gate.weight") != std::string::npos) router_norm += v * v;
      if (pa[p].name.find("mlp.experts.") != std::string::npos) expert_norm += v * v;
    }
  }
  EXPECT_GT(router_norm, 0.0);
  EXPECT_GT(expert_norm, 0.0);
}

// `inspect` counts every expert in the parameters and leaves the E - k unchosen experts of each MoE layer out of the
// active parameters per token. Hand count for moe_config: embeddings and head 2·120·32; per layer attention
// 2·64·32 + 2·32·32 + q/k norms 2·16 + two norms 2·32; dense layers 0, 2: 3·48·32; MoE layers 1, 3: router 6·32 +
// 6 experts · 3·16·32; final norm 32.
TEST(Qwen3Moe, InspectReportsExpertsAndActiveParameters) {
  test::ScratchDir scratch("qwen3-moe-inspect");
  Model::create(parse_model_config(moe_config(true), "test"), 2).save(scratch.path());
  const auto r = test::run_hybridlm("inspect " + scratch.path().string() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const int64_t total = 2 * 120 * 32 + 4 * (2 * 64 * 32 + 2 * 32 * 32 + 2 * 16 + 2 * 32) + 2 * 3 * 48 * 32 +
                        2 * (6 * 32 + 6 * 3 * 16 * 32) + 32;
  EXPECT_EQ(j["parameters"], total);
  EXPECT_EQ(j["active_parameters_per_token"], total - 2 * (6 - 3) * 3 * 16 * 32);
  EXPECT_EQ(j["parameters_by_group"]["moe"], 2 * (6 * 32 + 6 * 3 * 16 * 32));
  EXPECT_EQ(j["moe"]["layers"], 2);
  EXPECT_EQ(j["moe"]["ffn_layout"], "DMDM");
  EXPECT_EQ(j["moe"]["experts_per_token"], 3);
  EXPECT_EQ(j["model_type"], "qwen3_moe");
}

// `hybridlm generate` (CPU engine: KV cache, chunked prefill, one-token decode) on a qwen3_moe model: each greedy
// token equals the argmax of a full forward over the prompt and the tokens before it (the expert FFN is per token,
// so the cached decode must agree).
TEST(Qwen3Moe, GreedyGenerateMatchesFullForward) {
  const ModelConfig c = parse_model_config(moe_config(false), "test");
  Model model = Model::create(c, 31);
  test::ScratchDir scratch("qwen3-moe-generate");
  model.save(scratch.path());
  const auto r = test::run_hybridlm("generate " + scratch.path().string() +
                                    " --tokenizer bytes --ids 5,17,110,3 --max-new-tokens 6 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto generated = nlohmann::json::parse(r.out)["ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(generated.size(), 6u) << r.out;
  std::vector<int32_t> seq{5, 17, 110, 3};
  for (int32_t next : generated) {
    TokenBatch b;
    b.add_sequence(seq);
    const Tensor logits = model.forward(b);  // last token's logits [1, V]
    const float* l = logits.f32();
    EXPECT_EQ(next, static_cast<int32_t>(std::max_element(l, l + c.vocab_size) - l)) << "after " << seq.size();
    seq.push_back(next);
  }
}
