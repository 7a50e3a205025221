// Qwen3.5 / Qwen3.5-MoE (qwen3_5_text, qwen3_5_moe_text, their multimodal wrappers qwen3_5 / qwen3_5_moe) and
// Qwen3-Next (qwen3_next: grouped in_proj_qkvz / in_proj_ba, Qwen3-MoE schedule + shared expert):
// config defaults (layer schedule from full_attention_interval, partial rotary 0.25, GDN sizes, no intermediate_size
// for the MoE text config), the checkpoint layout transformers writes — written here by hand from a created model,
// independently of the tensor table: the per-head [q | gate] q_proj, in_proj_qkv / in_proj_z / in_proj_a / in_proj_b /
// out_proj / fused conv1d / norm of the GDN, zero-centred norms stored as w − 1, the model.language_model. prefix,
// stacked experts and the gated shared expert — loads into the very same weights (bit-identical logits), our own save
// round-trips, mtp.* tensors are reported unused, the shared expert's backward matches finite differences, and the CPU
// engine's prefill + decode equals the full forward. HF parity itself: GoldenParity's qwen3_5_tiny and
// qwen3_5_moe_tiny (tools/goldens/make_goldens.py); the gated attention's backward: test_dense_layer_backward.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "infer/cpu_engine.h"
#include "infer/memory_plan.h"
#include "layers/moe_layer.h"
#include "models/checkpoint.h"
#include "models/model.h"
#include "models/safetensors.h"
#include "models/tensor_table.h"
#include "support/moe_fd_check.h"
#include "support/run_binary.h"

using namespace hlm;
using json = nlohmann::json;

namespace {

// Dense: GQA 4:2, head_dim 12 (4·12 != 32), partial rotary 0.5 (6 dims), GDN Hk 2 / Hv 4, dk 8 != dv 6.
// MoE: the same mixers, 5 experts top-2 of width 10 and a shared expert of width 14.
json qwen35_config(bool moe, bool next = false) {
  json j = {{"model_type", moe ? "qwen3_5_moe_text" : "qwen3_5_text"},
            {"vocab_size", 80},
            {"hidden_size", 32},
            {"num_hidden_layers", 4},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"head_dim", 12},
            {"max_position_embeddings", 64},
            {"tie_word_embeddings", moe},
            {"layer_types", {"linear_attention", "full_attention", "linear_attention", "full_attention"}},
            {"linear_num_key_heads", 2},
            {"linear_num_value_heads", 4},
            {"linear_key_head_dim", 8},
            {"linear_value_head_dim", 6},
            {"linear_conv_kernel_dim", 4},
            {"rope_parameters",
             {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5},
              {"mrope_section", {2, 1, 0}}, {"mrope_interleaved", true}}}};
  if (moe) {
    j["num_experts"] = 5;
    j["num_experts_per_tok"] = 2;
    j["moe_intermediate_size"] = 10;
    j["shared_expert_intermediate_size"] = 14;
  } else {
    j["intermediate_size"] = 48;
  }
  if (next) {  // Qwen3-Next: grouped GDN projections; layer 1 dense by mlp_only_layers, top-k not renormalised
    j["model_type"] = "qwen3_next";
    j["intermediate_size"] = 48;
    j["mlp_only_layers"] = {1};
    j["norm_topk_prob"] = false;
    j["rope_parameters"].erase("mrope_section");
    j["rope_parameters"].erase("mrope_interleaved");
  }
  return j;
}

TokenBatch two_sequences() {
  TokenBatch b;
  b.add_sequence({5, 17, 70, 3, 9, 42, 7, 64, 12, 1, 33});
  b.add_sequence({1, 2, 3, 4, 5, 6, 7});
  return b;
}

// A created model whose norm weights are moved off 1 (so a wrong zero-centring shows).
Model created(bool moe, bool next = false) {
  const ModelConfig c = parse_model_config(qwen35_config(moe, next), "test");
  Model m = Model::create(c, 21);
  uint64_t stream = 500;
  for (const TensorSpec& spec : expected_tensors(c)) {
    if (spec.group != "norm") continue;
    Tensor& t = tensor_slot(m.mutable_weights(), spec);
    rng_fill_normal(t.f32(), static_cast<uint64_t>(t.numel()), 1.0f, 0.2f, 3, stream++);
  }
  return m;
}

Tensor minus_one(const Tensor& t) {
  Tensor out = t.clone();
  for (int64_t j = 0; j < out.numel(); ++j) out.f32()[j] -= 1.0f;
  return out;
}

// Rows of `parts` stacked along dim 0 (all [rows_i, cols]).
Tensor cat_rows(const std::vector<const Tensor*>& parts) {
  int64_t rows = 0;
  const int64_t cols = parts[0]->numel() / parts[0]->dim(0);
  for (const Tensor* p : parts) rows += p->dim(0);
  Tensor out = Tensor::zeros({rows, cols});
  int64_t at = 0;
  for (const Tensor* p : parts) {
    std::copy_n(p->f32(), p->numel(), out.f32() + at);
    at += p->numel();
  }
  return out;
}

// Rows [r0, r0 + n) of t (2-D) appended to `out` rows.
void append_rows(std::vector<float>& out, const Tensor& t, int64_t r0, int64_t n) {
  const int64_t cols = t.numel() / t.dim(0);
  out.insert(out.end(), t.f32() + r0 * cols, t.f32() + (r0 + n) * cols);
}

Tensor from_rows(const std::vector<float>& v, int64_t cols) {
  Tensor t = Tensor::zeros({static_cast<int64_t>(v.size()) / cols, cols});
  std::copy(v.begin(), v.end(), t.f32());
  return t;
}

// The checkpoint as transformers 5.x writes a Qwen3_5(Moe)ForConditionalGeneration text model (stacked experts), or
// with `next` a Qwen3NextForCausalLM (grouped in_proj_qkvz / in_proj_ba, per-expert tensors, "model." names), by hand.
std::vector<std::pair<std::string, Tensor>> hf_layout(const Model& m, bool next = false) {
  const ModelConfig& c = m.config();
  const DecoderWeights& w = m.weights();
  const std::string P = next ? "model." : "model.language_model.";
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back(P + "embed_tokens.weight", w.embed_tokens);
  const int64_t H = c.hidden_size, D = c.head_dim, Hq = c.num_attention_heads;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const DecoderLayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string L = P + "layers." + std::to_string(i) + ".";
    out.emplace_back(L + "input_layernorm.weight", minus_one(l.input_layernorm));
    out.emplace_back(L + "post_attention_layernorm.weight", minus_one(l.post_attention_layernorm));
    if (c.layer_kinds[static_cast<size_t>(i)] == LayerKind::FullAttention) {
      const AttentionWeights& a = l.self_attn;
      Tensor q = Tensor::zeros({Hq * 2 * D, H});  // per head: D query rows, then D gate rows
      for (int64_t h = 0; h < Hq; ++h) {
        std::copy_n(a.q_proj.weight.f32() + h * D * H, D * H, q.f32() + (2 * h) * D * H);
        std::copy_n(a.gate_proj.weight.f32() + h * D * H, D * H, q.f32() + (2 * h + 1) * D * H);
      }
      out.emplace_back(L + "self_attn.q_proj.weight", q);
      out.emplace_back(L + "self_attn.k_proj.weight", a.k_proj.weight);
      out.emplace_back(L + "self_attn.v_proj.weight", a.v_proj.weight);
      out.emplace_back(L + "self_attn.o_proj.weight", a.o_proj.weight);
      out.emplace_back(L + "self_attn.q_norm.weight", minus_one(a.q_norm));
      out.emplace_back(L + "self_attn.k_norm.weight", minus_one(a.k_norm));
    } else {
      const GdnWeights& g = l.linear_attn;
      if (next) {  // per key head g: [q_g | k_g | v of its r value heads | z of them], and [b of them | a of them]
        const int64_t Hk = c.linear->num_key_heads, dk = c.linear->key_head_dim, dv = c.linear->value_head_dim;
        const int64_t r = c.linear->num_value_heads / Hk;
        std::vector<float> qkvz, ba;
        for (int64_t h = 0; h < Hk; ++h) {
          append_rows(qkvz, g.q_proj.weight, h * dk, dk);
          append_rows(qkvz, g.k_proj.weight, h * dk, dk);
          append_rows(qkvz, g.v_proj.weight, h * r * dv, r * dv);
          append_rows(qkvz, g.g_proj.weight, h * r * dv, r * dv);
          append_rows(ba, g.b_proj.weight, h * r, r);
          append_rows(ba, g.a_proj.weight, h * r, r);
        }
        out.emplace_back(L + "linear_attn.in_proj_qkvz.weight", from_rows(qkvz, H));
        out.emplace_back(L + "linear_attn.in_proj_ba.weight", from_rows(ba, H));
      } else {
        out.emplace_back(L + "linear_attn.in_proj_qkv.weight",
                         cat_rows({&g.q_proj.weight, &g.k_proj.weight, &g.v_proj.weight}));
        out.emplace_back(L + "linear_attn.in_proj_z.weight", g.g_proj.weight);
        out.emplace_back(L + "linear_attn.in_proj_a.weight", g.a_proj.weight);
        out.emplace_back(L + "linear_attn.in_proj_b.weight", g.b_proj.weight);
      }
      out.emplace_back(L + "linear_attn.out_proj.weight", g.o_proj.weight);
      Tensor conv = cat_rows({&g.q_conv, &g.k_conv, &g.v_conv});
      out.emplace_back(L + "linear_attn.conv1d.weight", conv.reshape({conv.dim(0), 1, conv.dim(1)}));
      out.emplace_back(L + "linear_attn.A_log", g.A_log);
      out.emplace_back(L + "linear_attn.dt_bias", g.dt_bias);
      out.emplace_back(L + "linear_attn.norm.weight", g.o_norm);  // plain weight: not zero-centred
    }
    if (!c.moe_layer(i)) {
      out.emplace_back(L + "mlp.gate_proj.weight", l.mlp.gate_proj.weight);
      out.emplace_back(L + "mlp.up_proj.weight", l.mlp.up_proj.weight);
      out.emplace_back(L + "mlp.down_proj.weight", l.mlp.down_proj.weight);
      continue;
    }
    const int64_t E = c.moe->num_experts, I = c.moe->moe_intermediate_size;
    out.emplace_back(L + "mlp.gate.weight", l.moe.router.weight);
    for (int64_t e = 0; next && e < E; ++e) {  // the per-expert layout
      const MlpWeights& x = l.moe.experts[static_cast<size_t>(e)];
      const std::string X = L + "mlp.experts." + std::to_string(e) + ".";
      out.emplace_back(X + "gate_proj.weight", x.gate_proj.weight);
      out.emplace_back(X + "up_proj.weight", x.up_proj.weight);
      out.emplace_back(X + "down_proj.weight", x.down_proj.weight);
    }
    Tensor gate_up = Tensor::zeros({E, 2 * I, H}), down = Tensor::zeros({E, H, I});
    for (int64_t e = 0; e < E; ++e) {
      const MlpWeights& x = l.moe.experts[static_cast<size_t>(e)];
      std::copy_n(x.gate_proj.weight.f32(), I * H, gate_up.f32() + e * 2 * I * H);
      std::copy_n(x.up_proj.weight.f32(), I * H, gate_up.f32() + (e * 2 + 1) * I * H);
      std::copy_n(x.down_proj.weight.f32(), H * I, down.f32() + e * H * I);
    }
    if (!next) {
      out.emplace_back(L + "mlp.experts.gate_up_proj", gate_up);
      out.emplace_back(L + "mlp.experts.down_proj", down);
    }
    out.emplace_back(L + "mlp.shared_expert.gate_proj.weight", l.moe.shared_expert.gate_proj.weight);
    out.emplace_back(L + "mlp.shared_expert.up_proj.weight", l.moe.shared_expert.up_proj.weight);
    out.emplace_back(L + "mlp.shared_expert.down_proj.weight", l.moe.shared_expert.down_proj.weight);
    out.emplace_back(L + "mlp.shared_expert_gate.weight", l.moe.shared_expert_gate.weight);
  }
  out.emplace_back(P + "norm.weight", minus_one(w.norm));
  if (!c.tie_word_embeddings) out.emplace_back("lm_head.weight", w.lm_head.weight);
  out.emplace_back("mtp.norm.weight", Tensor::zeros({H}));  // the multi-token-prediction head: not ours
  return out;
}

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("hlm_qwen35_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double d = 0.0;
  for (int64_t j = 0; j < a.numel(); ++j) d = std::max(d, std::abs(double(a.f32()[j]) - double(b.f32()[j])));
  return d;
}

}  // namespace

TEST(Qwen35, ConfigDefaultsFollowTheHfClasses) {
  json j = {{"model_type", "qwen3_5_text"}, {"vocab_size", 100},         {"hidden_size", 64},
            {"intermediate_size", 96},      {"num_hidden_layers", 8},    {"num_attention_heads", 4}};
  const ModelConfig c = parse_model_config(j, "test");
  EXPECT_EQ(c.architecture, Architecture::Qwen35);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(c.layer_kinds[i], (i + 1) % 4 == 0 ? LayerKind::FullAttention : LayerKind::LinearAttention) << i;
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_DOUBLE_EQ(c.rope.partial_rotary_factor, 0.25);
  EXPECT_EQ(rope_table_build(c.rope, c.head_dim, 64).rotary_dim, 64);
  ASSERT_TRUE(c.linear.has_value());
  EXPECT_EQ(c.linear->num_key_heads, 16);
  EXPECT_EQ(c.linear->num_value_heads, 32);
  EXPECT_EQ(c.linear->key_head_dim, 128);
  EXPECT_EQ(c.linear->value_head_dim, 128);
  EXPECT_FALSE(c.linear->allow_neg_eigval);
  EXPECT_DOUBLE_EQ(c.linear->norm_eps, c.rms_norm_eps);

  j["full_attention_interval"] = 2;
  const ModelConfig c2 = parse_model_config(j, "test");
  EXPECT_EQ(c2.layer_kinds[1], LayerKind::FullAttention);
  EXPECT_EQ(c2.layer_kinds[2], LayerKind::LinearAttention);

  // The multimodal wrapper: its text_config, with the wrapper's tie_word_embeddings.
  const json wrapped = {{"model_type", "qwen3_5"}, {"tie_word_embeddings", true}, {"text_config", qwen35_config(false)},
                        {"vision_config", {{"depth", 2}}}, {"image_token_id", 7}};
  const ModelConfig w = parse_model_config(wrapped, "test");
  EXPECT_EQ(w.architecture, Architecture::Qwen35);
  EXPECT_TRUE(w.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(w.rope.partial_rotary_factor, 0.5);
  EXPECT_TRUE(w.unknown_keys.empty()) << w.unknown_keys.front();

  // MoE text config: no intermediate_size; every layer routed with a shared expert; top-k always renormalised.
  const ModelConfig m = parse_model_config(qwen35_config(true), "test");
  EXPECT_EQ(m.architecture, Architecture::Qwen35Moe);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(m.moe_layer(i)) << i;
  EXPECT_TRUE(m.moe->norm_topk_prob);
  EXPECT_EQ(m.moe->shared_expert_intermediate_size, 14);
  json bad = qwen35_config(true);
  bad["norm_topk_prob"] = false;
  EXPECT_THROW(parse_model_config(bad, "test"), Error);
  json gate_off = qwen35_config(false);
  gate_off["attn_output_gate"] = false;
  EXPECT_THROW(parse_model_config(gate_off, "test"), Error);
  // Qwen3-Next: Qwen3-MoE's schedule (layer 1 dense) and routing flag, plus the shared expert.
  const ModelConfig n = parse_model_config(qwen35_config(true, true), "test");
  EXPECT_EQ(n.architecture, Architecture::Qwen3Next);
  EXPECT_FALSE(n.moe_layer(1));
  EXPECT_TRUE(n.moe_layer(0) && n.moe_layer(2) && n.moe_layer(3));
  EXPECT_FALSE(n.moe->norm_topk_prob);
  EXPECT_EQ(n.moe->shared_expert_intermediate_size, 14);
  EXPECT_TRUE(n.unknown_keys.empty()) << n.unknown_keys.front();
  // Round trip through our config writer.
  const ModelConfig back = parse_model_config(model_config_to_json(m), "test");
  EXPECT_EQ(back.moe->shared_expert_intermediate_size, 14);
  EXPECT_DOUBLE_EQ(back.rope.partial_rotary_factor, 0.5);
}

// 0: qwen3_5 dense, 1: qwen3_5_moe, 2: qwen3_next.
class Qwen35Layout : public ::testing::TestWithParam<int> {};

TEST_P(Qwen35Layout, HfCheckpointLoadsIntoTheSameWeights) {
  const bool moe = GetParam() >= 1, next = GetParam() == 2;
  Model m = created(moe, next);
  const TokenBatch batch = two_sequences();
  const Tensor want = m.forward(batch, {.all_logits = true}).clone();

  const std::string tag = std::to_string(GetParam());
  const auto dir = fresh_dir("hf_" + tag);
  checkpoint_write(dir, hf_layout(m, next), {{"format", "pt"}});
  const json text = model_config_to_json(m.config());
  const json config = next ? text : json{{"model_type", moe ? "qwen3_5_moe" : "qwen3_5"}, {"text_config", text}};
  file_write_atomic(dir / "config.json", config.dump(2));
  Model loaded = Model::load(dir);
  EXPECT_EQ(loaded.unused_tensors(), std::vector<std::string>{"mtp.norm.weight"});
  const Tensor got = loaded.forward(batch, {.all_logits = true});
  EXPECT_EQ(max_abs_diff(got, want), 0.0);

  // Our own save (table names, norms written back as offsets) round-trips exactly too.
  const auto ours = fresh_dir("ours_" + tag);
  loaded.save(ours);
  Model again = Model::load(ours);
  EXPECT_TRUE(again.unused_tensors().empty());
  EXPECT_EQ(max_abs_diff(again.forward(batch, {.all_logits = true}), want), 0.0);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(ours);
}

INSTANTIATE_TEST_SUITE_P(DenseMoeNext, Qwen35Layout, ::testing::Values(0, 1, 2));

// The output gate and the shared expert change the forward (a model that ignored them would pass the round trip).
TEST(Qwen35, GateAndSharedExpertMatter) {
  Model m = created(true);
  const TokenBatch batch = two_sequences();
  const Tensor base = m.forward(batch, {.all_logits = true}).clone();
  DecoderWeights& w = m.mutable_weights();
  Tensor gate = w.layers[1].self_attn.gate_proj.weight;
  ASSERT_TRUE(gate.defined());
  const Tensor saved = gate.clone();
  for (int64_t j = 0; j < gate.numel(); ++j) gate.f32()[j] += 0.5f;
  EXPECT_GT(max_abs_diff(m.forward(batch, {.all_logits = true}), base), 1e-4);
  std::copy_n(saved.f32(), saved.numel(), gate.f32());
  Tensor sg = w.layers[2].moe.shared_expert_gate.weight;
  ASSERT_TRUE(sg.defined());
  for (int64_t j = 0; j < sg.numel(); ++j) sg.f32()[j] += 0.5f;
  EXPECT_GT(max_abs_diff(m.forward(batch, {.all_logits = true}), base), 1e-4);
}

// The shared expert and its sigmoid gate in the layer backward, against central differences (support/moe_fd_check.h).
TEST(Qwen35, SharedExpertBackwardMatchesFiniteDifferences) {
  test::MoeFdCheck c(/*tokens=*/5, /*hidden=*/8, /*expert_width=*/6, MoeDims{4, 2, true}, /*stream=*/900,
                     /*shared_width=*/5);
  ASSERT_TRUE(c.g.has_shared_expert());
  c.check(c.x, c.dx, "x");
  c.check(c.w.shared_expert_gate.weight, c.g.shared_expert_gate.weight, "shared_expert_gate");
  c.check(c.w.shared_expert.gate_proj.weight, c.g.shared_expert.gate_proj.weight, "shared_expert.gate_proj");
  c.check(c.w.shared_expert.up_proj.weight, c.g.shared_expert.up_proj.weight, "shared_expert.up_proj");
  c.check(c.w.shared_expert.down_proj.weight, c.g.shared_expert.down_proj.weight, "shared_expert.down_proj");
  c.check(c.w.router.weight, c.g.router.weight, "router");
  EXPECT_LT(c.skipped, c.checked / 10) << "too many perturbations switched experts";
}

// Chunked prefill then token-by-token decode on the CPU engine gives the full forward's logits (gated attention over
// the KV cache, GDN from its carried state, both architectures).
TEST(Qwen35, EnginePrefillAndDecodeMatchFullForward) {
  for (const int kind : {0, 1, 2}) {
    const bool moe = kind >= 1;
    Model m = created(moe, kind == 2);
    const std::vector<int32_t> ids{5, 17, 70, 3, 9, 42, 7, 64, 12, 1, 33, 8, 19};
    TokenBatch all;
    all.add_sequence(ids);
    const Tensor expect = m.forward(all, {.all_logits = true}).clone();
    const int64_t V = m.config().vocab_size, L = static_cast<int64_t>(ids.size());
    MemoryRequest r;
    r.max_sequences = 1;
    r.block_size = 4;
    r.kv_blocks = (L + 3) / 4;
    auto engine = make_cpu_engine(m, memory_plan_build(m.config(), r));
    const int slot = engine->open_sequence(L);
    ASSERT_GE(slot, 0);
    double worst = 0.0;
    for (int64_t begin = 0; begin < L;) {
      const int64_t end = begin < 6 ? std::min<int64_t>(6, begin + 4) : begin + 1;  // chunks of 4, 2, then decode
      TokenBatch b;
      b.add_sequence(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end));
      const std::vector<int> slots{slot};
      const Tensor logits = engine->step(slots, b);
      const float* row = expect.f32() + (end - 1) * V;
      double diff = 0.0, scale = 0.0;
      for (int64_t v = 0; v < V; ++v) {
        diff = std::max(diff, std::abs(double(logits.f32()[v]) - double(row[v])));
        scale = std::max(scale, std::abs(double(row[v])));
      }
      worst = std::max(worst, diff / (1.0 + scale));
      begin = end;
    }
    // As test_engine_parity.cpp: same ops, only the projections' row counts (GEMM blocking) differ.
    const char* name = kind == 0 ? "qwen3_5" : kind == 1 ? "qwen3_5_moe" : "qwen3_next";
    EXPECT_LT(worst, 2e-4) << name;
    std::printf("  %s: prefill + decode vs full forward, worst row error %.2e\n", name, worst);
  }
}

// `inspect` on a Qwen3.5-MoE checkpoint in transformers' layout (model.language_model. prefix, stacked experts): the
// layer layout, the state-size accounting (Olmo Hybrid Table 1: KV per token of the full layers, the GDN matrix
// state Hv·dk·dv and conv state (2·Hk·dk + Hv·dv)·(K−1)), experts, and the mtp tensor reported unused.
TEST(Qwen35, InspectReportsLayoutStateAndExperts) {
  Model m = created(true);
  test::ScratchDir scratch("qwen35-inspect");
  checkpoint_write(scratch.path(), hf_layout(m), {{"format", "pt"}});
  const json config = {{"model_type", "qwen3_5_moe"}, {"text_config", model_config_to_json(m.config())}};
  file_write_atomic(scratch.path() / "config.json", config.dump(2));
  const auto r = test::run_hybridlm("inspect " + scratch.path().string() + " --json --context 100");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["model_type"], "qwen3_5_moe_text");
  EXPECT_EQ(j["layout"], "RARA");
  EXPECT_EQ(j["memory"]["full_attention"]["kv_elements_per_token"], 2 * 2 * 12);
  EXPECT_EQ(j["memory"]["linear_attention"]["state_elements"], 4 * 8 * 6);
  EXPECT_EQ(j["memory"]["linear_attention"]["conv_state_elements"], (2 * 2 * 8 + 4 * 6) * 3);
  EXPECT_EQ(j["moe"]["ffn_layout"], "MMMM");
  // Active parameters leave out the 5 − 2 unchosen experts of each layer; the shared expert always runs.
  EXPECT_EQ(j["parameters"].get<int64_t>() - j["active_parameters_per_token"].get<int64_t>(), 4 * 3 * 3 * 32 * 10);
  EXPECT_NE(r.out.find("mtp.norm.weight"), std::string::npos) << "the unused mtp tensor is not reported";
}
