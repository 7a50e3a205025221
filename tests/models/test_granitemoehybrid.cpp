// Granite-4.0-H (granitemoehybrid): config parsing (layer_types / layers_block_type, mamba_* keys, mamba_d_head
// "auto", NoPE unless position_embedding_type is "rope", experts), the Mamba-2 layer against a plain double-precision
// statement of HF's GraniteMoeHybridMambaLayer written out here (split order z | xBC | dt, conv + bias + SiLU, grouped
// B/C, D skip, gate before the norm), the layer continued from a carried state = the whole sequence, the checkpoint
// layout transformers writes (shared_mlp.input_linear [gate | up], block_sparse_moe stacked experts) loading into the
// same weights, save round trip, the MoE FFN = shared MLP + softmax over the top-k router logits, state-size
// accounting, and the training refusal. HF parity: GoldenParity's granitemoehybrid_* cases; the inference engine on
// the goldens: tests/infer (EngineParity, GenerateArch, GenerateCli, MemoryPlan).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/rng.h"
#include "infer/cpu_engine.h"
#include "infer/memory_plan.h"
#include "layers/mamba2_layer.h"
#include "models/checkpoint.h"
#include "models/safetensors.h"
#include "models/model.h"
#include "models/state_size.h"
#include "models/tensor_table.h"
#include "ops/mamba2_ssd/mamba2_ssd.h"
#include "support/run_binary.h"

using namespace hlm;
using json = nlohmann::json;

namespace {

// hidden 32, 5 layers M A M M A, attention 4 q / 2 kv heads of 8, Mamba nh 4 x P 16 (expand 2), G 2, N 6 ≠ P,
// conv 4, chunk 5 (does not divide the sequence lengths), shared MLP 24, optionally 4 experts top-2 of width 12.
json granite_config(bool moe, bool legacy_key = false) {
  json j = {{"model_type", "granitemoehybrid"},
            {"vocab_size", 90},
            {"hidden_size", 32},
            {"intermediate_size", 12},
            {"num_hidden_layers", 5},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"max_position_embeddings", 64},
            {"rms_norm_eps", 1e-5},
            {"embedding_multiplier", 3.0},
            {"residual_multiplier", 0.5},
            {"attention_multiplier", 0.2},
            {"logits_scaling", 2.5},
            {"shared_intermediate_size", 24},
            {"num_local_experts", moe ? 4 : 0},
            {"num_experts_per_tok", 2},
            {"mamba_n_heads", 4},
            {"mamba_n_groups", 2},
            {"mamba_d_state", 6},
            {"mamba_d_head", "auto"},
            {"mamba_d_conv", 4},
            {"mamba_expand", 2},
            {"mamba_chunk_size", 5},
            {"position_embedding_type", nullptr},
            {"tie_word_embeddings", false}};
  j[legacy_key ? "layers_block_type" : "layer_types"] = {"mamba", "attention", "mamba", "mamba", "attention"};
  return j;
}

TokenBatch two_sequences() {
  TokenBatch b;
  b.add_sequence({5, 17, 70, 3, 9, 42, 7, 64, 12, 1, 33, 8, 19});
  b.add_sequence({1, 2, 3, 4, 5, 6, 7});
  return b;
}

// A created model with every weight redrawn (norms around 1, A_log, dt_bias, D, conv bias off their defaults).
Model created(bool moe) {
  const ModelConfig c = parse_model_config(granite_config(moe), "test");
  Model m = Model::create(c, 31);
  uint64_t stream = 900;
  for (const TensorSpec& spec : expected_tensors(c)) {
    Tensor& t = tensor_slot(m.mutable_weights(), spec);
    const auto n = static_cast<uint64_t>(t.numel());
    const std::string& name = spec.name;
    if (spec.group == "norm") {
      rng_fill_normal(t.f32(), n, 1.0f, 0.2f, 5, stream++);
    } else if (name.ends_with(".A_log") || name.ends_with(".dt_bias") || name.ends_with(".D") ||
               name.ends_with(".conv1d.bias")) {
      rng_fill_normal(t.f32(), n, 0.0f, 0.5f, 5, stream++);
    } else if (name.ends_with(".conv1d.weight") || name.find("router") != std::string::npos) {
      rng_fill_normal(t.f32(), n, 0.0f, 0.4f, 5, stream++);
    } else {
      rng_fill_normal(t.f32(), n, 0.0f, 0.15f, 5, stream++);
    }
  }
  return m;
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

// HF's Mamba layer (families.md §5) in double, token by token per sequence; x [T, H] -> out [T, H].
std::vector<double> mamba_reference(const std::vector<float>& x, const Mamba2Weights& w, const Mamba2Dims& d,
                                    const std::vector<int64_t>& cu, int64_t H) {
  const int64_t T = cu.back(), Im = d.inner(), Cd = d.conv_channels(), nh = d.heads, P = d.head_dim,
                N = d.state_dim, G = d.groups, K = d.conv_kernel, W = Im + Cd + nh;
  std::vector<double> proj(static_cast<size_t>(T * W));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < W; ++o) {
      double s = 0.0;
      for (int64_t i = 0; i < H; ++i) s += double(x[t * H + i]) * w.in_proj.weight.f32()[o * H + i];
      proj[t * W + o] = s;
    }
  std::vector<double> out(static_cast<size_t>(T * H), 0.0);
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    std::vector<double> S(static_cast<size_t>(nh * P * N), 0.0);
    for (int64_t t = cu[s]; t < cu[s + 1]; ++t) {
      std::vector<double> xbc(static_cast<size_t>(Cd));
      for (int64_t c = 0; c < Cd; ++c) {
        double v = w.conv_bias.f32()[c];
        for (int64_t j = 0; j < K; ++j) {
          const int64_t src = t - (K - 1) + j;
          if (src >= cu[s]) v += w.conv.f32()[c * K + j] * proj[src * W + Im + c];
        }
        xbc[c] = silu(v);
      }
      std::vector<double> y(static_cast<size_t>(Im));
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t g = h / (nh / G);
        const double dt = std::log1p(std::exp(proj[t * W + Im + Cd + h] + w.dt_bias.f32()[h]));
        const double a = std::exp(-dt * std::exp(double(w.A_log.f32()[h])));
        for (int64_t p = 0; p < P; ++p) {
          const double xp = xbc[h * P + p];
          double acc = 0.0;
          for (int64_t n = 0; n < N; ++n) {
            double& st = S[(h * P + p) * N + n];
            st = a * st + dt * xp * xbc[Im + g * N + n];
            acc += st * xbc[Im + G * N + g * N + n];
          }
          y[h * P + p] = acc + w.D.f32()[h] * xp;
        }
      }
      double ss = 0.0;
      for (int64_t i = 0; i < Im; ++i) {
        y[i] *= silu(proj[t * W + i]);
        ss += y[i] * y[i];
      }
      const double r = 1.0 / std::sqrt(ss / double(Im) + d.norm_eps);
      for (int64_t o = 0; o < H; ++o) {
        double acc = 0.0;
        for (int64_t i = 0; i < Im; ++i) acc += y[i] * r * w.norm.f32()[i] * w.out_proj.weight.f32()[o * Im + i];
        out[t * H + o] = acc;
      }
    }
  }
  return out;
}

double max_rel(const float* a, const std::vector<double>& b) {
  double m = 1e-30, e = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    m = std::max(m, std::abs(b[i]));
    e = std::max(e, std::abs(double(a[i]) - b[i]));
  }
  return e / m;
}

Tensor cat_rows(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::zeros({a.dim(0) + b.dim(0), a.numel() / a.dim(0)});
  std::copy_n(a.f32(), a.numel(), out.f32());
  std::copy_n(b.f32(), b.numel(), out.f32() + a.numel());
  return out;
}

// The checkpoint as transformers writes GraniteMoeHybridForCausalLM (on-disk names: fused shared_mlp.input_linear,
// stacked block_sparse_moe.input_linear / output_linear, router.layer), written by hand.
std::vector<std::pair<std::string, Tensor>> hf_layout(const Model& m) {
  const ModelConfig& c = m.config();
  const DecoderWeights& w = m.weights();
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("model.embed_tokens.weight", w.embed_tokens);
  out.emplace_back("model.norm.weight", w.norm);
  out.emplace_back("lm_head.weight", w.lm_head.weight);
  const int64_t H = c.hidden_size;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const DecoderLayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string L = "model.layers." + std::to_string(i) + ".";
    out.emplace_back(L + "input_layernorm.weight", l.input_layernorm);
    out.emplace_back(L + "post_attention_layernorm.weight", l.post_attention_layernorm);
    if (c.layer_kinds[static_cast<size_t>(i)] == LayerKind::FullAttention) {
      out.emplace_back(L + "self_attn.q_proj.weight", l.self_attn.q_proj.weight);
      out.emplace_back(L + "self_attn.k_proj.weight", l.self_attn.k_proj.weight);
      out.emplace_back(L + "self_attn.v_proj.weight", l.self_attn.v_proj.weight);
      out.emplace_back(L + "self_attn.o_proj.weight", l.self_attn.o_proj.weight);
    } else {
      const Mamba2Weights& mw = l.mamba;
      out.emplace_back(L + "mamba.in_proj.weight", mw.in_proj.weight);
      out.emplace_back(L + "mamba.conv1d.weight", mw.conv.reshape({mw.conv.dim(0), 1, mw.conv.dim(1)}));
      out.emplace_back(L + "mamba.conv1d.bias", mw.conv_bias);
      out.emplace_back(L + "mamba.dt_bias", mw.dt_bias);
      out.emplace_back(L + "mamba.A_log", mw.A_log);
      out.emplace_back(L + "mamba.D", mw.D);
      out.emplace_back(L + "mamba.norm.weight", mw.norm);
      out.emplace_back(L + "mamba.out_proj.weight", mw.out_proj.weight);
    }
    out.emplace_back(L + "shared_mlp.input_linear.weight", cat_rows(l.mlp.gate_proj.weight, l.mlp.up_proj.weight));
    out.emplace_back(L + "shared_mlp.output_linear.weight", l.mlp.down_proj.weight);
    if (!c.moe_layer(i)) continue;
    const int64_t E = c.moe->num_experts, I = c.moe->moe_intermediate_size;
    out.emplace_back(L + "block_sparse_moe.router.layer.weight", l.moe.router.weight);
    Tensor in = Tensor::zeros({E, 2 * I, H}), down = Tensor::zeros({E, H, I});
    for (int64_t e = 0; e < E; ++e) {
      const MlpWeights& x = l.moe.experts[static_cast<size_t>(e)];
      std::copy_n(x.gate_proj.weight.f32(), I * H, in.f32() + e * 2 * I * H);
      std::copy_n(x.up_proj.weight.f32(), I * H, in.f32() + e * 2 * I * H + I * H);
      std::copy_n(x.down_proj.weight.f32(), H * I, down.f32() + e * H * I);
    }
    out.emplace_back(L + "block_sparse_moe.input_linear.weight", in);
    out.emplace_back(L + "block_sparse_moe.output_linear.weight", down);
  }
  return out;
}

std::filesystem::path temp_dir(const char* name) {
  const auto dir = std::filesystem::temp_directory_path() / (std::string("hlm_granite_") + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST(GraniteMoeHybrid, ConfigKeysAndDefaults) {
  for (bool legacy : {false, true}) {
    const ModelConfig c = parse_model_config(granite_config(true, legacy), "test");
    EXPECT_EQ(c.architecture, Architecture::GraniteMoeHybrid);
    ASSERT_EQ(c.layer_kinds.size(), 5u);
    const std::vector<LayerKind> want{LayerKind::Mamba2, LayerKind::FullAttention, LayerKind::Mamba2,
                                      LayerKind::Mamba2, LayerKind::FullAttention};
    EXPECT_EQ(c.layer_kinds, want);
    ASSERT_TRUE(c.mamba.has_value());
    EXPECT_EQ(c.mamba->head_dim, 16);  // "auto": 2·32 / 4
    EXPECT_EQ(c.mamba->conv_channels(), 64 + 2 * 2 * 6);
    EXPECT_FALSE(c.use_rope);  // position_embedding_type null: NoPE
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_FLOAT_EQ(c.attention_scale(), 0.2f);
    ASSERT_TRUE(c.moe.has_value());
    EXPECT_TRUE(c.moe->norm_topk_prob);
    EXPECT_EQ(c.moe->moe_intermediate_size, 12);
    EXPECT_TRUE(c.moe_layer(0) && c.moe_layer(4));
    EXPECT_TRUE(c.unknown_keys.empty()) << c.unknown_keys.front();
  }
  json j = granite_config(false);
  j.erase("layer_types");
  j["position_embedding_type"] = "rope";
  const ModelConfig c = parse_model_config(j, "test");
  EXPECT_TRUE(c.use_rope);
  EXPECT_FALSE(c.moe.has_value());
  EXPECT_EQ(std::count(c.layer_kinds.begin(), c.layer_kinds.end(), LayerKind::Mamba2), 5);  // default: all mamba
  // Round trip through our config.json writer.
  const ModelConfig back = parse_model_config(model_config_to_json(parse_model_config(granite_config(true), "t")), "t");
  EXPECT_EQ(back.layer_types, parse_model_config(granite_config(true), "t").layer_types);
  EXPECT_EQ(back.mamba->groups, 2);
  EXPECT_EQ(back.moe->num_experts, 4);
  EXPECT_FALSE(back.use_rope);
  EXPECT_TRUE(back.unknown_keys.empty()) << back.unknown_keys.front();

  json bad = granite_config(false);
  bad["mamba_proj_bias"] = true;
  EXPECT_THROW(parse_model_config(bad, "test"), Error);
  bad = granite_config(false);
  bad["mamba_n_groups"] = 3;
  EXPECT_THROW(parse_model_config(bad, "test"), Error);
  bad = granite_config(false);
  bad["layer_types"][0] = "linear";
  EXPECT_THROW(parse_model_config(bad, "test"), Error);
}

TEST(GraniteMoeHybrid, MambaLayerMatchesThePlainStatement) {
  const Model m = created(false);
  const ModelConfig& c = m.config();
  const Mamba2Weights& w = m.weights().layers[0].mamba;
  const Mamba2Dims d = mamba2_dims(c);
  TokenBatch batch = two_sequences();
  const int64_t T = batch.total_tokens(), H = c.hidden_size;
  std::vector<float> x(static_cast<size_t>(T * H));
  rng_fill_normal(x.data(), x.size(), 0.0f, 1.0f, 7, 1);
  std::vector<float> out(x.size());
  Arena arena;
  mamba2_layer_forward(out.data(), x.data(), w, d, batch, {}, arena);
  const std::vector<double> ref = mamba_reference(x, w, d, batch.cu_seqlens, H);
  const double err = max_rel(out.data(), ref);
  std::printf("  mamba layer vs plain double statement: max rel %.2e\n", err);
  EXPECT_LT(err, 2e-6);

  // The same sequence in two pieces (6 tokens, then 7) carrying conv + SSM state = all 13 at once.
  TokenBatch first, second, whole;
  const std::vector<int32_t> ids{5, 17, 70, 3, 9, 42, 7, 64, 12, 1, 33, 8, 19};
  whole.add_sequence(ids);
  first.add_sequence({ids.begin(), ids.begin() + 6});
  second.add_sequence({ids.begin() + 6, ids.end()});
  std::vector<float> full(static_cast<size_t>(13 * H)), a(static_cast<size_t>(6 * H)), b(static_cast<size_t>(7 * H));
  mamba2_layer_forward(full.data(), x.data(), w, d, whole, {}, arena);
  std::vector<float> conv(static_cast<size_t>(d.conv_state_elements())), ssm(static_cast<size_t>(d.ssm_state_elements()));
  mamba2_layer_forward(a.data(), x.data(), w, d, first, {nullptr, nullptr, conv.data(), ssm.data()}, arena);
  mamba2_layer_forward(b.data(), x.data() + 6 * H, w, d, second, {conv.data(), ssm.data(), conv.data(), ssm.data()},
                       arena);
  double worst = 0.0, scale = 1e-30;
  for (int64_t i = 0; i < 13 * H; ++i) {
    const float piece = i < 6 * H ? a[i] : b[i - 6 * H];
    worst = std::max(worst, double(std::abs(piece - full[i])));
    scale = std::max(scale, double(std::abs(full[i])));
  }
  EXPECT_LT(worst / scale, 1e-6);
}

TEST(GraniteMoeHybrid, TransformersLayoutLoadsIntoTheSameWeightsAndSaveRoundTrips) {
  for (bool moe : {false, true}) {
    Model m = created(moe);
    const TokenBatch batch = two_sequences();
    ForwardOptions all;
    all.all_logits = true;
    const Tensor want = m.forward(batch, all).clone();
    const auto dir = temp_dir(moe ? "hf_moe" : "hf");
    checkpoint_write(dir, hf_layout(m), {{"format", "pt"}});
    file_write_atomic(dir / "config.json", granite_config(moe).dump(2));
    Model loaded = Model::load(dir);
    EXPECT_TRUE(loaded.unused_tensors().empty());
    const Tensor got = loaded.forward(batch, all);
    ASSERT_EQ(got.numel(), want.numel());
    for (int64_t j = 0; j < got.numel(); ++j) ASSERT_EQ(got.f32()[j], want.f32()[j]) << "moe " << moe << " " << j;
    const auto saved = temp_dir(moe ? "saved_moe" : "saved");
    loaded.save(saved);
    Model again = Model::load(saved);
    const Tensor round = again.forward(batch, all);
    for (int64_t j = 0; j < round.numel(); ++j) ASSERT_EQ(round.f32()[j], want.f32()[j]) << "moe " << moe << " " << j;
    std::filesystem::remove_all(dir);
    std::filesystem::remove_all(saved);
  }
}

TEST(GraniteMoeHybrid, FfnIsSharedMlpPlusSoftmaxOverTheTopKLogits) {
  Model m = created(true);
  const ModelConfig& c = m.config();
  const TokenBatch batch = two_sequences();
  const int64_t T = batch.total_tokens(), H = c.hidden_size, E = 4, I = 12, S = 24;
  std::vector<float> attn_out, mlp_delta;
  const int layer = 3;
  m.forward(batch, {}, [&](CapturePoint p, int i, const Tensor& v) {
    if (i != layer) return;
    if (p == CapturePoint::AttnOut) attn_out.assign(v.f32(), v.f32() + v.numel());
    if (p == CapturePoint::MlpDelta) mlp_delta.assign(v.f32(), v.f32() + v.numel());
  });
  ASSERT_EQ(static_cast<int64_t>(mlp_delta.size()), T * H);
  const DecoderLayerWeights& l = m.weights().layers[layer];
  const auto swiglu = [&](const double* x, const MlpWeights& w, int64_t F, double* acc, double scale) {
    std::vector<double> h(static_cast<size_t>(F));
    for (int64_t f = 0; f < F; ++f) {
      double g = 0.0, u = 0.0;
      for (int64_t k = 0; k < H; ++k) {
        g += x[k] * w.gate_proj.weight.f32()[f * H + k];
        u += x[k] * w.up_proj.weight.f32()[f * H + k];
      }
      h[f] = silu(g) * u;
    }
    for (int64_t o = 0; o < H; ++o) {
      double s = 0.0;
      for (int64_t f = 0; f < F; ++f) s += h[f] * w.down_proj.weight.f32()[o * F + f];
      acc[o] += scale * s;
    }
  };
  std::vector<double> ref(static_cast<size_t>(T * H), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> xn(static_cast<size_t>(H));
    double ss = 0.0;
    for (int64_t k = 0; k < H; ++k) ss += double(attn_out[t * H + k]) * attn_out[t * H + k];
    const double r = 1.0 / std::sqrt(ss / double(H) + c.rms_norm_eps);
    for (int64_t k = 0; k < H; ++k) xn[k] = attn_out[t * H + k] * r * l.post_attention_layernorm.f32()[k];
    swiglu(xn.data(), l.mlp, S, ref.data() + t * H, 1.0);
    std::vector<double> logit(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e)
      for (int64_t k = 0; k < H; ++k) logit[e] += xn[k] * l.moe.router.weight.f32()[e * H + k];
    std::vector<int> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logit[a] > logit[b]; });
    const double z = std::exp(logit[order[0]]) + std::exp(logit[order[1]]);  // softmax over the top-2 logits
    for (int j = 0; j < 2; ++j)
      swiglu(xn.data(), l.moe.experts[order[j]], I, ref.data() + t * H, std::exp(logit[order[j]]) / z);
  }
  const double err = max_rel(mlp_delta.data(), ref);
  std::printf("  MoE FFN (shared + top-2 of 4) vs plain statement: max rel %.2e\n", err);
  EXPECT_LT(err, 1e-5);
}

TEST(GraniteMoeHybrid, StateSizesAndRefusals) {
  const ModelConfig c = parse_model_config(granite_config(true), "test");
  const StateSizes s = state_sizes(c, 1000, 2);
  EXPECT_EQ(s.mamba_layers, 3);
  EXPECT_EQ(s.full_attention_layers, 2);
  EXPECT_EQ(s.linear_attention_layers, 0);
  EXPECT_EQ(s.mamba_ssm_state_elements, 4 * 16 * 6);
  EXPECT_EQ(s.mamba_conv_state_elements, (64 + 24) * 3);
  EXPECT_EQ(s.model_elements_at_context, 2 * 2 * 2 * 8 * 1000 + 3 * (4 * 16 * 6 + 88 * 3));
  const MemoryPlan plan = memory_plan_shape(c);  // generation: Mamba-2 conv + SSM state per sequence, fp32
  EXPECT_EQ(plan.gdn_layers, 3);
  EXPECT_EQ(plan.gdn_bytes_per_sequence, 3 * (88 * 3 + 4 * 16 * 6) * 4);
  Model m = created(false);
  ModelStash stash;
  stash.mixer.resize(5);
  stash.mlp.resize(5);
  ForwardOptions train;
  train.stash = &stash;
  EXPECT_THROW(m.forward(two_sequences(), train), Error);  // no Mamba-2 backward in the model yet
}

TEST(GraniteMoeHybrid, RopeSwitchAndMultipliersChangeTheOutput) {
  Model m = created(false);
  const TokenBatch batch = two_sequences();
  const Tensor nope = m.forward(batch).clone();
  json j = granite_config(false);
  j["position_embedding_type"] = "rope";
  Model roped = Model::from_weights(parse_model_config(j, "test"), m.weights());
  const Tensor rope = roped.forward(batch);
  double diff = 0.0;
  for (int64_t i = 0; i < rope.numel(); ++i) diff = std::max(diff, double(std::abs(rope.f32()[i] - nope.f32()[i])));
  EXPECT_GT(diff, 1e-3);
}

// `inspect` on a checkpoint in transformers' layout: layout (A attention, R Mamba-2), the Mamba-2 state accounting
// (SSM nh·P·N + conv (Im + 2·G·N)·(K−1) per layer), experts; `generate` runs (CPU). The `--device cuda` refusal:
// tests/infer/test_generate_cli.cpp.
TEST(GraniteMoeHybrid, InspectReportsMambaStateAndGenerateRuns) {
  Model m = created(true);
  test::ScratchDir scratch("granite-inspect");
  checkpoint_write(scratch.path(), hf_layout(m), {{"format", "pt"}});
  file_write_atomic(scratch.path() / "config.json", granite_config(true).dump(2));
  const auto r = test::run_hybridlm("inspect " + scratch.path().string() + " --json --context 100");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["model_type"], "granitemoehybrid");
  EXPECT_EQ(j["layout"], "RARRA");
  EXPECT_EQ(j["memory"]["mamba2"]["layers"], 3);
  EXPECT_EQ(j["memory"]["mamba2"]["ssm_state_elements"], 4 * 16 * 6);
  EXPECT_EQ(j["memory"]["mamba2"]["conv_state_elements"], (64 + 2 * 2 * 6) * 3);
  EXPECT_EQ(j["memory"]["full_attention"]["layers"], 2);
  EXPECT_EQ(j["moe"]["ffn_layout"], "MMMMM");
  const auto g = test::run_hybridlm("generate " + scratch.path().string() + " --ids 1,2,3 --max-new-tokens 2 --json");
  EXPECT_EQ(g.exit_code, 0) << g.err;
}

// The CPU engine: prefill in chunks of 4 and 2, then token-by-token decode, carrying the Mamba-2 conv + SSM state and
// the KV cache = the full forward's logits at every step; two sequences decoded together in one batch likewise.
TEST(GraniteMoeHybrid, CpuEnginePrefillAndDecodeEqualTheFullForward) {
  for (bool moe : {false, true}) {
    Model m = created(moe);
    const std::vector<int32_t> ids{5, 17, 70, 3, 9, 42, 7, 64, 12, 1, 33, 8, 19};
    TokenBatch whole;
    whole.add_sequence(ids);
    ForwardOptions all;
    all.all_logits = true;
    const Tensor expect = m.forward(whole, all).clone();
    const int64_t V = m.config().vocab_size, L = static_cast<int64_t>(ids.size());
    MemoryRequest r;
    r.max_sequences = 2;
    r.block_size = 4;
    r.kv_blocks = 2 * ((L + 3) / 4);
    auto engine = make_cpu_engine(m, memory_plan_build(m.config(), r));
    const int a = engine->open_sequence(L), b = engine->open_sequence(L);
    ASSERT_GE(a, 0);
    ASSERT_GE(b, 0);
    double worst = 0.0;
    for (int64_t begin = 0; begin < L;) {
      const int64_t end = begin < 6 ? std::min<int64_t>(6, begin + 4) : begin + 1;  // chunks of 4, 2, then decode
      TokenBatch batch;  // the same tokens for both sequences (b in the second row)
      batch.add_sequence(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end));
      batch.add_sequence(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end));
      const std::vector<int> slots{a, b};
      const Tensor logits = engine->step(slots, batch);
      const float* row = expect.f32() + (end - 1) * V;
      for (int64_t s = 0; s < 2; ++s) {
        double diff = 0.0, scale = 0.0;
        for (int64_t v = 0; v < V; ++v) {
          diff = std::max(diff, std::abs(double(logits.f32()[s * V + v]) - double(row[v])));
          scale = std::max(scale, std::abs(double(row[v])));
        }
        worst = std::max(worst, diff / (1.0 + scale));
      }
      begin = end;
    }
    std::printf("  granitemoehybrid%s: prefill + decode vs full forward, worst row error %.2e\n", moe ? " (moe)" : "",
                worst);
    EXPECT_LT(worst, 2e-5);
  }
}
