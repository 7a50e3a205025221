// Gated delta rule decode step (gated_delta_rule_decode.h) on the CPU: prefill + decode steps = a longer prefill
// (gdn.md §7), exact properties of the step (β = 0, full decay, k = 0), NaN isolation between sequences, B = 0.
// Tolerances: with double storage the decode step IS one token of the recurrent forward and the state stays double
// between steps, so the comparison is bit-exact. With float storage the decode rounds the state to fp32 after every
// step (the recurrent forward keeps it in double across tokens); the per-step rounding is ≤ 2^-24 relative and the
// step map is non-expansive (g ≤ 0, β‖k‖² ≤ 2), so after S steps the relative error is ≲ S·2^-24 (S = 12: 7e-7).
// The threshold 2e-6 sits ~3x above that bound; the measured value is printed.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "ops/gated_delta_rule/gated_delta_rule.h"
#include "ops/gated_delta_rule/gated_delta_rule_decode.h"
#include "support/random.h"

using namespace hlm;

namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float logsigmoid(float x) { return x < -20 ? x : -std::log1p(std::exp(-x)); }

void l2_normalise_rows(std::vector<float>& x, int64_t width) {
  for (size_t r = 0; r < x.size() / static_cast<size_t>(width); ++r) {
    double ss = 0.0;
    for (int64_t d = 0; d < width; ++d) ss += double(x[r * width + d]) * x[r * width + d];
    for (int64_t d = 0; d < width; ++d) x[r * width + d] = static_cast<float>(x[r * width + d] / std::sqrt(ss + 1e-6));
  }
}

// Packed sequences of the prefill layout (gated_delta_rule.h), plus an h0 per sequence.
struct Packed {
  GdnShape s;
  std::vector<int64_t> cu;
  std::vector<float> q, k, v, g, beta, h0;
  float scale = 1.0f;
  int64_t n_seqs() const { return static_cast<int64_t>(cu.size()) - 1; }
  size_t state_size() const { return static_cast<size_t>(n_seqs() * s.v_heads * s.value_dim * s.key_dim); }
};

Packed make_packed(std::vector<int64_t> cu, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, uint64_t seed) {
  Packed p;
  const int64_t T = cu.back();
  p.s = {T, Hk, Hv, dk, dv};
  p.cu = std::move(cu);
  p.scale = 1.0f / std::sqrt(static_cast<float>(dk));
  const auto rnd = [&](int64_t n, uint64_t stream, float sd = 1.0f) {
    return test::random_vector(static_cast<size_t>(n), stream, sd, seed);
  };
  p.q = rnd(T * Hk * dk, 1);
  p.k = rnd(T * Hk * dk, 2);
  l2_normalise_rows(p.q, dk);
  l2_normalise_rows(p.k, dk);
  p.v = rnd(T * Hv * dv, 3);
  const auto x = rnd(T * Hv, 4, 2.0f), b = rnd(T * Hv, 5);
  p.g.resize(x.size());
  p.beta.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    p.g[i] = logsigmoid(x[i]);
    p.beta[i] = sigmoid(b[i]);
  }
  p.h0 = rnd(static_cast<int64_t>(p.state_size()), 6, 0.5f);
  return p;
}

template <typename S>
std::vector<S> cast(const std::vector<float>& x) {
  return std::vector<S>(x.begin(), x.end());
}

// Tokens `tokens[i]` of the packed per-token array `x` (`per` elements each), in that order.
std::vector<float> gather(const std::vector<float>& x, const std::vector<int64_t>& tokens, int64_t per) {
  std::vector<float> out;
  out.reserve(tokens.size() * static_cast<size_t>(per));
  for (int64_t t : tokens) out.insert(out.end(), x.begin() + t * per, x.begin() + (t + 1) * per);
  return out;
}

double rel_rms(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Result of "prefill P_b tokens of each sequence, then decode the remaining S tokens of all sequences one step at a
// time" next to the full prefill of the same tokens: decode outputs per step [S, B, Hv, dv] and the final states.
template <typename S>
struct PrefillDecode {
  std::vector<S> o_full, o_decode, hT_full, state;
};

// `full` has B sequences of P_b + n_steps tokens. Both sides use the recurrent forward in storage type S.
template <typename S>
PrefillDecode<S> prefill_then_decode(const Packed& full, int64_t n_steps) {
  const GdnShape& s = full.s;
  const int64_t B = full.n_seqs(), Hk = s.k_heads, Hv = s.v_heads, dk = s.key_dim, dv = s.value_dim;
  const S scale = static_cast<S>(full.scale);
  PrefillDecode<S> r;
  {  // The longer prefill: every token of every sequence.
    const auto q = cast<S>(full.q), k = cast<S>(full.k), v = cast<S>(full.v), g = cast<S>(full.g),
               beta = cast<S>(full.beta), h0 = cast<S>(full.h0);
    r.o_full.resize(full.v.size());
    r.hT_full.resize(full.state_size());
    gated_delta_rule_recurrent_forward<S>(
        {r.o_full.data(), r.hT_full.data()},
        {q.data(), k.data(), v.data(), g.data(), beta.data(), h0.data(), full.cu.data(), B}, s, scale);
  }
  // The prefill: the first P_b = len_b − n_steps tokens of each sequence (P_b = 0 allowed: decode from h0).
  std::vector<int64_t> pre_tokens, cu_pre{0};
  for (int64_t b = 0; b < B; ++b) {
    const int64_t P = full.cu[b + 1] - full.cu[b] - n_steps;
    for (int64_t t = 0; t < P; ++t) pre_tokens.push_back(full.cu[b] + t);
    cu_pre.push_back(cu_pre.back() + P);
  }
  GdnShape s_pre = s;
  s_pre.total_tokens = static_cast<int64_t>(pre_tokens.size());
  {
    const auto q = cast<S>(gather(full.q, pre_tokens, Hk * dk)), k = cast<S>(gather(full.k, pre_tokens, Hk * dk)),
               v = cast<S>(gather(full.v, pre_tokens, Hv * dv)), g = cast<S>(gather(full.g, pre_tokens, Hv)),
               beta = cast<S>(gather(full.beta, pre_tokens, Hv)), h0 = cast<S>(full.h0);
    std::vector<S> o(v.size());
    r.state.resize(full.state_size());
    gated_delta_rule_recurrent_forward<S>(
        {o.data(), r.state.data()}, {q.data(), k.data(), v.data(), g.data(), beta.data(), h0.data(), cu_pre.data(), B},
        s_pre, scale);
  }
  // The decode steps: step j feeds token P_b + j of every sequence.
  const GdnDecodeShape ds{B, Hk, Hv, dk, dv};
  for (int64_t j = 0; j < n_steps; ++j) {
    std::vector<int64_t> tokens;
    for (int64_t b = 0; b < B; ++b) tokens.push_back(full.cu[b + 1] - n_steps + j);
    const auto q = cast<S>(gather(full.q, tokens, Hk * dk)), k = cast<S>(gather(full.k, tokens, Hk * dk)),
               v = cast<S>(gather(full.v, tokens, Hv * dv)), g = cast<S>(gather(full.g, tokens, Hv)),
               beta = cast<S>(gather(full.beta, tokens, Hv));
    std::vector<S> o(static_cast<size_t>(B * Hv * dv));
    gated_delta_rule_decode<S>(o.data(), r.state.data(), {q.data(), k.data(), v.data(), g.data(), beta.data()}, ds,
                               scale);
    r.o_decode.insert(r.o_decode.end(), o.begin(), o.end());
  }
  return r;
}

// The outputs of the full prefill at the decoded tokens, in decode order [S, B, Hv, dv].
template <typename S>
std::vector<S> full_outputs_at_decode(const Packed& full, const std::vector<S>& o_full, int64_t n_steps) {
  const int64_t per = full.s.v_heads * full.s.value_dim;
  std::vector<S> out;
  for (int64_t j = 0; j < n_steps; ++j)
    for (int64_t b = 0; b < full.n_seqs(); ++b) {
      const int64_t t = full.cu[b + 1] - n_steps + j;
      out.insert(out.end(), o_full.begin() + t * per, o_full.begin() + (t + 1) * per);
    }
  return out;
}

// One decode step in storage S on single-token inputs (B sequences).
template <typename S>
struct Step {
  GdnDecodeShape shape;
  std::vector<S> q, k, v, g, beta, state, o;
  S scale = 1;
  void run() {
    o.assign(static_cast<size_t>(shape.batch * shape.v_heads * shape.value_dim), std::numeric_limits<S>::quiet_NaN());
    gated_delta_rule_decode<S>(o.data(), state.data(), {q.data(), k.data(), v.data(), g.data(), beta.data()}, shape,
                               scale);
  }
};

template <typename S>
Step<S> make_step(int64_t B, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, uint64_t seed) {
  std::vector<int64_t> cu(static_cast<size_t>(B + 1));  // B one-token sequences
  for (int64_t b = 0; b <= B; ++b) cu[static_cast<size_t>(b)] = b;
  const Packed p = make_packed(cu, Hk, Hv, dk, dv, seed);
  Step<S> st;
  st.shape = {B, Hk, Hv, dk, dv};
  st.q = cast<S>(p.q);
  st.k = cast<S>(p.k);
  st.v = cast<S>(p.v);
  st.g = cast<S>(p.g);
  st.beta = cast<S>(p.beta);
  st.state = cast<S>(p.h0);
  st.scale = static_cast<S>(p.scale);
  return st;
}

}  // namespace

TEST(GatedDeltaRuleDecode, PrefillThenDecodeEqualsLongerPrefillBitExactInDouble) {
  // Sequences of 12, 21 and 45 tokens, the last 12 decoded one step at a time (the first sequence decodes from h0,
  // no prefill); GVA Hv = 2·Hk with odd dims. Double storage: decode = recurrent forward, bit for bit.
  const int64_t n_steps = 12;
  for (const auto& [Hk, Hv, dk, dv] : {std::array<int64_t, 4>{2, 4, 7, 5}, std::array<int64_t, 4>{1, 3, 16, 33}}) {
    const Packed full = make_packed({0, 12, 33, 78}, Hk, Hv, dk, dv, 10 + dk);
    const PrefillDecode<double> r = prefill_then_decode<double>(full, n_steps);
    const std::vector<double> want_o = full_outputs_at_decode(full, r.o_full, n_steps);
    ASSERT_EQ(r.o_decode.size(), want_o.size());
    for (size_t i = 0; i < want_o.size(); ++i) ASSERT_EQ(r.o_decode[i], want_o[i]) << "o " << i << " dk " << dk;
    for (size_t i = 0; i < r.hT_full.size(); ++i) ASSERT_EQ(r.state[i], r.hT_full[i]) << "state " << i << " dk " << dk;
  }
}

TEST(GatedDeltaRuleDecode, PrefillThenDecodeEqualsLongerPrefillInFloat) {
  const int64_t n_steps = 12;
  const Packed full = make_packed({0, 12, 33, 78}, 2, 4, 7, 5, 11);
  const PrefillDecode<float> r = prefill_then_decode<float>(full, n_steps);
  const std::vector<float> want_o = full_outputs_at_decode(full, r.o_full, n_steps);
  const auto wide = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  const double err_o = rel_rms(wide(r.o_decode), wide(want_o)), err_h = rel_rms(wide(r.state), wide(r.hT_full));
  std::printf("  prefill+decode (float, %lld steps): o %.1e state %.1e\n", static_cast<long long>(n_steps), err_o,
              err_h);
  EXPECT_LT(err_o, 2e-6);
  EXPECT_LT(err_h, 2e-6);
  // Sequence 0 has no prefill: its first decode step starts from h0 on both sides, with no fp32-rounded state behind
  // it, so its outputs are bit-identical (the other sequences start from the prefill's fp32 state).
  const size_t first = static_cast<size_t>(full.s.v_heads * full.s.value_dim);
  for (size_t i = 0; i < first; ++i) ASSERT_EQ(r.o_decode[i], want_o[i]) << i;
}

TEST(GatedDeltaRuleDecode, BetaZeroAndNoDecayLeaveTheStateAlone) {
  // β = 0, g = 0: α = 1 and u = 0, so the state is unchanged and o = scale · S q (sums over d in order, in double).
  Step<float> st = make_step<float>(3, 1, 2, 7, 5, 20);
  std::fill(st.g.begin(), st.g.end(), 0.0f);
  std::fill(st.beta.begin(), st.beta.end(), 0.0f);
  const std::vector<float> before = st.state;
  st.run();
  const GdnDecodeShape& s = st.shape;
  const int64_t G = s.v_heads / s.k_heads;
  for (size_t i = 0; i < before.size(); ++i) ASSERT_EQ(st.state[i], before[i]) << i;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.v_heads; ++h)
      for (int64_t a = 0; a < s.value_dim; ++a) {
        const float* row = &before[static_cast<size_t>(((b * s.v_heads + h) * s.value_dim + a) * s.key_dim)];
        const float* q = &st.q[static_cast<size_t>((b * s.k_heads + h / G) * s.key_dim)];
        double dot = 0.0;
        for (int64_t d = 0; d < s.key_dim; ++d) dot += static_cast<double>(row[d]) * static_cast<double>(q[d]);
        ASSERT_EQ(st.o[static_cast<size_t>((b * s.v_heads + h) * s.value_dim + a)],
                  static_cast<float>(static_cast<double>(st.scale) * dot));
      }
}

TEST(GatedDeltaRuleDecode, FullDecayForgetsTheOldState) {
  // g = −inf: α = 0, so M ← 0, p = 0, u = β v and the new state is exactly β v kᵀ; o does not depend on the old
  // state (two different finite old states give identical results).
  Step<float> a = make_step<float>(2, 2, 4, 6, 3, 30);
  std::fill(a.g.begin(), a.g.end(), -std::numeric_limits<float>::infinity());
  Step<float> b = a;
  for (float& x : b.state) x = 3.0f * x + 1.0f;
  a.run();
  b.run();
  EXPECT_EQ(a.o, b.o);
  EXPECT_EQ(a.state, b.state);
  const GdnDecodeShape& s = a.shape;
  const int64_t G = s.v_heads / s.k_heads;
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t h = 0; h < s.v_heads; ++h)
      for (int64_t r = 0; r < s.value_dim; ++r)
        for (int64_t d = 0; d < s.key_dim; ++d) {
          const double u = static_cast<double>(a.beta[n * s.v_heads + h]) *
                           static_cast<double>(a.v[(n * s.v_heads + h) * s.value_dim + r]);
          const double want = u * static_cast<double>(a.k[(n * s.k_heads + h / G) * s.key_dim + d]);
          ASSERT_EQ(a.state[static_cast<size_t>(((n * s.v_heads + h) * s.value_dim + r) * s.key_dim + d)],
                    static_cast<float>(want));
        }
}

TEST(GatedDeltaRuleDecode, ZeroKeyOnlyDecays) {
  // k = 0: p = 0 and u kᵀ = 0, so the state is exactly e^g S (α in double, one rounding); double storage.
  Step<double> st = make_step<double>(2, 1, 2, 5, 4, 40);
  std::fill(st.k.begin(), st.k.end(), 0.0);
  const std::vector<double> before = st.state;
  st.run();
  const GdnDecodeShape& s = st.shape;
  const int64_t per_pair = s.value_dim * s.key_dim;
  for (size_t i = 0; i < before.size(); ++i)
    ASSERT_EQ(st.state[i], std::exp(st.g[i / static_cast<size_t>(per_pair)]) * before[i]) << i;
}

TEST(GatedDeltaRuleDecode, NaNStaysInItsSequence) {
  // A NaN in v of sequence 1, v-head 1 poisons that (sequence, v-head)'s o and state only; everything else is
  // bit-identical to a clean run.
  const Step<float> clean_in = make_step<float>(3, 1, 2, 7, 5, 50);
  Step<float> clean = clean_in, bad = clean_in;
  const int64_t Hv = 2, dv = 5, dk = 7, bad_pair = 1 * Hv + 1;
  bad.v[static_cast<size_t>(bad_pair * dv + 2)] = std::numeric_limits<float>::quiet_NaN();
  clean.run();
  bad.run();
  for (int64_t pair = 0; pair < 3 * Hv; ++pair) {
    bool poisoned = false;
    for (int64_t a = 0; a < dv; ++a) {
      const size_t i = static_cast<size_t>(pair * dv + a);
      if (pair == bad_pair)
        poisoned |= std::isnan(bad.o[i]);
      else
        ASSERT_EQ(bad.o[i], clean.o[i]) << "o pair " << pair;
    }
    for (int64_t e = 0; e < dv * dk; ++e) {
      const size_t i = static_cast<size_t>(pair * dv * dk + e);
      if (pair == bad_pair)
        poisoned |= std::isnan(bad.state[i]);
      else
        ASSERT_EQ(bad.state[i], clean.state[i]) << "state pair " << pair;
    }
    if (pair == bad_pair) {
      EXPECT_TRUE(poisoned);
    }
  }
}

TEST(GatedDeltaRuleDecode, EmptyBatchIsANoOp) {
  // A real one-sequence step's buffers, called with batch 0: neither o nor the state (nor any input) may be touched.
  Step<float> st = make_step<float>(1, 1, 1, 4, 4, 60);
  st.o.assign(4, -7.0f);
  const Step<float> before = st;
  GdnDecodeShape empty = st.shape;
  empty.batch = 0;
  gated_delta_rule_decode<float>(st.o.data(), st.state.data(),
                                 {st.q.data(), st.k.data(), st.v.data(), st.g.data(), st.beta.data()}, empty, 1.0f);
  EXPECT_EQ(st.o, before.o);
  EXPECT_EQ(st.state, before.state);
  EXPECT_EQ(st.q, before.q);
  EXPECT_EQ(st.v, before.v);
  // Also accepted with no buffers at all (nothing to read or write).
  gated_delta_rule_decode<float>(nullptr, nullptr, {}, empty, 1.0f);
}
