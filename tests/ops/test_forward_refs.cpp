// CPU forward references of [core] against naive double-precision formulas written out in the test.
// Tolerances: the ops accumulate in f32 (attention dot products, sgemm) where the naive versions use double; for the
// tiny sizes here (K <= 96 terms of magnitude ~1) f32 summation error stays below ~1e-5 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "ops/attention/attention.h"
#include "ops/embedding/embedding.h"
#include "ops/log_softmax/log_softmax.h"
#include "ops/matmul/matmul.h"
#include "ops/residual/residual.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/swiglu/swiglu.h"
#include "support/random.h"

using namespace hlm;
using hlm::test::max_rel_error;
using hlm::test::random_vector;

TEST(Embedding, GathersRowsAndScales) {
  const int64_t V = 7, D = 5;
  auto table = random_vector(V * D, 1);
  std::vector<int32_t> ids{3, 0, 6, 3};
  std::vector<float> out(ids.size() * D);
  embedding_forward(out.data(), table.data(), ids.data(), 4, V, D, 2.5f);
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t d = 0; d < D; ++d) EXPECT_EQ(out[t * D + d], table[ids[t] * D + d] * 2.5f);
}

TEST(Embedding, OutOfRangeIdIsAnInputError) {
  std::vector<float> table(6, 0.0f), out(6);
  std::vector<int32_t> ids{1, 3};
  try {
    embedding_forward(out.data(), table.data(), ids.data(), 2, 3, 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("position 1"), std::string::npos) << e.what();
  }
}

TEST(RmsNorm, MatchesFormula) {
  const int64_t R = 3, D = 33;
  auto x = random_vector(R * D, 2, 3.0f);
  auto w = random_vector(D, 3);
  std::vector<float> out(R * D);
  rmsnorm_forward(out.data(), x.data(), w.data(), R, D, 1e-6f);
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += double(x[r * D + d]) * x[r * D + d];
    const double inv = 1.0 / std::sqrt(ss / D + 1e-6);
    for (int64_t d = 0; d < D; ++d) EXPECT_NEAR(out[r * D + d], w[d] * x[r * D + d] * inv, 2e-6 * std::abs(w[d]) * 4);
  }
  // In place gives the same result.
  std::vector<float> inplace = x;
  rmsnorm_forward(inplace.data(), inplace.data(), w.data(), R, D, 1e-6f);
  EXPECT_EQ(inplace, out);
}

TEST(Matmul, MatchesNaiveWithBiasAndAccumulate) {
  const int64_t M = 5, N = 7, K = 96;
  auto x = random_vector(M * K, 4), w = random_vector(N * K, 5), b = random_vector(N, 6);
  std::vector<float> y(M * N), expect(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = b[j];
      for (int64_t k = 0; k < K; ++k) s += double(x[i * K + k]) * w[j * K + k];
      expect[i * N + j] = static_cast<float>(s);
    }
  matmul_forward(y.data(), x.data(), w.data(), b.data(), M, N, K);
  EXPECT_LT(max_rel_error(y.data(), expect.data(), y.size()), 1e-5);
  matmul_forward(y.data(), x.data(), w.data(), b.data(), M, N, K, /*accumulate=*/true);
  for (auto& e : expect) e *= 2;
  EXPECT_LT(max_rel_error(y.data(), expect.data(), y.size()), 1e-5);
}

TEST(SwiGlu, MatchesFormula) {
  auto g = random_vector(50, 7, 4.0f), u = random_vector(50, 8);
  std::vector<float> out(50);
  swiglu_forward(out.data(), g.data(), u.data(), 50);
  for (int i = 0; i < 50; ++i) EXPECT_NEAR(out[i], g[i] / (1 + std::exp(-double(g[i]))) * u[i], 1e-6 * (1 + std::abs(g[i] * u[i])));
}

TEST(Residual, AddsScaled) {
  std::vector<float> x{1, 2, 3}, d{4, 5, 6};
  residual_add_forward(x.data(), d.data(), 0.5f, 3);
  EXPECT_EQ(x, (std::vector<float>{3, 4.5f, 6}));
}

TEST(LogSoftmax, StableForLargeLogitsAndPropagatesNaN) {
  const int64_t V = 1000;
  auto x = random_vector(2 * V, 9, 5.0f);
  for (int64_t v = 0; v < V; ++v) x[v] += 1e4f;  // would overflow a naive exp
  std::vector<float> out(2 * V);
  log_softmax_forward(out.data(), x.data(), 2, V);
  for (int r = 0; r < 2; ++r) {
    double total = 0;
    for (int64_t v = 0; v < V; ++v) total += std::exp(double(out[r * V + v]));
    EXPECT_NEAR(total, 1.0, 1e-5);
  }
  x[V + 3] = std::numeric_limits<float>::quiet_NaN();
  log_softmax_forward(out.data(), x.data(), 2, V);
  EXPECT_TRUE(std::isnan(out[V]));
  EXPECT_FALSE(std::isnan(out[0]));
}

// Naive causal GQA attention in double over the full score matrix of each sequence (keys t−W < j ≤ t with a window).
static std::vector<float> naive_attention(const std::vector<float>& q, const std::vector<float>& k,
                                          const std::vector<float>& v, const std::vector<int64_t>& cu,
                                          const AttentionShape& s, float scale) {
  std::vector<float> out(q.size());
  const int64_t D = s.head_dim, G = s.q_heads / s.kv_heads;
  for (size_t seq = 0; seq + 1 < cu.size(); ++seq)
    for (int64_t t = cu[seq]; t < cu[seq + 1]; ++t)
      for (int64_t h = 0; h < s.q_heads; ++h) {
        std::vector<double> p;
        double mx = -1e300;
        const int64_t j0 = s.window > 0 ? std::max(cu[seq], t - s.window + 1) : cu[seq];  // window: t−W < j ≤ t
        for (int64_t j = j0; j <= t; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += double(q[(t * s.q_heads + h) * D + d]) * k[(j * s.kv_heads + h / G) * D + d];
          p.push_back(dot * scale);
          mx = std::max(mx, p.back());
        }
        double z = 0;
        for (auto& e : p) z += (e = std::exp(e - mx));
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = j0; j <= t; ++j) acc += p[j - j0] / z * v[(j * s.kv_heads + h / G) * D + d];
          out[(t * s.q_heads + h) * D + d] = static_cast<float>(acc);
        }
      }
  return out;
}

TEST(Attention, MatchesNaiveForPackedSequencesAndAnyBlock) {
  const std::vector<int64_t> cu{0, 13, 14, 47};  // odd lengths, a length-1 sequence
  const AttentionShape s{47, 6, 2, 12};
  auto q = random_vector(47 * 6 * 12, 10), k = random_vector(47 * 2 * 12, 11), v = random_vector(47 * 2 * 12, 12);
  const float scale = 1.0f / std::sqrt(12.0f);
  const auto expect = naive_attention(q, k, v, cu, s, scale);
  for (int64_t block : {1, 5, 64}) {
    std::vector<float> out(q.size());
    attention_forward(out.data(), q.data(), k.data(), v.data(), cu.data(), 3, s, scale, block);
    EXPECT_LT(max_rel_error(out.data(), expect.data(), out.size()), 1e-5) << "block " << block;
  }
}

TEST(Attention, SlidingWindowMatchesNaiveMaskedAttention) {
  // Windows shorter than, equal to and longer than the sequences; W = 1 sees only itself. GQA 6:2, odd lengths.
  const std::vector<int64_t> cu{0, 13, 14, 47};
  auto q = random_vector(47 * 6 * 12, 16), k = random_vector(47 * 2 * 12, 17), v = random_vector(47 * 2 * 12, 18);
  const float scale = 1.0f / std::sqrt(12.0f);
  std::vector<float> full(q.size());
  attention_forward(full.data(), q.data(), k.data(), v.data(), cu.data(), 3, AttentionShape{47, 6, 2, 12}, scale);
  for (int64_t window : {1, 3, 5, 33, 64}) {
    const AttentionShape s{47, 6, 2, 12, window};
    const auto expect = naive_attention(q, k, v, cu, s, scale);
    for (int64_t block : {1, 5, 64}) {
      std::vector<float> out(q.size());
      attention_forward(out.data(), q.data(), k.data(), v.data(), cu.data(), 3, s, scale, block);
      EXPECT_LT(max_rel_error(out.data(), expect.data(), out.size()), 1e-5) << "window " << window << " block " << block;
    }
    std::vector<float> out(q.size());
    attention_forward(out.data(), q.data(), k.data(), v.data(), cu.data(), 3, s, scale);
    if (window >= 33) {  // no sequence is longer than 33: the window changes nothing, bit for bit
      EXPECT_EQ(out, full) << "window " << window;
    } else {  // a window shorter than a sequence must change its later rows
      EXPECT_GT(max_rel_error(out.data(), full.data(), out.size()), 1e-3) << "window " << window;
    }
    if (window == 1)  // only itself: out = v of its own kv head
      for (int64_t t = 0; t < 47; ++t)
        for (int64_t h = 0; h < 6; ++h)
          for (int64_t d = 0; d < 12; ++d) EXPECT_FLOAT_EQ(out[(t * 6 + h) * 12 + d], v[(t * 2 + h / 3) * 12 + d]);
  }
}

TEST(Attention, FirstTokenReturnsItsValue) {
  const std::vector<int64_t> cu{0, 3};
  const AttentionShape s{3, 2, 1, 4};
  auto q = random_vector(3 * 2 * 4, 13), k = random_vector(3 * 4, 14), v = random_vector(3 * 4, 15);
  std::vector<float> out(q.size());
  attention_forward(out.data(), q.data(), k.data(), v.data(), cu.data(), 1, s, 0.5f);
  for (int h = 0; h < 2; ++h)
    for (int d = 0; d < 4; ++d) EXPECT_FLOAT_EQ(out[h * 4 + d], v[d]);
}
