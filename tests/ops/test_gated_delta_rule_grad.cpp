// Finite-difference check of the recurrent gated-delta-rule backward in double (gated_delta_rule.h), on tiny packed
// shapes with GVA (Hk = 1, Hv = 2), an initial state and a final-state gradient. Loss L = Σ dO⊙o + Σ dhT⊙hT with
// random dO, dhT; every element of q, k, v, g, beta and h0 is perturbed by ±eps (central differences).
// Tolerance: with eps = 1e-6 the truncation error is O(eps²·|L'''|) ≈ 1e-12 and the rounding error
// O(1e-16·|L| / eps) ≈ 1e-10, so |fd − analytic| ≤ 1e-7 · max(1, max|analytic|) leaves three orders of margin
// while any wrong term (a missing factor, a sign, an off-by-one token) shows up at ≥ 1e-3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ops/gated_delta_rule/gated_delta_rule.h"
#include "support/finite_diff.h"
#include "support/random.h"

using namespace hlm;

namespace {

std::vector<double> normal_doubles(size_t n, uint64_t stream, double mean = 0.0, double sd = 1.0) {
  const auto f = test::random_vector(n, stream, 1.0f, 777);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = mean + sd * f[i];
  return out;
}

void l2_normalise_rows(std::vector<double>& x, int64_t width) {
  for (size_t r = 0; r < x.size() / static_cast<size_t>(width); ++r) {
    double ss = 0.0;
    for (int64_t d = 0; d < width; ++d) ss += x[r * width + d] * x[r * width + d];
    for (int64_t d = 0; d < width; ++d) x[r * width + d] /= std::sqrt(ss + 1e-6);
  }
}

struct TinyProblem {
  GdnShape s;
  std::vector<int64_t> cu;
  double scale = 0.0;
  std::vector<double> q, k, v, g, beta, h0, d_o, d_hT;

  GdnInputs<double> inputs() const {
    return {q.data(), k.data(), v.data(), g.data(), beta.data(), h0.data(), cu.data(),
            static_cast<int64_t>(cu.size()) - 1};
  }
  double loss() const {
    std::vector<double> o(d_o.size()), hT(d_hT.size());
    gated_delta_rule_recurrent_forward<double>({o.data(), hT.data()}, inputs(), s, scale);
    double L = 0.0;
    for (size_t i = 0; i < o.size(); ++i) L += d_o[i] * o[i];
    for (size_t i = 0; i < hT.size(); ++i) L += d_hT[i] * hT[i];
    return L;
  }
};

TinyProblem make_tiny(std::vector<int64_t> cu, int64_t dk, int64_t dv, double beta_max) {
  TinyProblem p;
  const int64_t T = cu.back(), N = static_cast<int64_t>(cu.size()) - 1, Hk = 1, Hv = 2;
  p.s = {T, Hk, Hv, dk, dv};
  p.cu = std::move(cu);
  p.scale = 1.0 / std::sqrt(static_cast<double>(dk));
  p.q = normal_doubles(T * Hk * dk, 1);
  p.k = normal_doubles(T * Hk * dk, 2);
  l2_normalise_rows(p.q, dk);
  l2_normalise_rows(p.k, dk);
  p.v = normal_doubles(T * Hv * dv, 3);
  p.g = normal_doubles(T * Hv, 4);
  p.beta = normal_doubles(T * Hv, 5);
  for (auto& x : p.g) x = -std::log1p(std::exp(-x));                 // logsigmoid: log decay in (-inf, 0)
  for (auto& x : p.beta) x = beta_max / (1.0 + std::exp(-x));        // (0, beta_max)
  p.h0 = normal_doubles(N * Hv * dv * dk, 6, 0.0, 0.5);
  p.d_o = normal_doubles(T * Hv * dv, 7);
  p.d_hT = normal_doubles(N * Hv * dv * dk, 8);
  return p;
}

// Checks every element of one input against central differences; returns the max abs deviation.
double check_input(TinyProblem& p, std::vector<double>& x, const std::vector<double>& analytic, const char* name) {
  return test::fd_check([&] { return p.loss(); }, x, analytic, name);
}

void run_fd_check(TinyProblem p) {
  const int64_t T = p.s.total_tokens;
  std::vector<double> dq(p.q.size()), dk(p.k.size()), dv(p.v.size()), dg(T * 2), dbeta(T * 2), dh0(p.h0.size());
  gated_delta_rule_recurrent_backward<double>({dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), dh0.data()},
                                              {p.d_o.data(), p.d_hT.data()}, p.inputs(), p.s, p.scale);
  check_input(p, p.q, dq, "q");
  check_input(p, p.k, dk, "k");
  check_input(p, p.v, dv, "v");
  check_input(p, p.g, dg, "g");
  check_input(p, p.beta, dbeta, "beta");
  check_input(p, p.h0, dh0, "h0");
}

}  // namespace

TEST(GatedDeltaRuleGrad, RecurrentBackwardMatchesFiniteDifferences) {
  // Two packed sequences (5 and 7 tokens), dk = 4, dv = 5, β ∈ (0, 1).
  run_fd_check(make_tiny({0, 5, 12}, 4, 5, 1.0));
}

TEST(GatedDeltaRuleGrad, RecurrentBackwardMatchesFiniteDifferencesNegativeEigenvalues) {
  // β ∈ (0, 2), a length-1 sequence, dk = 3 ≠ dv = 2.
  run_fd_check(make_tiny({0, 1, 9}, 3, 2, 2.0));
}

TEST(GatedDeltaRuleGrad, RecurrentBackwardCheckpointSegmentsMatchFiniteDifferences) {
  // A sequence longer than one checkpoint segment (kGdnRecurrentCheckpoint = 64 tokens) exercises the segment
  // recompute of the backward; only g, beta and h0 are checked to keep it quick (2·(2·70 + 2·2·3·2) loss calls).
  TinyProblem p = make_tiny({0, 70, 71}, 2, 3, 1.0);
  const int64_t T = p.s.total_tokens;
  std::vector<double> dq(p.q.size()), dk(p.k.size()), dv(p.v.size()), dg(T * 2), dbeta(T * 2), dh0(p.h0.size());
  gated_delta_rule_recurrent_backward<double>({dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), dh0.data()},
                                              {p.d_o.data(), p.d_hT.data()}, p.inputs(), p.s, p.scale);
  check_input(p, p.g, dg, "g");
  check_input(p, p.beta, dbeta, "beta");
  check_input(p, p.h0, dh0, "h0");
}
