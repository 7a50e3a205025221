// Backward of the dense layers (layers/attention_layer.h, layers/mlp_layer.h): finite-difference gradient checks of
// the whole layer in double (every parameter element and the input), float entry points against the double
// reference, the accumulate (+=) / overwrite contracts, gradient shapes (undefined stays undefined) and thread-count
// independence.
// Attention configurations: (a) Qwen-style per-head q/k norm + RoPE + biases on every projection, (b) OLMo-style
// norm over the whole projection, no RoPE, no bias. Both GQA (4 query heads over 2 kv heads) on packed sequences of
// 3, 1 and 4 tokens.
// FD tolerance as tests/ops/test_backward_refs.cpp: eps = 1e-6 in double gives truncation ≈ 1e-12·|L'''| and
// rounding ≈ 1e-10 errors, so |fd − analytic| ≤ 1e-7·max(1, max|grad|) while a wrong term shows at ≥ 1e-3.
// kTolFloatVsDouble (float entry points vs the double reference on the same fp32 weights): fp32 GEMMs over ≤ 16 terms
// and fp32 attention scores give ~1e-7 relative errors, amplified by the q/k RMSNorm over short vectors and the
// softmax; measured ≤ 2.6e-7 (see the printed values), 3e-6 leaves > 10x margin while any indexing error is O(1).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "layers/attention_layer.h"
#include "layers/mlp_layer.h"
#include "support/finite_diff.h"
#include "support/random.h"

using namespace hlm;

namespace {

using test::dot;
using test::fd_check;

constexpr double kTolFloatVsDouble = 3e-6;

std::vector<double> widen(const Tensor& t) {
  return t.defined() ? std::vector<double>(t.f32(), t.f32() + t.numel()) : std::vector<double>{};
}
std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

void fill_random(Tensor& t, uint64_t stream, float sd, float mean = 0.0f) {
  const auto v = test::random_vector(static_cast<size_t>(t.numel()), stream, sd, 31);
  for (size_t i = 0; i < v.size(); ++i) t.f32()[i] = mean + v[i];
}

// max |float − double| / max |double|.
double rel_err(const float* f, const std::vector<double>& d) {
  double diff = 0.0, ref = 1e-30;
  for (size_t i = 0; i < d.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(f[i]) - d[i]));
    ref = std::max(ref, std::abs(d[i]));
  }
  return diff / ref;
}

// ---- attention ----

enum class QkNorm { None, PerHead, Whole };

struct AttnConfig {
  AttentionDims dims{4, 2, 4, 0.5f, 1e-6f};
  int64_t hidden = 6;
  bool bias = false;
  QkNorm norm = QkNorm::None;
  bool rope = false;
  bool gate = false;              // output gate (Qwen3.5): out = o_proj(o ⊙ σ(x·gate_projᵀ))
  double partial_rotary = 1.0;    // rope over the first head_dim · factor dims only
  std::vector<int64_t> lengths{3, 1, 4};
};

AttentionWeights random_attention(const AttnConfig& c) {
  const int64_t D = c.dims.head_dim, Cq = c.dims.q_heads * D, Ckv = c.dims.kv_heads * D;
  AttentionWeights w;
  w.q_proj.weight = Tensor::zeros({Cq, c.hidden});
  w.k_proj.weight = Tensor::zeros({Ckv, c.hidden});
  w.v_proj.weight = Tensor::zeros({Ckv, c.hidden});
  w.o_proj.weight = Tensor::zeros({c.hidden, Cq});
  if (c.bias) {
    w.q_proj.bias = Tensor::zeros({Cq});
    w.k_proj.bias = Tensor::zeros({Ckv});
    w.v_proj.bias = Tensor::zeros({Ckv});
    w.o_proj.bias = Tensor::zeros({c.hidden});
  }
  if (c.gate) w.gate_proj.weight = Tensor::zeros({Cq, c.hidden});
  if (c.norm != QkNorm::None) {
    w.q_norm = Tensor::zeros({c.norm == QkNorm::PerHead ? D : Cq});
    w.k_norm = Tensor::zeros({c.norm == QkNorm::PerHead ? D : Ckv});
  }
  uint64_t stream = 100;
  for (auto& [name, t] : attention_param_tensors(w)) {
    if (!t->defined()) continue;
    const std::string n = name;
    if (n.find("norm") != std::string::npos) fill_random(*t, stream++, 0.2f, 1.0f);  // near the init value 1
    else fill_random(*t, stream++, n.find("bias") != std::string::npos ? 0.3f : 0.5f);
  }
  return w;
}

TokenBatch make_batch(const std::vector<int64_t>& lengths) {
  TokenBatch b;
  for (int64_t n : lengths) b.add_sequence(std::vector<int32_t>(static_cast<size_t>(n), 0));
  return b;
}

// The layer in double, built from float weights (exact widening).
struct DoubleAttention {
  AttnConfig cfg;
  TokenBatch batch;
  std::vector<int32_t> positions;
  RopeTable table;
  std::array<std::vector<double>, kAttentionParamCount> params;  // empty = absent
  std::vector<double> x, d_out;

  const RopeTable* rope() const { return cfg.rope ? &table : nullptr; }
  AttentionBatchView view() const {
    return {batch.total_tokens(), cfg.hidden, batch.cu_seqlens.data(), batch.num_sequences(), positions.data()};
  }
  template <class P, class V>
  static AttentionParamPtrs<P> ptrs(V& vecs) {
    AttentionParamPtrs<P> p{};
    const auto fields = attention_param_ptr_fields(p);
    for (size_t i = 0; i < kAttentionParamCount; ++i) *fields[i].second = vecs[i].empty() ? nullptr : vecs[i].data();
    p.q_norm_size = static_cast<int64_t>(vecs[8].size());  // rows 8, 9 of the table: q_norm, k_norm
    p.k_norm_size = static_cast<int64_t>(vecs[9].size());
    return p;
  }
  double loss() const {
    Arena arena(1 << 16);
    std::vector<double> out(x.size());
    attention_layer_forward_ref<double>(out.data(), x.data(), ptrs<const double*>(params), cfg.dims, rope(), view(),
                                        arena);
    return dot(out, d_out);
  }
  std::vector<double> backward(std::array<std::vector<double>, kAttentionParamCount>& grads) const {
    for (size_t i = 0; i < kAttentionParamCount; ++i) grads[i].assign(params[i].size(), 0.0);
    Arena arena(1 << 16);
    std::vector<double> dx(x.size());
    attention_layer_backward_ref<double>(dx.data(), ptrs<double*>(grads), d_out.data(), x.data(),
                                         ptrs<const double*>(params), cfg.dims, rope(), view(), arena);
    return dx;
  }
};

DoubleAttention make_double_attention(const AttnConfig& c, const AttentionWeights& w) {
  DoubleAttention L;
  L.cfg = c;
  L.batch = make_batch(c.lengths);
  L.positions = L.batch.positions();
  RopeParams rp;
  rp.rope_theta = 100.0;  // fast rotation: positions 0..3 turn the pairs visibly
  rp.partial_rotary_factor = c.partial_rotary;
  L.table = rope_table_build(rp, c.dims.head_dim, 64);
  const auto tensors = attention_param_tensors(w);
  for (size_t i = 0; i < kAttentionParamCount; ++i) L.params[i] = widen(*tensors[i].second);
  const auto n = static_cast<size_t>(L.batch.total_tokens() * c.hidden);
  L.x = widen(test::random_vector(n, 1, 1.0f, 32));
  L.d_out = widen(test::random_vector(n, 2, 1.0f, 32));
  return L;
}

void check_attention(const AttnConfig& c) {
  const AttentionWeights w = random_attention(c);
  DoubleAttention L = make_double_attention(c, w);
  std::array<std::vector<double>, kAttentionParamCount> grads;
  const std::vector<double> dx = L.backward(grads);
  const auto loss = [&] { return L.loss(); };
  fd_check(loss, L.x, dx, "x");
  AttentionParamPtrs<const double*> names{};
  const auto fields = attention_param_ptr_fields(names);
  for (size_t i = 0; i < kAttentionParamCount; ++i)
    if (!L.params[i].empty()) fd_check(loss, L.params[i], grads[i], fields[i].first);

  // Float entry points on the same fp32 weights and inputs; a second call accumulates exactly 2x (deterministic).
  const std::vector<float> xf(L.x.begin(), L.x.end()), dof(L.d_out.begin(), L.d_out.end());
  AttentionGrads g = attention_grads_like(w);
  std::vector<float> dxf(xf.size(), std::numeric_limits<float>::quiet_NaN());  // overwritten
  Arena arena(1 << 16);
  attention_layer_backward(dxf.data(), g, dof.data(), xf.data(), w, c.dims, L.rope(), L.batch, L.positions.data(),
                           arena);
  double worst = rel_err(dxf.data(), dx);
  EXPECT_LT(rel_err(dxf.data(), dx), kTolFloatVsDouble) << "dx";
  const auto gt = attention_param_tensors(g);
  for (size_t i = 0; i < kAttentionParamCount; ++i) {
    ASSERT_EQ(gt[i].second->defined(), !L.params[i].empty()) << gt[i].first;
    if (!gt[i].second->defined()) continue;
    EXPECT_LT(rel_err(gt[i].second->f32(), grads[i]), kTolFloatVsDouble) << gt[i].first;
    worst = std::max(worst, rel_err(gt[i].second->f32(), grads[i]));
  }
  std::printf("  float vs double: worst relative error %.1e\n", worst);
  std::vector<Tensor> first;
  for (const auto& [name, t] : gt) first.push_back(t->defined() ? t->clone() : Tensor{});
  std::vector<float> dx2(xf.size());
  attention_layer_backward(dx2.data(), g, dof.data(), xf.data(), w, c.dims, L.rope(), L.batch, L.positions.data(),
                           arena);
  EXPECT_EQ(dx2, dxf);
  for (size_t i = 0; i < kAttentionParamCount; ++i)
    for (int64_t j = 0; first[i].defined() && j < first[i].numel(); ++j)
      ASSERT_EQ(gt[i].second->f32()[j], 2 * first[i].f32()[j]) << gt[i].first << "[" << j << "]";
}

// ---- MLP ----

struct DoubleMlp {
  int64_t n = 4, hidden = 5, F = 7;
  std::array<std::vector<double>, kMlpParamCount> params;
  std::vector<double> x, d_out;

  template <class P, class V>
  static MlpParamPtrs<P> ptrs(V& vecs) {
    MlpParamPtrs<P> p{};
    const auto fields = mlp_param_ptr_fields(p);
    for (size_t i = 0; i < kMlpParamCount; ++i) *fields[i].second = vecs[i].empty() ? nullptr : vecs[i].data();
    return p;
  }
  double loss() const {
    Arena arena(1 << 16);
    std::vector<double> out(x.size());
    mlp_layer_forward_ref<double>(out.data(), x.data(), ptrs<const double*>(params), n, hidden, F, arena);
    return dot(out, d_out);
  }
  std::vector<double> backward(std::array<std::vector<double>, kMlpParamCount>& grads) const {
    for (size_t i = 0; i < kMlpParamCount; ++i) grads[i].assign(params[i].size(), 0.0);
    Arena arena(1 << 16);
    std::vector<double> dx(x.size());
    mlp_layer_backward_ref<double>(dx.data(), ptrs<double*>(grads), d_out.data(), x.data(),
                                   ptrs<const double*>(params), n, hidden, F, arena);
    return dx;
  }
};

MlpWeights random_mlp(int64_t hidden, int64_t F, bool bias) {
  MlpWeights w;
  w.gate_proj.weight = Tensor::zeros({F, hidden});
  w.up_proj.weight = Tensor::zeros({F, hidden});
  w.down_proj.weight = Tensor::zeros({hidden, F});
  if (bias) {
    w.gate_proj.bias = Tensor::zeros({F});
    w.up_proj.bias = Tensor::zeros({F});
    w.down_proj.bias = Tensor::zeros({hidden});
  }
  uint64_t stream = 300;
  for (auto& [name, t] : mlp_param_tensors(w))
    if (t->defined()) fill_random(*t, stream++, 0.6f);  // gate pre-activations ~N(0, 1.3²): curved part of silu
  return w;
}

}  // namespace

TEST(AttentionLayerBackward, PerHeadNormRopeBiasMatchesFiniteDifferences) {
  AttnConfig c;
  c.bias = true;
  c.norm = QkNorm::PerHead;
  c.rope = true;
  check_attention(c);
}

// Qwen3.5's gated attention: per-head norm, partial RoPE (4 of 8 dims rotate), sigmoid output gate, GQA 4:2.
TEST(AttentionLayerBackward, OutputGatePartialRopeMatchesFiniteDifferences) {
  AttnConfig c;
  c.dims = {4, 2, 8, 0.35f, 1e-6f};
  c.norm = QkNorm::PerHead;
  c.rope = true;
  c.gate = true;
  c.partial_rotary = 0.5;
  check_attention(c);
}

TEST(AttentionLayerBackward, WholeProjectionNormNoRopeMatchesFiniteDifferences) {
  AttnConfig c;
  c.norm = QkNorm::Whole;
  check_attention(c);
}

TEST(AttentionLayerBackward, ThreadIndependent) {
  AttnConfig c;
  c.dims = {8, 2, 16, 0.25f, 1e-6f};
  c.hidden = 32;
  c.bias = true;
  c.norm = QkNorm::PerHead;
  c.rope = true;
  c.lengths = {70, 1, 57};
  const AttentionWeights w = random_attention(c);
  const TokenBatch batch = make_batch(c.lengths);
  const auto pos = batch.positions();
  const RopeTable table = rope_table_build(RopeParams{}, 16, 256);
  const auto n = static_cast<size_t>(batch.total_tokens() * c.hidden);
  const auto x = test::random_vector(n, 5), d_out = test::random_vector(n, 6);
  const auto run = [&] {
    AttentionGrads g = attention_grads_like(w);
    std::vector<float> dx(n);
    Arena arena(1 << 20);
    attention_layer_backward(dx.data(), g, d_out.data(), x.data(), w, c.dims, &table, batch, pos.data(), arena);
    for (const auto& [name, t] : attention_param_tensors(g))
      if (t->defined()) dx.insert(dx.end(), t->f32(), t->f32() + t->numel());  // (no output gate here)
    return dx;
  };
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = run();
  omp_set_num_threads(3);
  const auto three = run();
  omp_set_num_threads(saved);
  EXPECT_EQ(one, three) << "attention_layer_backward depends on the thread count";
}

TEST(MlpLayerBackward, MatchesFiniteDifferencesWithAndWithoutBias) {
  for (bool bias : {false, true}) {
    std::printf(" bias=%d\n", bias);
    DoubleMlp L;
    const MlpWeights w = random_mlp(L.hidden, L.F, bias);
    const auto tensors = mlp_param_tensors(w);
    for (size_t i = 0; i < kMlpParamCount; ++i) L.params[i] = widen(*tensors[i].second);
    L.x = widen(test::random_vector(static_cast<size_t>(L.n * L.hidden), 7, 1.0f, 33));
    L.d_out = widen(test::random_vector(static_cast<size_t>(L.n * L.hidden), 8, 1.0f, 33));
    std::array<std::vector<double>, kMlpParamCount> grads;
    const auto dx = L.backward(grads);
    const auto loss = [&] { return L.loss(); };
    fd_check(loss, L.x, dx, "x");
    for (size_t i = 0; i < kMlpParamCount; ++i)
      if (!L.params[i].empty()) fd_check(loss, L.params[i], grads[i], tensors[i].first);

    // Float entry point: agrees with double, dx overwritten, grads accumulate, undefined biases stay undefined.
    const std::vector<float> xf(L.x.begin(), L.x.end()), dof(L.d_out.begin(), L.d_out.end());
    MlpGrads g = mlp_grads_like(w);
    std::vector<float> dxf(xf.size(), std::numeric_limits<float>::quiet_NaN());
    Arena arena(1 << 16);
    mlp_layer_backward(dxf.data(), g, dof.data(), xf.data(), w, L.n, arena);
    double worst = rel_err(dxf.data(), dx);
    const auto gt = mlp_param_tensors(g);
    for (size_t i = 0; i < kMlpParamCount; ++i) {
      ASSERT_EQ(gt[i].second->defined(), !L.params[i].empty()) << gt[i].first;
      if (gt[i].second->defined()) worst = std::max(worst, rel_err(gt[i].second->f32(), grads[i]));
    }
    // fp32 GEMMs over ≤ 7 terms, silu in double: measured ≤ 2.5e-7.
    EXPECT_LT(worst, kTolFloatVsDouble);
    std::printf("  float vs double: worst relative error %.1e\n", worst);
    const Tensor first = g.gate_proj.weight.clone();
    mlp_layer_backward(dxf.data(), g, dof.data(), xf.data(), w, L.n, arena);
    for (int64_t j = 0; j < first.numel(); ++j) EXPECT_EQ(g.gate_proj.weight.f32()[j], 2 * first.f32()[j]);
  }
}
