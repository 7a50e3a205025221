// Finite-difference checks, in double, of the chunked LM-head losses' backward passes (train/lm_head_loss.h), on tiny
// shapes chosen to hit the chunking edges: V = 37 with vocab_chunk = 8 (a last chunk of 5 columns), row_block = 2
// over N = 5 tokens (a last block of one row), an ignored target (-100) and a negative one (-1), per-token weights,
// logits divisors ≠ 1 and temperature τ = 2. Every element of h and W is perturbed by ±eps (central differences).
// Tolerance: with eps = 1e-6 the truncation error is O(eps²·|L'''|) ≈ 1e-12 and the rounding error
// O(1e-15·|L| / eps) ≈ 1e-9 (L is a few nats, evaluated through dgemm and 37-term sums), so
// |fd − analytic| ≤ 1e-7 · max(1, max|analytic|) leaves two orders of margin (measured: ~1e-9), while a wrong term
// (a missing 1/divisor or τ factor, a dropped last chunk or row) shows up at ≥ 1e-2.
// The same problems also compare the chunked double results with the full-logits reference: both are double
// throughout and differ only in summation order, so 1e-12 relative is ~1e4 ulps of margin.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "support/random.h"
#include "train/lm_head_loss.h"

using namespace hlm;

namespace {

std::vector<double> normal_doubles(size_t n, uint64_t stream, double sd) {
  const auto f = test::random_vector(n, stream, 1.0f, 4242);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = sd * f[i];
  return out;
}

// max |fd − analytic| / max(1, max |analytic|) over every element of x, for the scalar function `loss`.
double fd_error(std::vector<double>& x, const std::vector<double>& analytic, const std::function<double()>& loss) {
  const double eps = 1e-6;
  double max_diff = 0.0, max_ref = 1.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + eps;
    const double plus = loss();
    x[i] = saved - eps;
    const double minus = loss();
    x[i] = saved;
    max_diff = std::max(max_diff, std::abs((plus - minus) / (2 * eps) - analytic[i]));
    max_ref = std::max(max_ref, std::abs(analytic[i]));
  }
  return max_diff / max_ref;
}

double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double max_diff = 0.0, max_ref = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(a[i] - b[i]));
    max_ref = std::max(max_ref, std::abs(b[i]));
  }
  return max_diff / max_ref;
}

constexpr int64_t N = 5, V = 37;
const LmHeadChunking kTinyChunks{8, 2};

TEST(LmHeadLossGrad, CrossEntropyMatchesFiniteDifferences) {
  const int64_t H = 4;
  auto h = normal_doubles(N * H, 1, 1.0);
  auto W = normal_doubles(V * H, 2, 0.7);
  const std::vector<int32_t> targets = {3, -100, 36, 0, -1};  // 36: last column of the short last chunk
  const std::vector<double> weights = {0.3, 5.0, 0.9, 1.7, 2.0};  // ignored tokens must not use theirs
  const double divisor = 1.7;
  const auto head = [&] { return LmHead<double>{W.data(), V, H, divisor}; };
  const auto loss = [&] {
    std::vector<double> ce(N);
    return lm_head_cross_entropy<double>(ce.data(), h.data(), N, head(), targets.data(), weights.data(), nullptr,
                                         kTinyChunks).loss;
  };

  std::vector<double> ce(N), dh(N * H, 123.0), dW0 = normal_doubles(V * H, 3, 1.0), dW = dW0;
  LmHeadGrad<double> grad{dh.data(), dW.data()};
  const auto r = lm_head_cross_entropy<double>(ce.data(), h.data(), N, head(), targets.data(), weights.data(), &grad,
                                               kTinyChunks);
  EXPECT_EQ(r.count, 3);
  EXPECT_EQ(ce[1], 0.0);
  EXPECT_EQ(ce[4], 0.0);
  std::vector<double> dW_added(V * H);
  for (size_t i = 0; i < dW.size(); ++i) dW_added[i] = dW[i] - dW0[i];  // d_weight accumulates (+=)

  const double err_h = fd_error(h, dh, loss), err_W = fd_error(W, dW_added, loss);
  std::printf("CE fd error: dh %.2e, dW %.2e\n", err_h, err_W);
  EXPECT_LT(err_h, 1e-7);
  EXPECT_LT(err_W, 1e-7);
  for (int64_t k = 0; k < H; ++k) EXPECT_EQ(dh[1 * H + k], 0.0);  // ignored token: no gradient (dh overwritten)

  // Full-logits reference on the same problem.
  std::vector<double> ce_ref(N), dh_ref(N * H), dW_ref = dW0;
  LmHeadGrad<double> grad_ref{dh_ref.data(), dW_ref.data()};
  const auto r_ref = lm_head_cross_entropy_full<double>(ce_ref.data(), h.data(), N, head(), targets.data(),
                                                        weights.data(), &grad_ref);
  EXPECT_NEAR(r.loss, r_ref.loss, 1e-12 * std::abs(r_ref.loss));
  EXPECT_NEAR(r.mean, r_ref.mean, 1e-12 * std::abs(r_ref.mean));
  EXPECT_LT(max_rel(ce, ce_ref), 1e-12);
  EXPECT_LT(max_rel(dh, dh_ref), 1e-12);
  EXPECT_LT(max_rel(dW, dW_ref), 1e-12);
}

TEST(LmHeadLossGrad, CrossEntropyDefaultWeightsAreTheMean) {
  const int64_t H = 4;
  auto h = normal_doubles(N * H, 4, 1.0);
  auto W = normal_doubles(V * H, 5, 0.7);
  const std::vector<int32_t> targets = {-100, 7, 8, 9, 10};
  const LmHead<double> head{W.data(), V, H, 1.0};
  std::vector<double> ce(N);
  const auto r = lm_head_cross_entropy<double>(ce.data(), h.data(), N, head, targets.data(), nullptr, nullptr,
                                               kTinyChunks);
  EXPECT_EQ(r.count, 4);
  EXPECT_NEAR(r.loss, (ce[1] + ce[2] + ce[3] + ce[4]) / 4.0, 1e-14);
  EXPECT_NEAR(r.mean, r.loss, 1e-14);
}

TEST(LmHeadLossGrad, ForwardKlMatchesFiniteDifferences) {
  const int64_t H_T = 3, H_S = 4;
  const double tau = 2.0;
  const auto h_T = normal_doubles(N * H_T, 10, 1.0), W_T = normal_doubles(V * H_T, 11, 1.0);
  auto h_S = normal_doubles(N * H_S, 12, 1.0);
  auto W_S = normal_doubles(V * H_S, 13, 0.8);
  const std::vector<double> weights = {0.2, 0.0, 1.1, 0.4, 0.7};  // a zero weight: value computed, no gradient
  const LmHead<double> teacher{W_T.data(), V, H_T, 1.3};
  const auto student = [&] { return LmHead<double>{W_S.data(), V, H_S, 0.8}; };
  const auto loss = [&] {
    std::vector<double> kl(N);
    return lm_head_forward_kl<double>(kl.data(), h_T.data(), teacher, h_S.data(), student(), N, tau, weights.data(),
                                      nullptr, kTinyChunks).loss;
  };

  std::vector<double> kl(N), dh(N * H_S, -7.0), dW0 = normal_doubles(V * H_S, 14, 1.0), dW = dW0;
  LmHeadGrad<double> grad{dh.data(), dW.data()};
  const auto r = lm_head_forward_kl<double>(kl.data(), h_T.data(), teacher, h_S.data(), student(), N, tau,
                                            weights.data(), &grad, kTinyChunks);
  double expected_loss = 0.0;
  for (int64_t t = 0; t < N; ++t) {
    EXPECT_GT(kl[t], 0.0);
    expected_loss += tau * tau * weights[t] * kl[t];  // loss is τ²-scaled, per-token values are not
  }
  EXPECT_NEAR(r.loss, expected_loss, 1e-14);
  std::vector<double> dW_added(V * H_S);
  for (size_t i = 0; i < dW.size(); ++i) dW_added[i] = dW[i] - dW0[i];

  const double err_h = fd_error(h_S, dh, loss), err_W = fd_error(W_S, dW_added, loss);
  std::printf("KL fd error (tau=2): dh_S %.2e, dW_S %.2e\n", err_h, err_W);
  EXPECT_LT(err_h, 1e-7);
  EXPECT_LT(err_W, 1e-7);

  std::vector<double> kl_ref(N), dh_ref(N * H_S), dW_ref = dW0;
  LmHeadGrad<double> grad_ref{dh_ref.data(), dW_ref.data()};
  const auto r_ref = lm_head_forward_kl_full<double>(kl_ref.data(), h_T.data(), teacher, h_S.data(), student(), N,
                                                     tau, weights.data(), &grad_ref);
  EXPECT_NEAR(r.loss, r_ref.loss, 1e-12 * std::abs(r_ref.loss));
  EXPECT_LT(max_rel(kl, kl_ref), 1e-12);
  EXPECT_LT(max_rel(dh, dh_ref), 1e-12);
  EXPECT_LT(max_rel(dW, dW_ref), 1e-12);
}

}  // namespace
