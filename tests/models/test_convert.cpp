// convert_to_hybrid (models/convert.h), one check per fact of the seed's Algorithm 1 initialisation, on the committed
// Qwen3 goldens: qwen3_untied (3 layers, H = 4 query / H_kv = 2 kv heads of 16, so G = 2; attention biases) and
// qwen3_tied (2 layers, tied embedding). Layer 1 of qwen3_untied stays full attention, layers 0 and 2 become GDN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/error.h"
#include "models/convert.h"
#include "models/tensor_table.h"
#include "support/golden.h"
#include "support/run_binary.h"

using namespace hlm;

namespace {

const std::vector<int> kUntiedFull = {1};  // qwen3_untied: R A R

Model load_teacher(const char* name) { return Model::load(test::golden_dir(name)); }

bool same_bits(const Tensor& a, const Tensor& b) {
  if (!(a.shape() == b.shape())) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.f32(), cb.f32(), ca.nbytes()) == 0;
}

// name -> tensor (runtime shape) of every tensor the model's config names.
std::map<std::string, Tensor> tensors_of(const Model& m) {
  std::map<std::string, Tensor> out;
  DecoderWeights& w = const_cast<DecoderWeights&>(m.weights());  // read only
  for (const TensorSpec& spec : expected_tensors(m.config())) out[spec.name] = spec.row->slot(w, spec.layer);
  return out;
}

const GdnWeights& gdn(const Model& m, int layer) { return m.weights().layers[static_cast<size_t>(layer)].linear_attn; }
const AttentionWeights& attn(const Model& m, int layer) {
  return m.weights().layers[static_cast<size_t>(layer)].self_attn;
}

class Convert : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    teacher_ = new Model(load_teacher("qwen3_untied"));
    student_ = new Model(convert_to_hybrid(*teacher_, kUntiedFull, {}));
  }
  static void TearDownTestSuite() {
    delete student_;
    delete teacher_;
  }
  static Model* teacher_;
  static Model* student_;
};
Model* Convert::teacher_ = nullptr;
Model* Convert::student_ = nullptr;

}  // namespace

TEST_F(Convert, StudentConfigFollowsAlgorithm1) {
  const ModelConfig& t = teacher_->config();
  const ModelConfig& s = student_->config();
  EXPECT_EQ(s.model_type, "qwen3_hybrid");
  EXPECT_EQ(s.architecture, Architecture::Qwen3Hybrid);
  EXPECT_FALSE(s.tie_word_embeddings);
  EXPECT_EQ(s.layer_types, (std::vector<std::string>{"linear_attention", "full_attention", "linear_attention"}));
  ASSERT_TRUE(s.linear.has_value());
  EXPECT_EQ(s.linear->num_key_heads, t.num_attention_heads);  // H heads (line 9) ...
  EXPECT_EQ(s.linear->num_value_heads, t.num_attention_heads);
  EXPECT_EQ(s.linear->key_head_dim, t.head_dim);  // ... of dimension d_h, values too (App. C.4)
  EXPECT_EQ(s.linear->value_head_dim, t.head_dim);
  EXPECT_EQ(s.linear->conv_kernel_dim, 4);  // Table C.3
  EXPECT_FALSE(s.linear->allow_neg_eigval);
  for (auto [a, b] : {std::pair{s.vocab_size, t.vocab_size}, {s.hidden_size, t.hidden_size},
                      {s.intermediate_size, t.intermediate_size}, {s.num_hidden_layers, t.num_hidden_layers},
                      {s.num_attention_heads, t.num_attention_heads}, {s.num_key_value_heads, t.num_key_value_heads},
                      {s.head_dim, t.head_dim}, {s.max_position_embeddings, t.max_position_embeddings}})
    EXPECT_EQ(a, b);
  EXPECT_EQ(s.attention_bias, t.attention_bias);
  EXPECT_EQ(s.rms_norm_eps, t.rms_norm_eps);
  EXPECT_EQ(s.rope.rope_theta, t.rope.rope_theta);
  EXPECT_EQ(s.rope.rope_type, t.rope.rope_type);
  EXPECT_TRUE(convert_student_config(t, kUntiedFull, {.neg_eigval = true}).linear->allow_neg_eigval);
}

TEST_F(Convert, FullLayerListIsHonoured) {
  for (const std::vector<int>& full : {std::vector<int>{0}, {2}, {0, 2}, {2, 0}, {0, 1, 2}}) {
    const ModelConfig s = convert_student_config(teacher_->config(), full, {});
    const std::set<int> want(full.begin(), full.end());
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(s.layer_kinds[static_cast<size_t>(i)],
                want.count(i) ? LayerKind::FullAttention : LayerKind::LinearAttention)
          << i;
  }
  for (const std::vector<int>& bad : {std::vector<int>{}, {3}, {-1}, {1, 1}})
    EXPECT_THROW(convert_student_config(teacher_->config(), bad, {}), Error);
}

TEST_F(Convert, CopiedTensorsAreBitwiseEqualAndNotShared) {
  const auto t = tensors_of(*teacher_);
  int copied = 0;
  for (const auto& [name, value] : tensors_of(*student_)) {
    const auto it = t.find(name);
    if (it == t.end()) continue;
    EXPECT_TRUE(same_bits(value, it->second)) << name;
    EXPECT_NE(value.raw(), it->second.raw()) << name << " shares the teacher's storage";
    ++copied;
  }
  // embed, final norm, 3 x (2 norms + 3 MLP matrices), layer 1's attention (4 weights, 4 biases, q/k norm), lm_head
  EXPECT_EQ(copied, 1 + 1 + 3 * 5 + 10 + 1);
}

TEST_F(Convert, FullAttentionLayerIsTheTeachers) {
  const AttentionWeights& s = attn(*student_, 1);
  const AttentionWeights& t = attn(*teacher_, 1);
  for (auto [a, b] : {std::pair{&s.q_proj, &t.q_proj}, {&s.k_proj, &t.k_proj}, {&s.v_proj, &t.v_proj},
                      {&s.o_proj, &t.o_proj}}) {
    EXPECT_TRUE(same_bits(a->weight, b->weight));
    EXPECT_TRUE(same_bits(a->bias, b->bias));
  }
  EXPECT_TRUE(same_bits(s.q_norm, t.q_norm));
  EXPECT_TRUE(same_bits(s.k_norm, t.k_norm));
  EXPECT_FALSE(gdn(*student_, 1).q_proj.weight.defined());
}

TEST_F(Convert, QueryAndOutputProjectionsAreCopied) {  // line 10
  for (int layer : {0, 2}) {
    EXPECT_TRUE(same_bits(gdn(*student_, layer).q_proj.weight, attn(*teacher_, layer).q_proj.weight)) << layer;
    EXPECT_TRUE(same_bits(gdn(*student_, layer).o_proj.weight, attn(*teacher_, layer).o_proj.weight)) << layer;
  }
}

// line 11: W^(h) ← W_T^(⌊h/G⌋), G = 4 / 2: query heads 0,1 read kv head 0 and 2,3 read kv head 1.
TEST_F(Convert, KeyValueHeadsAreClonedPerQueryGroup) {
  const int64_t H = 4, G = 2, d_h = 16, D = 64;
  for (int layer : {0, 2}) {
    for (bool value : {false, true}) {
      const Tensor& s = value ? gdn(*student_, layer).v_proj.weight : gdn(*student_, layer).k_proj.weight;
      const Tensor& t = value ? attn(*teacher_, layer).v_proj.weight : attn(*teacher_, layer).k_proj.weight;
      ASSERT_EQ(s.shape(), (Shape{H * d_h, D}));
      for (int64_t h = 0; h < H; ++h)
        EXPECT_TRUE(same_bits(s.slice(0, h * d_h, (h + 1) * d_h), t.slice(0, (h / G) * d_h, (h / G + 1) * d_h)))
            << "layer " << layer << (value ? " v" : " k") << " head " << h;
      EXPECT_FALSE(same_bits(s.slice(0, 0, d_h), s.slice(0, 2 * d_h, 3 * d_h)));  // the two groups differ
    }
  }
}

TEST_F(Convert, ConvIsIdentity) {  // line 12: κ_j = δ_{j,K}
  for (int layer : {0, 2})
    for (const Tensor* conv : {&gdn(*student_, layer).q_conv, &gdn(*student_, layer).k_conv,
                               &gdn(*student_, layer).v_conv}) {
      ASSERT_EQ(conv->dim(0), 64);
      ASSERT_EQ(conv->dim(1), 4);
      for (int64_t c = 0; c < 64; ++c)
        for (int64_t j = 0; j < 4; ++j) ASSERT_EQ(conv->f32()[c * 4 + j], j == 3 ? 1.0f : 0.0f) << c << "," << j;
    }
}

TEST_F(Convert, ALogIsMinusFour) {  // line 13
  for (int layer : {0, 2}) {
    const Tensor& a = gdn(*student_, layer).A_log;
    ASSERT_EQ(a.numel(), 4);
    for (int64_t h = 0; h < 4; ++h) EXPECT_EQ(a.f32()[h], -4.0f);
  }
}

TEST_F(Convert, OutputNormIsOne) {  // line 14: γ = 1
  for (int layer : {0, 2}) {
    const Tensor& g = gdn(*student_, layer).o_norm;
    ASSERT_EQ(g.numel(), 16);
    for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(g.f32()[i], 1.0f);
  }
}

// line 14: W_a, W_β, W_z ~ U(−d^-1/2, d^-1/2), d = 64 (hidden size): bound 0.125.
TEST_F(Convert, GateProjectionsAreUniformInRange) {
  for (int layer : {0, 2}) {
    for (const Tensor* w : {&gdn(*student_, layer).a_proj.weight, &gdn(*student_, layer).b_proj.weight,
                            &gdn(*student_, layer).g_proj.weight}) {
      const float* p = w->f32();
      const auto [lo, hi] = std::minmax_element(p, p + w->numel());
      EXPECT_GE(*lo, -0.125f);
      EXPECT_LE(*hi, 0.125f);
      EXPECT_LT(*lo, -0.1f);  // 256+ draws cover the range
      EXPECT_GT(*hi, 0.1f);
    }
  }
  EXPECT_FALSE(same_bits(gdn(*student_, 0).a_proj.weight, gdn(*student_, 2).a_proj.weight));  // per-tensor streams
  EXPECT_FALSE(same_bits(gdn(*student_, 0).a_proj.weight, gdn(*student_, 0).b_proj.weight));
}

TEST_F(Convert, NewParametersDependOnlyOnTheSeed) {
  const Model again = convert_to_hybrid(*teacher_, kUntiedFull, {});
  const Model other = convert_to_hybrid(*teacher_, kUntiedFull, {.seed = 1});
  for (int layer : {0, 2}) {
    const GdnWeights& s = gdn(*student_, layer);
    for (auto [name, field] : {std::pair{"a_proj", &GdnWeights::a_proj}, {"b_proj", &GdnWeights::b_proj},
                               {"g_proj", &GdnWeights::g_proj}}) {
      EXPECT_TRUE(same_bits((s.*field).weight, (gdn(again, layer).*field).weight)) << name;
      EXPECT_FALSE(same_bits((s.*field).weight, (gdn(other, layer).*field).weight)) << name;
    }
    EXPECT_TRUE(same_bits(s.dt_bias, gdn(again, layer).dt_bias));
    EXPECT_FALSE(same_bits(s.dt_bias, gdn(other, layer).dt_bias));
  }
}

// line 15: b_Δ = softplus⁻¹(Δ), log Δ ~ U(log 1e-3, log 1e-1), so softplus(b_Δ) ∈ [1e-3, 1e-1].
TEST_F(Convert, DtBiasIsInverseSoftplusOfLogUniformDt) {
  std::set<float> values;
  for (int layer : {0, 2}) {
    const Tensor& b = gdn(*student_, layer).dt_bias;
    ASSERT_EQ(b.numel(), 4);
    for (int64_t h = 0; h < 4; ++h) {
      const double dt = std::log1p(std::exp(static_cast<double>(b.f32()[h])));
      // 1e-6 relative: the f32 rounding of b_Δ (|b| < 7) moves softplus(b) by at most ~1e-6 of itself.
      EXPECT_GE(dt, 1e-3 * (1 - 1e-6));
      EXPECT_LE(dt, 1e-1 * (1 + 1e-6));
      values.insert(b.f32()[h]);
    }
  }
  EXPECT_EQ(values.size(), 8u);  // every head draws its own Δ
}

TEST_F(Convert, UntiedTeacherHeadIsCopied) {
  EXPECT_TRUE(same_bits(student_->weights().lm_head.weight, teacher_->weights().lm_head.weight));
}

TEST(ConvertTied, HeadBecomesASeparateCopyOfTheEmbedding) {  // line 17, Table C.3 "LM head: untied"
  const Model teacher = load_teacher("qwen3_tied");
  ASSERT_TRUE(teacher.config().tie_word_embeddings);
  const Model student = convert_to_hybrid(teacher, {0}, {});
  EXPECT_FALSE(student.config().tie_word_embeddings);
  const Tensor& head = student.weights().lm_head.weight;
  EXPECT_TRUE(same_bits(head, teacher.weights().embed_tokens));
  EXPECT_TRUE(same_bits(student.weights().embed_tokens, teacher.weights().embed_tokens));
  EXPECT_NE(head.raw(), student.weights().embed_tokens.raw());  // trainable separately
  EXPECT_NE(head.raw(), teacher.weights().embed_tokens.raw());
}

TEST(ConvertDropped, QkNormsAndBiasesOfConvertedLayers) {
  const ModelConfig untied = load_model_config(test::golden_dir("qwen3_untied"));
  std::vector<std::string> want;
  for (int layer : {0, 2}) {
    const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
    for (const char* name : {"q_proj.bias", "k_proj.bias", "v_proj.bias", "o_proj.bias", "q_norm.weight",
                             "k_norm.weight"})
      want.push_back(p + name);
  }
  std::vector<std::string> got = convert_dropped_tensors(untied, kUntiedFull);
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  EXPECT_TRUE(convert_dropped_tensors(untied, {0, 1, 2}).empty());
  const ModelConfig tied = load_model_config(test::golden_dir("qwen3_tied"));
  EXPECT_EQ(convert_dropped_tensors(tied, {1}), (std::vector<std::string>{"model.layers.0.self_attn.q_norm.weight",
                                                                          "model.layers.0.self_attn.k_norm.weight"}));
}

TEST(ConvertRefuses, HybridTeachers) {
  const ModelConfig olmo = load_model_config(test::golden_dir("olmo_hybrid_tiny"));
  try {
    convert_student_config(olmo, {0}, {});
    FAIL() << "olmo_hybrid accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("olmo_hybrid"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("granite"), std::string::npos) << e.what();  // names the teachers it takes
  }
}

// A dense Granite teacher becomes a granite_hybrid student that keeps Granite's four multipliers (the golden's
// 6.0 / 0.3 / 0.1 / 4.0, tools/goldens/README.md) through the config, save and load.
TEST(ConvertGranite, StudentKeepsTheMultipliers) {
  const ModelConfig granite = load_model_config(test::golden_dir("granite"));
  ASSERT_EQ(granite.architecture, Architecture::Granite);
  const ModelConfig s = convert_student_config(granite, {0}, {});
  EXPECT_EQ(s.model_type, "granite_hybrid");
  EXPECT_EQ(s.architecture, Architecture::GraniteHybrid);
  EXPECT_EQ(s.embedding_multiplier, granite.embedding_multiplier);
  EXPECT_EQ(s.residual_multiplier, granite.residual_multiplier);
  EXPECT_EQ(s.attention_multiplier, granite.attention_multiplier);
  EXPECT_EQ(s.logits_scaling, granite.logits_scaling);
  EXPECT_EQ(s.mlp_bias, granite.mlp_bias);
  EXPECT_EQ(s.embedding_multiplier, 6.0);
  EXPECT_EQ(s.logits_scaling, 4.0);
  EXPECT_EQ(s.layer_types[0], "full_attention");
  for (size_t i = 1; i < s.layer_types.size(); ++i) EXPECT_EQ(s.layer_types[i], "linear_attention") << i;

  test::ScratchDir scratch("convert_granite");
  Model teacher = load_teacher("granite");
  const Model student = convert_to_hybrid(teacher, {0}, {});
  student.save(scratch.path());
  const Model loaded = Model::load(scratch.path());
  EXPECT_TRUE(loaded.unused_tensors().empty());
  EXPECT_EQ(loaded.config().model_type, "granite_hybrid");
  EXPECT_EQ(loaded.config().residual_multiplier, granite.residual_multiplier);
  EXPECT_EQ(loaded.config().attention_multiplier, granite.attention_multiplier);
  const TokenBatch batch = test::golden_batch(test::open_golden("granite"));
  Model m = Model::load(scratch.path());
  const Tensor logits = m.forward(batch, {.all_logits = true});
  ASSERT_EQ(logits.dim(0), batch.total_tokens());
  for (int64_t i = 0; i < logits.numel(); ++i) ASSERT_TRUE(std::isfinite(logits.f32()[i])) << i;
}

TEST_F(Convert, SaveLoadRoundTripIsExact) {
  test::ScratchDir scratch("convert");
  student_->save(scratch.path());
  const Model loaded = Model::load(scratch.path());
  EXPECT_TRUE(loaded.unused_tensors().empty());
  EXPECT_EQ(loaded.config().layer_types, student_->config().layer_types);
  EXPECT_FALSE(loaded.config().tie_word_embeddings);
  const auto a = tensors_of(*student_), b = tensors_of(loaded);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, value] : a) EXPECT_TRUE(same_bits(value, b.at(name))) << name;
}

TEST_F(Convert, StudentForwardRuns) {
  const TokenBatch batch = test::golden_batch(test::open_golden("qwen3_untied"));
  Model student = convert_to_hybrid(*teacher_, kUntiedFull, {.neg_eigval = true});
  const Tensor logits = student.forward(batch, {.all_logits = true});
  ASSERT_EQ(logits.dim(0), batch.total_tokens());
  ASSERT_EQ(logits.dim(1), 320);
  for (int64_t i = 0; i < logits.numel(); ++i) ASSERT_TRUE(std::isfinite(logits.f32()[i])) << i;
}

// F = every layer: nothing is converted, so the student is the teacher with an untied copy of its head. The forward
// runs the same code on the same bits; 1e-6 absolute leaves room only for a different summation order.
TEST(ConvertAllFull, StudentLogitsEqualTheTeachers) {
  // granite: the student must apply the teacher's four multipliers, or its logits differ (by logits_scaling alone 4x).
  for (const char* name : {"qwen3_tied", "qwen3_untied", "granite"}) {
    Model teacher = load_teacher(name);
    std::vector<int> all(static_cast<size_t>(teacher.config().num_hidden_layers));
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
    Model student = convert_to_hybrid(teacher, all, {});
    const TokenBatch batch = test::golden_batch(test::open_golden(name));
    const Tensor a = teacher.forward(batch, {.all_logits = true});
    const Tensor b = student.forward(batch, {.all_logits = true});
    ASSERT_EQ(a.shape(), b.shape());
    for (int64_t i = 0; i < a.numel(); ++i) ASSERT_NEAR(a.f32()[i], b.f32()[i], 1e-6) << name << " " << i;
  }
}
