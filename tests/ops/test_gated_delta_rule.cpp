// Gated delta rule: chunked (float) vs recurrent (double) forward and backward, edge regimes, prefill + decode,
// packed vs separate sequences, NaN isolation and thread-count independence (gated_delta_rule.h; gdn.md §7).
// Metric: relative RMS ‖a − ref‖ / ‖ref‖ against the recurrent reference in double.
// Tolerances: the chunked form stores q, k, v, γ, R, W, U, states in fp32 (unit roundoff 6e-8) and accumulates in
// double; errors come from those roundings amplified by the triangular solve and the sequential state pass over at
// most 171 tokens. Measured values are printed per case; thresholds sit ~10x above them (see kTol*).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops/gated_delta_rule/gated_delta_rule.h"
#include "support/random.h"

using namespace hlm;

namespace {

// Output/state and q/k/v/h0 gradients are smooth functions of fp32-rounded intermediates: 2e-5 is ~10-50x the
// measured error. dβ and dg are sums of terms that cancel (dg_t = Σ dγ, each dγ a difference of large terms),
// so their relative error is larger: 1e-4.
constexpr double kTolOut = 2e-5, kTolGrad = 2e-5, kTolGateGrad = 1e-4;

enum class Regime { Normal, ZeroGate, ALogInit, StrongDecay, NegEigen, MixedSign };
const char* regime_name(Regime r) {
  switch (r) {
    case Regime::Normal: return "normal";
    case Regime::ZeroGate: return "g=0";
    case Regime::ALogInit: return "A_log=-4";
    case Regime::StrongDecay: return "g~-20";
    case Regime::NegEigen: return "beta~2,parallel-k";
    case Regime::MixedSign: return "g in +-0.1";
  }
  return "?";
}

struct Problem {
  GdnShape s;
  std::vector<int64_t> cu;
  float scale = 1.0f;
  bool has_h0 = false;  // also decides dhT/dh0 (nullptr when false, covering the optional paths)
  std::vector<float> q, k, v, g, beta, h0, d_o, d_hT;
  int64_t n_seqs() const { return static_cast<int64_t>(cu.size()) - 1; }
  size_t state_size() const { return static_cast<size_t>(n_seqs() * s.v_heads * s.value_dim * s.key_dim); }
};

float softplus(float x) { return x > 20 ? x : std::log1p(std::exp(x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void l2_normalise_rows(std::vector<float>& x, int64_t width) {
  for (size_t r = 0; r < x.size() / static_cast<size_t>(width); ++r) {
    double ss = 0.0;
    for (int64_t d = 0; d < width; ++d) ss += double(x[r * width + d]) * x[r * width + d];
    for (int64_t d = 0; d < width; ++d) x[r * width + d] = static_cast<float>(x[r * width + d] / std::sqrt(ss + 1e-6));
  }
}

Problem make_problem(std::vector<int64_t> cu, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, bool has_h0,
                     Regime regime = Regime::Normal, uint64_t seed = 1) {
  Problem p;
  const int64_t T = cu.back();
  p.s = {T, Hk, Hv, dk, dv};
  p.cu = std::move(cu);
  p.scale = 1.0f / std::sqrt(static_cast<float>(dk));
  p.has_h0 = has_h0;
  const auto rnd = [&](int64_t n, uint64_t stream, float sd = 1.0f) {
    return test::random_vector(static_cast<size_t>(n), stream, sd, seed);
  };
  p.q = rnd(T * Hk * dk, 1);
  p.k = rnd(T * Hk * dk, 2);
  if (regime == Regime::NegEigen)  // consecutive keys nearly parallel: k_t = k_{t-1} + 0.05·noise (then L2)
    for (int64_t t = 1; t < T; ++t)
      for (int64_t i = 0; i < Hk * dk; ++i) p.k[t * Hk * dk + i] = p.k[(t - 1) * Hk * dk + i] + 0.05f * p.k[t * Hk * dk + i];
  l2_normalise_rows(p.q, dk);
  l2_normalise_rows(p.k, dk);
  p.v = rnd(T * Hv * dv, 3);
  const auto x = rnd(T * Hv, 4, 2.0f), mask = rnd(T * Hv, 5), b = rnd(T * Hv, 6);
  p.g.resize(x.size());
  p.beta.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    switch (regime) {
      case Regime::Normal: p.g[i] = mask[i] > 0.7f ? 0.0f : -softplus(-x[i]); break;  // logsigmoid, some g = 0
      case Regime::ZeroGate: p.g[i] = 0.0f; break;
      case Regime::ALogInit:
      case Regime::NegEigen: p.g[i] = -std::exp(-4.0f) * softplus(x[i]); break;  // decay ≈ 1
      case Regime::StrongDecay: p.g[i] = -20.0f - std::abs(x[i]); break;
      case Regime::MixedSign: p.g[i] = 0.05f * x[i]; break;  // g > 0 allowed by the contract (growth ≤ e^{0.1})
    }
    p.beta[i] = regime == Regime::NegEigen ? 2.0f * sigmoid(3.0f + 0.5f * b[i]) : sigmoid(b[i]);
  }
  if (has_h0) {
    p.h0 = rnd(static_cast<int64_t>(p.state_size()), 7, 0.5f);
    p.d_hT = rnd(static_cast<int64_t>(p.state_size()), 8);
  }
  p.d_o = rnd(T * Hv * dv, 9);
  return p;
}

// All outputs and gradients of one run, widened to double.
struct Result {
  std::vector<double> o, hT, dq, dk, dv, dbeta, dg, dh0;
};

template <typename S>
std::vector<S> cast(const std::vector<float>& x) {
  return std::vector<S>(x.begin(), x.end());
}

// Runs the recurrent form in storage type S, or the chunked form (float) when chunk > 0.
template <typename S>
Result run(const Problem& p, int64_t chunk = 0) {
  const auto q = cast<S>(p.q), k = cast<S>(p.k), v = cast<S>(p.v), g = cast<S>(p.g), beta = cast<S>(p.beta);
  const auto h0 = cast<S>(p.h0), d_o = cast<S>(p.d_o), d_hT = cast<S>(p.d_hT);
  const size_t nqk = p.q.size(), nv = p.v.size(), ng = p.g.size(), ns = p.state_size();
  std::vector<S> o(nv), hT(ns), dq(nqk), dk(nqk), dv(nv), dbeta(ng), dg(ng), dh0(p.has_h0 ? ns : 0);
  const GdnInputs<S> in{q.data(), k.data(), v.data(), g.data(), beta.data(), p.has_h0 ? h0.data() : nullptr,
                        p.cu.data(), p.n_seqs()};
  const GdnOutputs<S> out{o.data(), hT.data()};
  const GdnInputGrads<S> grads{dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(),
                               p.has_h0 ? dh0.data() : nullptr};
  const GdnOutputGrads<S> dout{d_o.data(), p.has_h0 ? d_hT.data() : nullptr};
  if constexpr (std::is_same_v<S, float>) {
    if (chunk > 0) {
      gated_delta_rule_chunked_forward(out, in, p.s, p.scale, chunk);
      gated_delta_rule_chunked_backward(grads, dout, in, p.s, p.scale, chunk);
    }
  }
  if (chunk == 0) {
    gated_delta_rule_recurrent_forward<S>(out, in, p.s, static_cast<S>(p.scale));
    gated_delta_rule_recurrent_backward<S>(grads, dout, in, p.s, static_cast<S>(p.scale));
  }
  const auto wide = [](const std::vector<S>& x) { return std::vector<double>(x.begin(), x.end()); };
  return {wide(o), wide(hT), wide(dq), wide(dk), wide(dv), wide(dbeta), wide(dg), wide(dh0)};
}

double rel_rms(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Compares every field; prints one line of errors; returns the largest error (for the summary).
double expect_close(const Result& a, const Result& ref, const std::string& label, double tol_out = kTolOut,
                    double tol_grad = kTolGrad, double tol_gate = kTolGateGrad) {
  struct Field {
    const char* name;
    const std::vector<double>& x;
    const std::vector<double>& r;
    double tol;
  };
  const Field fields[] = {{"o", a.o, ref.o, tol_out},           {"hT", a.hT, ref.hT, tol_out},
                          {"dq", a.dq, ref.dq, tol_grad},       {"dk", a.dk, ref.dk, tol_grad},
                          {"dv", a.dv, ref.dv, tol_grad},       {"dh0", a.dh0, ref.dh0, tol_grad},
                          {"dbeta", a.dbeta, ref.dbeta, tol_gate}, {"dg", a.dg, ref.dg, tol_gate}};
  std::string line = "  " + label + ":";
  double worst = 0.0;
  for (const auto& f : fields) {
    if (f.r.empty()) continue;
    const double err = rel_rms(f.x, f.r);
    EXPECT_LT(err, f.tol) << label << " " << f.name;
    char buf[48];
    std::snprintf(buf, sizeof buf, " %s %.1e", f.name, err);
    line += buf;
    worst = std::max(worst, err / f.tol);
  }
  std::printf("%s\n", line.c_str());
  return worst;
}

bool all_finite(const Result& r) {
  for (const auto* v : {&r.o, &r.hT, &r.dq, &r.dk, &r.dv, &r.dbeta, &r.dg, &r.dh0})
    for (double x : *v)
      if (!std::isfinite(x)) return false;
  return true;
}

}  // namespace

TEST(GatedDeltaRule, ChunkedMatchesRecurrentOnPackedVarlen) {
  // Lengths 15, 85, 71: no chunk size divides them; chunks of 16/32/64 restart at every sequence start.
  for (int64_t dk : {7, 12})
    for (bool h0 : {false, true}) {
      const Problem p = make_problem({0, 15, 100, 171}, 2, 4, dk, 5, h0, Regime::Normal, 10 + dk);
      const Result ref = run<double>(p);
      ASSERT_TRUE(all_finite(ref));
      for (int64_t C : {16, 32, 64})
        expect_close(run<float>(p, C), ref, "dk=" + std::to_string(dk) + " h0=" + std::to_string(h0) +
                                                " C=" + std::to_string(C));
      // The float recurrence (double state) is within fp32 input/output rounding of the double one.
      expect_close(run<float>(p), ref, "recurrent<float>", 1e-6, 1e-6, 1e-5);
    }
}

TEST(GatedDeltaRule, ChunkedMatchesRecurrentInEdgeRegimes) {
  // A length-1 sequence first, then 39 and 37 tokens; C = 16 gives full and partial chunks.
  for (Regime r : {Regime::Normal, Regime::ZeroGate, Regime::ALogInit, Regime::StrongDecay, Regime::NegEigen,
                   Regime::MixedSign}) {
    const Problem p = make_problem({0, 1, 40, 77}, 1, 2, 8, 5, true, r, 20);
    const Result ref = run<double>(p);
    ASSERT_TRUE(all_finite(ref)) << regime_name(r);
    for (int64_t C : {16, 64}) {
      const Result got = run<float>(p, C);
      EXPECT_TRUE(all_finite(got)) << regime_name(r);
      expect_close(got, ref, std::string(regime_name(r)) + " C=" + std::to_string(C));
    }
  }
}

TEST(GatedDeltaRule, ChunkedMatchesRecurrentWithKeyDimOne) {
  // dk = 1: every key is ±1, so all keys of a head are parallel and the WY system is dense. An empty sequence
  // (cu 1 → 1) must give hT = h0 and dh0 = dhT.
  const Problem p = make_problem({0, 1, 1, 23, 50}, 1, 3, 1, 3, true, Regime::Normal, 30);
  const Result ref = run<double>(p);
  const size_t per_seq = p.state_size() / static_cast<size_t>(p.n_seqs()), first = per_seq;  // sequence 1 is empty
  const auto expect_empty_passes_state = [&](const Result& r, const std::string& label) {
    for (size_t i = first; i < first + per_seq; ++i) {
      ASSERT_EQ(r.hT[i], static_cast<double>(p.h0[i])) << label << " hT " << i;
      ASSERT_EQ(r.dh0[i], static_cast<double>(p.d_hT[i])) << label << " dh0 " << i;
    }
  };
  expect_empty_passes_state(ref, "recurrent<double>");
  for (int64_t C : {4, 16}) {
    const Result got = run<float>(p, C);
    expect_close(got, ref, "dk=1 C=" + std::to_string(C));
    expect_empty_passes_state(got, "chunked C=" + std::to_string(C));
  }
}

TEST(GatedDeltaRule, PrefillThenDecodeEqualsLongerPrefill) {
  // Prefill T = 37 tokens with the chunked form, then one recurrent decode step from its final state, must equal
  // the chunked prefill of T + 1 tokens (output of the last token and the final state). Tolerance: both sides are
  // fp32 computations of the same values through different association orders, ~1e-7 relative; 2e-6 allows growth.
  const int64_t T = 38, Hk = 2, Hv = 4, dk = 12, dv = 5;
  const Problem full = make_problem({0, T}, Hk, Hv, dk, dv, true, Regime::Normal, 40);
  std::vector<float> o_full(full.v.size()), hT_full(full.state_size());
  const GdnInputs<float> in_full{full.q.data(), full.k.data(), full.v.data(), full.g.data(), full.beta.data(),
                                 full.h0.data(), full.cu.data(), 1};
  gated_delta_rule_chunked_forward({o_full.data(), hT_full.data()}, in_full, full.s, full.scale, 16);

  const int64_t cu_prefill[2] = {0, T - 1}, cu_decode[2] = {0, 1};
  GdnShape s_pre = full.s, s_dec = full.s;
  s_pre.total_tokens = T - 1;
  s_dec.total_tokens = 1;
  std::vector<float> o_pre(full.v.size()), state(full.state_size()), o_dec(Hv * dv), hT_dec(full.state_size());
  GdnInputs<float> in_pre = in_full;
  in_pre.cu_seqlens = cu_prefill;
  gated_delta_rule_chunked_forward({o_pre.data(), state.data()}, in_pre, s_pre, full.scale, 16);
  const int64_t last = T - 1;
  const GdnInputs<float> in_dec{full.q.data() + last * Hk * dk, full.k.data() + last * Hk * dk,
                                full.v.data() + last * Hv * dv, full.g.data() + last * Hv,
                                full.beta.data() + last * Hv, state.data(), cu_decode, 1};
  gated_delta_rule_recurrent_forward<float>({o_dec.data(), hT_dec.data()}, in_dec, s_dec, full.scale);
  const std::vector<double> want_o(o_full.begin() + last * Hv * dv, o_full.end());
  const double err_o = rel_rms(std::vector<double>(o_dec.begin(), o_dec.end()), want_o);
  const double err_h = rel_rms(std::vector<double>(hT_dec.begin(), hT_dec.end()),
                               std::vector<double>(hT_full.begin(), hT_full.end()));
  std::printf("  prefill+decode: o %.1e hT %.1e\n", err_o, err_h);
  EXPECT_LT(err_o, 2e-6);
  EXPECT_LT(err_h, 2e-6);
  // The prefill's outputs equal the first T - 1 outputs of the longer prefill exactly (same chunks, same order).
  for (int64_t i = 0; i < last * Hv * dv; ++i) ASSERT_EQ(o_pre[i], o_full[i]) << i;
}

TEST(GatedDeltaRule, PackedEqualsSeparate) {
  // Three packed sequences with their own h0 give bit-identical results to three separate calls: every work item
  // computes the same values in the same order wherever its sequence sits in the packed buffer.
  const Problem packed = make_problem({0, 9, 42, 61}, 2, 4, 7, 5, true, Regime::Normal, 50);
  for (int64_t C : {0, 16}) {
    const Result all = C ? run<float>(packed, C) : run<float>(packed);
    for (int64_t seq = 0; seq < 3; ++seq) {
      const int64_t b = packed.cu[seq], e = packed.cu[seq + 1], len = e - b;
      Problem one = packed;
      one.cu = {0, len};
      one.s.total_tokens = len;
      const auto slice = [&](const std::vector<float>& x, int64_t per_token) {
        return std::vector<float>(x.begin() + b * per_token, x.begin() + e * per_token);
      };
      const auto state = [&](const std::vector<float>& x) {
        const size_t n = x.size() / 3;
        return std::vector<float>(x.begin() + seq * n, x.begin() + (seq + 1) * n);
      };
      const auto& s = packed.s;
      one.q = slice(packed.q, s.k_heads * s.key_dim);
      one.k = slice(packed.k, s.k_heads * s.key_dim);
      one.v = slice(packed.v, s.v_heads * s.value_dim);
      one.d_o = slice(packed.d_o, s.v_heads * s.value_dim);
      one.g = slice(packed.g, s.v_heads);
      one.beta = slice(packed.beta, s.v_heads);
      one.h0 = state(packed.h0);
      one.d_hT = state(packed.d_hT);
      const Result alone = C ? run<float>(one, C) : run<float>(one);
      const auto expect_slice = [&](const std::vector<double>& whole, const std::vector<double>& part,
                                    int64_t per, const char* name) {
        ASSERT_EQ(part.size(), static_cast<size_t>(len * per)) << name;
        for (int64_t i = 0; i < len * per; ++i) ASSERT_EQ(part[i], whole[b * per + i]) << name << " seq " << seq;
      };
      const int64_t qk = s.k_heads * s.key_dim, vo = s.v_heads * s.value_dim, n = vo * s.key_dim;
      expect_slice(all.o, alone.o, vo, "o");
      expect_slice(all.dq, alone.dq, qk, "dq");
      expect_slice(all.dk, alone.dk, qk, "dk");
      expect_slice(all.dv, alone.dv, vo, "dv");
      expect_slice(all.dg, alone.dg, s.v_heads, "dg");
      expect_slice(all.dbeta, alone.dbeta, s.v_heads, "dbeta");
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(alone.hT[i], all.hT[seq * n + i]) << "hT seq " << seq;
        ASSERT_EQ(alone.dh0[i], all.dh0[seq * n + i]) << "dh0 seq " << seq;
      }
    }
  }
}

TEST(GatedDeltaRule, NaNStaysInItsSequence) {
  // A NaN log decay at one token of the middle sequence [20, 45) poisons that sequence only: the forward from that
  // token on, the backward before it. Other sequences must be bit-identical to a clean run (NaN parity: the NaN does
  // show up in every output of its own sequence).
  const Problem clean = make_problem({0, 20, 45, 70}, 1, 2, 6, 4, true, Regime::Normal, 60);
  Problem bad = clean;
  bad.g[30 * 2 + 1] = std::numeric_limits<float>::quiet_NaN();  // token 30, v-head 1
  for (int64_t C : {0, 16}) {
    const Result ok = C ? run<float>(clean, C) : run<float>(clean);
    const Result nan = C ? run<float>(bad, C) : run<float>(bad);
    // Rows [lo, hi) of `rows` rows of `per` elements belong to the poisoned sequence.
    const auto check = [&](const std::vector<double>& a, const std::vector<double>& b, int64_t per, const char* name,
                           int64_t lo = 20, int64_t hi = 45, int64_t rows = 70) {
      ASSERT_EQ(b.size(), static_cast<size_t>(rows * per)) << name;
      bool poisoned = false;
      for (int64_t t = 0; t < rows; ++t)
        for (int64_t i = 0; i < per; ++i) {
          if (t >= lo && t < hi)
            poisoned |= std::isnan(b[t * per + i]);
          else
            ASSERT_EQ(a[t * per + i], b[t * per + i]) << name << " t " << t << " C " << C;
        }
      EXPECT_TRUE(poisoned) << name << " NaN vanished, C " << C;
    };
    check(ok.o, nan.o, 2 * 4, "o");
    check(ok.dq, nan.dq, 6, "dq");
    check(ok.dk, nan.dk, 6, "dk");
    check(ok.dv, nan.dv, 2 * 4, "dv");
    check(ok.dg, nan.dg, 2, "dg");
    check(ok.dbeta, nan.dbeta, 2, "dbeta");
    check(ok.hT, nan.hT, 2 * 4 * 6, "hT", 1, 2, 3);  // per sequence: Hv·dv·dk state elements
    check(ok.dh0, nan.dh0, 2 * 4 * 6, "dh0", 1, 2, 3);
  }
}

TEST(GatedDeltaRule, ResultsDoNotDependOnThreadCount) {
  const Problem p = make_problem({0, 15, 100, 171}, 2, 4, 7, 5, true, Regime::Normal, 70);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Result one_rec = run<float>(p), one_chunk = run<float>(p, 32);
  omp_set_num_threads(5);
  const Result many_rec = run<float>(p), many_chunk = run<float>(p, 32);
  omp_set_num_threads(saved);
  for (const auto& [a, b] : {std::pair{&one_rec, &many_rec}, std::pair{&one_chunk, &many_chunk}}) {
    EXPECT_EQ(a->o, b->o);
    EXPECT_EQ(a->hT, b->hT);
    EXPECT_EQ(a->dq, b->dq);
    EXPECT_EQ(a->dk, b->dk);
    EXPECT_EQ(a->dv, b->dv);
    EXPECT_EQ(a->dg, b->dg);
    EXPECT_EQ(a->dbeta, b->dbeta);
    EXPECT_EQ(a->dh0, b->dh0);
  }
}
