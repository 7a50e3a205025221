// Chunked fp32 LM-head losses (train/lm_head_loss.h) against the full-logits reference, plus KL properties.
// Tolerance for chunked-vs-full (≤ 1e-5 relative to the largest reference value): the reference does all arithmetic
// in double; the chunked path computes fp32 logits with sgemm (H-term dot products: ≤ H·u ≈ 3e-6 relative worst case
// for H = 48, u = 6e-8, ~sqrt(H)·u ≈ 4e-7 typical) and fp32 gradient gemms (N- and chunk-term sums: ≤ 64·u ≈ 4e-6
// worst case); its online log-sum-exp itself is in double. The fp32 logit error grows with |logit|: at hidden scale 40
// (logits of a few hundred, where a naive fp32 exp overflows) dh/dW reach ~3e-6, still 3x inside the bound.
// Any chunking bug (a dropped or double-counted chunk, a wrong rescale, a missed target) changes the results at
// ≥ 1e-3, so 1e-5 separates the two with margin.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "support/random.h"
#include "train/lm_head_loss.h"

using namespace hlm;

namespace {

constexpr int64_t N = 64, V = 1000;
long long ll(int64_t v) { return static_cast<long long>(v); }  // for printf
const std::vector<LmHeadChunking> kChunkings = {{128, 16}, {1000, 64}, {333, 7}, {4096, 1024}, {1, 64}};

std::vector<int32_t> make_targets() {
  std::vector<int32_t> t(N);
  for (int64_t i = 0; i < N; ++i) t[i] = (i % 9 == 4) ? -100 : static_cast<int32_t>((i * 389 + 17) % V);
  t[1] = V - 1;  // last vocabulary entry
  return t;
}

TEST(LmHeadLossChunked, CrossEntropyMatchesFullLogits) {
  const int64_t H = 48;
  for (const float hidden_scale : {1.0f, 40.0f}) {  // 40: logits of a few hundred, exercising the online max
    const auto h = test::random_vector(N * H, 20, hidden_scale), W = test::random_vector(V * H, 21, 0.3f);
    const auto weights = test::random_vector(N, 22, 1.0f);  // signed weights are fine for the math
    const auto targets = make_targets();
    const LmHead<float> head{W.data(), V, H, 1.5};
    const auto dW0 = test::random_vector(V * H, 23, 0.01f);

    std::vector<float> ce_ref(N), dh_ref(N * H), dW_ref = dW0;
    LmHeadGrad<float> grad_ref{dh_ref.data(), dW_ref.data()};
    const auto r_ref =
        lm_head_cross_entropy_full<float>(ce_ref.data(), h.data(), N, head, targets.data(), weights.data(), &grad_ref);
    for (const auto& chunking : kChunkings) {
      std::vector<float> ce(N), dh(N * H, 5.0f), dW = dW0;
      LmHeadGrad<float> grad{dh.data(), dW.data()};
      const auto r = lm_head_cross_entropy<float>(ce.data(), h.data(), N, head, targets.data(), weights.data(), &grad,
                                                  chunking);
      const double e_ce = test::max_rel_error(ce.data(), ce_ref.data(), N);
      const double e_dh = test::max_rel_error(dh.data(), dh_ref.data(), N * H);
      const double e_dW = test::max_rel_error(dW.data(), dW_ref.data(), V * H);
      std::printf("CE scale %g chunk %lld rows %lld: ce %.2e dh %.2e dW %.2e\n", hidden_scale, ll(chunking.vocab_chunk),
                  ll(chunking.row_block), e_ce, e_dh, e_dW);
      EXPECT_LT(e_ce, 1e-5);
      EXPECT_LT(e_dh, 1e-5);
      EXPECT_LT(e_dW, 1e-5);
      EXPECT_NEAR(r.mean, r_ref.mean, 1e-5 * std::abs(r_ref.mean));
      EXPECT_EQ(r.count, r_ref.count);
    }
  }
}

TEST(LmHeadLossChunked, ForwardKlMatchesFullLogits) {
  const int64_t H_T = 40, H_S = 48;
  const auto h_T = test::random_vector(N * H_T, 30, 1.0f), W_T = test::random_vector(V * H_T, 31, 0.3f);
  const auto h_S = test::random_vector(N * H_S, 32, 1.0f), W_S = test::random_vector(V * H_S, 33, 0.3f);
  const LmHead<float> teacher{W_T.data(), V, H_T, 1.2}, student{W_S.data(), V, H_S, 0.9};
  for (const double tau : {1.0, 2.0}) {
    std::vector<float> kl_ref(N), dh_ref(N * H_S), dW_ref(V * H_S, 0.0f);
    LmHeadGrad<float> grad_ref{dh_ref.data(), dW_ref.data()};
    const auto r_ref = lm_head_forward_kl_full<float>(kl_ref.data(), h_T.data(), teacher, h_S.data(), student, N, tau,
                                                      nullptr, &grad_ref);
    for (const auto& chunking : kChunkings) {
      std::vector<float> kl(N), dh(N * H_S, 5.0f), dW(V * H_S, 0.0f);
      LmHeadGrad<float> grad{dh.data(), dW.data()};
      const auto r = lm_head_forward_kl<float>(kl.data(), h_T.data(), teacher, h_S.data(), student, N, tau, nullptr,
                                               &grad, chunking);
      const double e_kl = test::max_rel_error(kl.data(), kl_ref.data(), N);
      const double e_dh = test::max_rel_error(dh.data(), dh_ref.data(), N * H_S);
      const double e_dW = test::max_rel_error(dW.data(), dW_ref.data(), V * H_S);
      std::printf("KL tau %g chunk %lld rows %lld: kl %.2e dh %.2e dW %.2e\n", tau, ll(chunking.vocab_chunk),
                  ll(chunking.row_block), e_kl, e_dh, e_dW);
      EXPECT_LT(e_kl, 1e-5);
      EXPECT_LT(e_dh, 1e-5);
      EXPECT_LT(e_dW, 1e-5);
      EXPECT_NEAR(r.loss, r_ref.loss, 1e-5 * std::abs(r_ref.loss));
      // KL ≥ 0 for every token; these unrelated random models are far apart (KL ~ 0.1–1 nats).
      for (int64_t t = 0; t < N; ++t) EXPECT_GT(kl[t], 0.0f);
    }
  }
}

// Identical teacher and student: p_T = p_S, so KL = 0 and the gradient vanishes. Both logit tiles come from the same
// sgemm on the same data, so the values are exactly 0 in practice; the bound 1e-6 only allows the lse to differ by a
// few fp32 ulps (KL is first-order in such a shift through −lse_T + lse_S).
TEST(LmHeadLossChunked, ForwardKlIsZeroForIdenticalModels) {
  const int64_t H = 32;
  const auto h = test::random_vector(N * H, 40, 1.0f), W = test::random_vector(V * H, 41, 0.5f);
  const LmHead<float> head{W.data(), V, H, 1.0};
  std::vector<float> kl(N), dh(N * H, 1.0f), dW(V * H, 0.0f);
  LmHeadGrad<float> grad{dh.data(), dW.data()};
  const auto r = lm_head_forward_kl<float>(kl.data(), h.data(), head, h.data(), head, N, 2.0, nullptr, &grad,
                                           {100, 16});
  for (int64_t t = 0; t < N; ++t) EXPECT_LE(std::abs(kl[t]), 1e-6f);
  EXPECT_LE(std::abs(r.loss), 1e-6);
  for (float x : dh) EXPECT_LE(std::abs(x), 1e-6f);
  for (float x : dW) EXPECT_LE(std::abs(x), 1e-6f);
}

TEST(LmHeadLossChunked, AllIgnoredGivesZeroLossAndGradient) {
  const int64_t H = 8, n = 4;
  const auto h = test::random_vector(n * H, 50), W = test::random_vector(V * H, 51);
  const std::vector<int32_t> targets(n, -100);
  std::vector<float> ce(n, 9.0f), dh(n * H, 9.0f), dW(V * H, 0.0f);
  LmHeadGrad<float> grad{dh.data(), dW.data()};
  const auto r = lm_head_cross_entropy<float>(ce.data(), h.data(), n, {W.data(), V, H, 1.0}, targets.data(), nullptr,
                                              &grad, {64, 2});
  EXPECT_EQ(r.count, 0);
  EXPECT_EQ(r.loss, 0.0);
  EXPECT_EQ(r.mean, 0.0);
  for (float x : ce) EXPECT_EQ(x, 0.0f);
  for (float x : dh) EXPECT_EQ(x, 0.0f);
  for (float x : dW) EXPECT_EQ(x, 0.0f);
}

TEST(LmHeadLossChunked, RejectsBadInput) {
  const int64_t H = 4, n = 2;
  const auto h = test::random_vector(n * H, 60), W = test::random_vector(V * H, 61);
  std::vector<float> out(n);
  const std::vector<int32_t> bad_targets = {1, static_cast<int32_t>(V)};
  const LmHead<float> head{W.data(), V, H, 1.0};
  EXPECT_THROW(lm_head_cross_entropy<float>(out.data(), h.data(), n, head, bad_targets.data(), nullptr, nullptr),
               Error);
  const std::vector<int32_t> ok_targets = {1, 2};
  EXPECT_THROW(lm_head_cross_entropy<float>(out.data(), h.data(), n, head, ok_targets.data(), nullptr, nullptr,
                                            {0, 16}),
               Error);
  EXPECT_THROW(lm_head_forward_kl<float>(out.data(), h.data(), head, h.data(), head, n, 0.0, nullptr, nullptr), Error);
  const LmHead<float> smaller{W.data(), V - 1, H, 1.0};
  EXPECT_THROW(lm_head_forward_kl<float>(out.data(), h.data(), head, h.data(), smaller, n, 1.0, nullptr, nullptr),
               Error);
}

}  // namespace
