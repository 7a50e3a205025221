// Gated DeltaNet layer (layers/gdn_layer.h): finite-difference gradient check of the whole layer in double (every
// parameter and the input, with and without an initial state, neg_eigval on and off), float entry points against the
// double reference, prefill + decode == longer prefill (conv and recurrent state), continued prefill, packed ==
// separate sequences, gradient accumulation and the parameter tables.
// FD tolerance as in tests/ops/test_gated_delta_rule_grad.cpp: eps = 1e-6 in double gives truncation ≈ 1e-12·|L'''|
// and rounding ≈ 1e-10 errors, so |fd − analytic| ≤ 1e-7·max(1, max|grad|) while a wrong term shows at ≥ 1e-3. The
// tiny random problem is ill-conditioned in places (a short k̃ row gives |dL/dk_proj| ≈ 3.6e3 and a large L'''): the
// worst measured error/tolerance ratio is 0.11 (dk_proj, neg_eigval with state); all others are ≤ 0.01.
// Float tolerances. kTolFloat (float path vs float path, other batch splits / decode): every op accumulates in double
// and rounds once to fp32, the GEMMs accumulate in fp32 over K ≤ 16, so only rounding and GEMM blocking differ
// (measured ≤ 3e-7 max-rel); 1e-5 leaves 30x margin and any indexing/state error is O(1).
// kTolFloatVsDouble (float entry points vs the double reference on the same fp32 weights): the fp32 roundings of
// q̃, k̃, o are amplified by the L2 norm over dk and the RMS norm over dv when a short vector is small through
// cancellation (the relative error of k/|k| is ≈ u·|terms|/|k̃|); measured ≤ 2e-6 on kDims (7e-6 on the even
// smaller FD configuration, which is why that one is checked in double only); 2e-5 leaves 10x margin.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "layers/gdn_layer.h"
#include "support/finite_diff.h"
#include "support/random.h"

using namespace hlm;

namespace {

constexpr double kTolFloat = 1e-5, kTolFloatVsDouble = 2e-5;

TokenBatch make_batch(const std::vector<int64_t>& lengths) {
  TokenBatch b;
  for (int64_t n : lengths) b.add_sequence(std::vector<int32_t>(static_cast<size_t>(n), 0));
  return b;
}

// Random weights that keep every nonlinearity in its sensitive range.
GdnWeights random_weights(const GdnDims& d, int64_t hidden, uint64_t seed) {
  GdnWeights w = GdnWeights::zeros(d, hidden);
  uint64_t stream = 100;
  for (auto& [name, t] : gdn_param_tensors(w)) {
    const std::string n = name;
    const size_t size = static_cast<size_t>(t->numel());
    float mean = 0.0f, sd = 0.5f;
    if (n == "A_log") mean = -1.0f, sd = 1.0f;          // A ∈ ~(0.05, 2.7): slow and fast decay heads
    if (n == "o_norm.weight") mean = 1.0f, sd = 0.1f;  // near the init value 1
    if (n.find("conv") != std::string::npos) sd = 0.4f;
    const auto v = test::random_vector(size, stream++, sd, seed);
    for (size_t i = 0; i < size; ++i) t->f32()[i] = mean + v[i];
  }
  return w;
}

GdnState random_state(const GdnDims& d, int64_t n_seqs, uint64_t seed) {
  GdnState s = GdnState::zeros(d, n_seqs);
  uint64_t stream = 200;
  for (Tensor* t : {&s.q_conv, &s.k_conv, &s.v_conv, &s.recurrent}) {
    const auto v = test::random_vector(static_cast<size_t>(t->numel()), stream++, 0.5f, seed);
    std::copy(v.begin(), v.end(), t->f32());
  }
  return s;
}

std::vector<double> widen(const float* p, int64_t n) { return std::vector<double>(p, p + n); }
std::vector<double> widen(const Tensor& t) { return widen(t.f32(), t.numel()); }

// The layer in double, built from float weights/state (exact widening).
struct DoubleLayer {
  GdnDims dims;
  int64_t hidden = 0;
  std::vector<int64_t> cu;
  std::array<std::vector<double>, kGdnParamCount> params;
  std::array<std::vector<double>, 4> state;  // q_conv, k_conv, v_conv, recurrent; empty = no initial state
  std::vector<double> x, d_out;

  GdnParamPtrs<const double*> weights() const {
    GdnParamPtrs<const double*> p{};
    auto fields = gdn_param_ptr_fields(p);
    for (size_t i = 0; i < kGdnParamCount; ++i) *fields[i].second = params[i].data();
    return p;
  }
  GdnBatchView view() const { return {cu.back(), hidden, cu.data(), static_cast<int64_t>(cu.size()) - 1}; }
  bool has_state() const { return !state[0].empty(); }

  std::vector<double> forward() const {
    Arena arena(1 << 16);
    std::vector<double> out(x.size());
    auto st = state;  // the forward updates the state in place: work on a copy
    GdnStatePtrs<double> sp{st[0].data(), st[1].data(), st[2].data(), st[3].data()};
    gdn_layer_forward_ref<double>(out.data(), x.data(), weights(), dims, view(), has_state() ? &sp : nullptr, arena);
    return out;
  }
  double loss() const {
    const auto out = forward();
    double L = 0.0;
    for (size_t i = 0; i < out.size(); ++i) L += out[i] * d_out[i];
    return L;
  }
  // Returns dx; grads[i] receive the parameter gradients (accumulated onto zeros).
  std::vector<double> backward(std::array<std::vector<double>, kGdnParamCount>& grads) const {
    GdnParamPtrs<double*> g{};
    auto fields = gdn_param_ptr_fields(g);
    for (size_t i = 0; i < kGdnParamCount; ++i) {
      grads[i].assign(params[i].size(), 0.0);
      *fields[i].second = grads[i].data();
    }
    Arena arena(1 << 16);
    std::vector<double> dx(x.size());
    GdnStatePtrs<const double> sp{state[0].data(), state[1].data(), state[2].data(), state[3].data()};
    gdn_layer_backward_ref<double>(dx.data(), g, d_out.data(), x.data(), weights(), dims, view(),
                                   has_state() ? &sp : nullptr, arena);
    return dx;
  }
};

DoubleLayer make_double_layer(const GdnDims& d, int64_t hidden, std::vector<int64_t> cu, bool with_state) {
  DoubleLayer L;
  L.dims = d;
  L.hidden = hidden;
  L.cu = std::move(cu);
  const GdnWeights w = random_weights(d, hidden, 7);
  const auto tensors = gdn_param_tensors(w);
  for (size_t i = 0; i < kGdnParamCount; ++i) L.params[i] = widen(*tensors[i].second);
  const int64_t T = L.cu.back(), N = static_cast<int64_t>(L.cu.size()) - 1;
  if (with_state) {
    const GdnState s = random_state(d, N, 8);
    L.state = {widen(s.q_conv), widen(s.k_conv), widen(s.v_conv), widen(s.recurrent)};
  }
  L.x = widen(test::random_vector(static_cast<size_t>(T * hidden), 1, 1.0f, 9).data(), T * hidden);
  L.d_out = widen(test::random_vector(static_cast<size_t>(T * hidden), 2, 1.0f, 9).data(), T * hidden);
  return L;
}

void fd_check(DoubleLayer& L, std::vector<double>& x, const std::vector<double>& analytic, const std::string& name) {
  test::fd_check([&] { return L.loss(); }, x, analytic, name);
}

// A bigger configuration for the float tests: D = 16, Hk = 2, Hv = 4, dk = 4, dv = 3, K = 4.
const GdnDims kDims{2, 4, 4, 3, 4, true, 1e-6f, 0.0f};
constexpr int64_t kHidden = 16;

// The tiny configuration of the issue: D = 6, Hk = 1, Hv = 2 (GVA), dk = 3, dv = 2, K = 4.
GdnDims tiny_dims(bool neg_eigval) { return {1, 2, 3, 2, 4, neg_eigval, 1e-5f, 0.0f}; }

double max_rel(const std::vector<float>& a, const std::vector<float>& ref) {
  return test::max_rel_error(a.data(), ref.data(), ref.size());
}

struct FloatRun {
  std::vector<float> out, dx;
  GdnGrads grads;
};

FloatRun run_float(const GdnWeights& w, const GdnDims& d, const std::vector<int64_t>& lengths,
                   const std::vector<float>& x, const std::vector<float>& d_out, const GdnState* state = nullptr) {
  const TokenBatch batch = make_batch(lengths);
  Arena arena(1 << 16);
  FloatRun r{std::vector<float>(x.size()), std::vector<float>(x.size()), GdnGrads::zeros_like(w)};
  GdnState st = state ? state->clone() : GdnState{};
  gdn_layer_forward(r.out.data(), x.data(), w, d, batch, state ? &st : nullptr, arena);
  gdn_layer_backward(r.dx.data(), r.grads, d_out.data(), x.data(), w, d, batch, state, arena);
  return r;
}

}  // namespace

TEST(GdnLayer, BackwardMatchesFiniteDifferences) {
  // T = 9 in two sequences (4 + 5). neg_eigval off: zero initial state; on: a random initial state (conv + recurrent).
  for (bool neg : {false, true}) {
    std::printf(" neg_eigval=%d initial_state=%d\n", neg, neg);
    DoubleLayer L = make_double_layer(tiny_dims(neg), 6, {0, 4, 9}, neg);
    std::array<std::vector<double>, kGdnParamCount> grads;
    const std::vector<double> dx = L.backward(grads);
    fd_check(L, L.x, dx, "x");
    GdnParamPtrs<const double*> names{};
    const auto fields = gdn_param_ptr_fields(names);
    for (size_t i = 0; i < kGdnParamCount; ++i) fd_check(L, L.params[i], grads[i], fields[i].first);
  }
}

TEST(GdnLayer, FloatEntryPointsMatchDoubleReference) {
  for (bool with_state : {false, true}) {
    GdnDims d = kDims;
    d.neg_eigval = with_state;
    const DoubleLayer L = make_double_layer(d, kHidden, {0, 4, 9}, with_state);
    std::array<std::vector<double>, kGdnParamCount> grads;
    const auto out_ref = L.forward();
    const auto dx_ref = L.backward(grads);
    const GdnWeights w = random_weights(d, kHidden, 7);  // the same values, in float
    const GdnState st = random_state(d, 2, 8);
    const std::vector<float> x(L.x.begin(), L.x.end()), d_out(L.d_out.begin(), L.d_out.end());
    const FloatRun r = run_float(w, d, {4, 5}, x, d_out, with_state ? &st : nullptr);
    const auto narrow = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    double worst = std::max(max_rel(r.out, narrow(out_ref)), max_rel(r.dx, narrow(dx_ref)));
    const auto g = gdn_param_tensors(r.grads);
    for (size_t i = 0; i < kGdnParamCount; ++i) {
      const std::vector<float> got(g[i].second->f32(), g[i].second->f32() + g[i].second->numel());
      const double err = max_rel(got, narrow(grads[i]));
      EXPECT_LT(err, kTolFloatVsDouble) << g[i].first;
      worst = std::max(worst, err);
    }
    EXPECT_LT(worst, kTolFloatVsDouble);
    std::printf("  state=%d: float vs double, worst max-rel over out, dx, grads = %.2e\n", with_state, worst);
  }
}

namespace {

// Rows [begin, begin + n) of a [T, kHidden] buffer.
std::vector<float> rows(const std::vector<float>& x, int64_t begin, int64_t n) {
  return {x.begin() + begin * kHidden, x.begin() + (begin + n) * kHidden};
}

std::vector<float> forward(const GdnWeights& w, const std::vector<int64_t>& lengths, const std::vector<float>& x,
                           GdnState* state) {
  Arena arena(1 << 16);
  std::vector<float> out(x.size());
  gdn_layer_forward(out.data(), x.data(), w, kDims, make_batch(lengths), state, arena);
  return out;
}

double state_rel_error(const GdnState& a, const GdnState& b) {
  double worst = 0.0;
  const Tensor* ta[] = {&a.q_conv, &a.k_conv, &a.v_conv, &a.recurrent};
  const Tensor* tb[] = {&b.q_conv, &b.k_conv, &b.v_conv, &b.recurrent};
  for (int i = 0; i < 4; ++i)
    worst = std::max(worst, test::max_rel_error(ta[i]->f32(), tb[i]->f32(), static_cast<size_t>(tb[i]->numel())));
  return worst;
}

}  // namespace

TEST(GdnLayer, PrefillThenDecodeEqualsLongerPrefill) {
  // Two sequences of 6 and 5 tokens (x rows 0-5 and 6-10). Reference: one prefill of [6, 5] from zero state.
  const GdnWeights w = random_weights(kDims, kHidden, 3);
  const auto x = test::random_vector(11 * kHidden, 5);
  GdnState full_state = GdnState::zeros(kDims, 2);
  const auto full = forward(w, {6, 5}, x, &full_state);

  // Prefill [5, 4], then decode one token per sequence.
  GdnState st = GdnState::zeros(kDims, 2);
  auto xp = rows(x, 0, 5), x2 = rows(x, 6, 4);
  xp.insert(xp.end(), x2.begin(), x2.end());
  const auto out_p = forward(w, {5, 4}, xp, &st);
  auto xd = rows(x, 5, 1), xd2 = rows(x, 10, 1);
  xd.insert(xd.end(), xd2.begin(), xd2.end());
  const auto out_d = forward(w, {1, 1}, xd, &st);
  auto expect_p = rows(full, 0, 5), e2 = rows(full, 6, 4), expect_d = rows(full, 5, 1), e3 = rows(full, 10, 1);
  expect_p.insert(expect_p.end(), e2.begin(), e2.end());
  expect_d.insert(expect_d.end(), e3.begin(), e3.end());
  const double e_p = max_rel(out_p, expect_p), e_d = max_rel(out_d, expect_d), e_s = state_rel_error(st, full_state);
  EXPECT_LT(e_p, kTolFloat);
  EXPECT_LT(e_d, kTolFloat);
  EXPECT_LT(e_s, kTolFloat);
  std::printf("  prefill [5,4] + decode 1 vs prefill [6,5]: out %.1e, decoded %.1e, final state %.1e\n", e_p, e_d,
              e_s);
}

TEST(GdnLayer, TokenByTokenDecodeAndContinuedPrefillEqualPrefill) {
  // Two sequences of 7 tokens: decoding from zero state token by token (conv history shorter than K-1 at first),
  // and continued prefill [3, 2] + [4, 5], both reproduce one prefill of [7, 7].
  const GdnWeights w = random_weights(kDims, kHidden, 4);
  const auto x = test::random_vector(14 * kHidden, 6);
  GdnState full_state = GdnState::zeros(kDims, 2);
  const auto full = forward(w, {7, 7}, x, &full_state);

  GdnState st = GdnState::zeros(kDims, 2);
  double e_out = 0.0;
  for (int64_t t = 0; t < 7; ++t) {
    auto xt = rows(x, t, 1), x2 = rows(x, 7 + t, 1), expect = rows(full, t, 1), e2 = rows(full, 7 + t, 1);
    xt.insert(xt.end(), x2.begin(), x2.end());
    expect.insert(expect.end(), e2.begin(), e2.end());
    e_out = std::max(e_out, max_rel(forward(w, {1, 1}, xt, &st), expect));
  }
  const double e_state = state_rel_error(st, full_state);
  EXPECT_LT(e_out, kTolFloat);
  EXPECT_LT(e_state, kTolFloat);

  GdnState cs = GdnState::zeros(kDims, 2);
  auto xa = rows(x, 0, 3), xa2 = rows(x, 7, 2), xb = rows(x, 3, 4), xb2 = rows(x, 9, 5);
  xa.insert(xa.end(), xa2.begin(), xa2.end());
  xb.insert(xb.end(), xb2.begin(), xb2.end());
  forward(w, {3, 2}, xa, &cs);
  const auto out_b = forward(w, {4, 5}, xb, &cs);
  auto expect_b = rows(full, 3, 4), eb2 = rows(full, 9, 5);
  expect_b.insert(expect_b.end(), eb2.begin(), eb2.end());
  const double e_cont = max_rel(out_b, expect_b), e_cstate = state_rel_error(cs, full_state);
  EXPECT_LT(e_cont, kTolFloat);
  EXPECT_LT(e_cstate, kTolFloat);
  std::printf("  token-by-token decode: out %.1e, state %.1e; continued prefill: out %.1e, state %.1e\n", e_out,
              e_state, e_cont, e_cstate);
}

TEST(GdnLayer, PackedEqualsSeparateAndGradsAccumulate) {
  // Sequences of 5, 4 and 1 tokens: packed forward/backward == per-sequence runs (outputs, dx, summed grads).
  const GdnWeights w = random_weights(kDims, kHidden, 5);
  const auto x = test::random_vector(10 * kHidden, 7), d_out = test::random_vector(10 * kHidden, 8);
  const FloatRun packed = run_float(w, kDims, {5, 4, 1}, x, d_out);
  std::vector<float> out, dx;
  GdnGrads sum = GdnGrads::zeros_like(w);
  Arena arena(1 << 16);
  int64_t begin = 0;
  for (int64_t len : {5, 4, 1}) {
    const auto xs = rows(x, begin, len), ds = rows(d_out, begin, len);
    std::vector<float> o(xs.size()), g(xs.size());
    const TokenBatch batch = make_batch({len});
    gdn_layer_forward(o.data(), xs.data(), w, kDims, batch, nullptr, arena);
    gdn_layer_backward(g.data(), sum, ds.data(), xs.data(), w, kDims, batch, nullptr, arena);  // accumulates
    out.insert(out.end(), o.begin(), o.end());
    dx.insert(dx.end(), g.begin(), g.end());
    begin += len;
  }
  double worst = std::max(max_rel(out, packed.out), max_rel(dx, packed.dx));
  const auto a = gdn_param_tensors(sum);
  const auto b = gdn_param_tensors(packed.grads);
  for (size_t i = 0; i < kGdnParamCount; ++i) {
    const double err = test::max_rel_error(a[i].second->f32(), b[i].second->f32(), size_t(b[i].second->numel()));
    EXPECT_LT(err, kTolFloat) << a[i].first;
    worst = std::max(worst, err);
  }
  EXPECT_LT(worst, kTolFloat);
  std::printf("  packed vs separate (out, dx, accumulated grads): %.1e\n", worst);

  // A second backward on the same grads doubles them (+=), while dx is overwritten. (Bitwise 2x in practice; the
  // tolerance only allows the GEMM to fold the old value into its accumulator in another order.)
  GdnGrads twice = GdnGrads::zeros_like(w);
  std::vector<float> dx2(x.size());
  for (int rep = 0; rep < 2; ++rep)
    gdn_layer_backward(dx2.data(), twice, d_out.data(), x.data(), w, kDims, make_batch({5, 4, 1}), nullptr, arena);
  EXPECT_LT(max_rel(dx2, packed.dx), 1e-7);
  const auto t2 = gdn_param_tensors(twice);
  for (size_t i = 0; i < kGdnParamCount; ++i)
    for (int64_t j = 0; j < b[i].second->numel(); ++j)
      ASSERT_NEAR(t2[i].second->f32()[j], 2.0f * b[i].second->f32()[j], 1e-6 * std::abs(b[i].second->f32()[j]) + 1e-30)
          << t2[i].first << "[" << j << "]";
}

TEST(GdnLayer, ParameterTablesAndShapeChecks) {
  GdnWeights w = random_weights(kDims, kHidden, 6);
  GdnParamPtrs<const float*> p{};
  const auto t = gdn_param_tensors(w);
  const auto f = gdn_param_ptr_fields(p);
  for (size_t i = 0; i < kGdnParamCount; ++i) EXPECT_STREQ(t[i].first, f[i].first);
  EXPECT_NO_THROW(gdn_check_weights(w, kDims));
  EXPECT_EQ(gdn_param_ptrs(w).v_conv, w.v_conv.f32());
  w.k_conv = Tensor::zeros({kDims.key_channels(), kDims.conv_kernel + 1});
  EXPECT_THROW(gdn_check_weights(w, kDims), Error);
  GdnDims bad = kDims;
  bad.value_heads = 3;  // not a multiple of key_heads
  EXPECT_THROW(GdnWeights::zeros(bad, kHidden), Error);
}
