// Sampling (infer/sampling.h): greedy picks the argmax (lowest id on ties); a draw is a pure function of (logits,
// params, stream, index); top-k and top-p never return a token outside their set; temperature sampling follows the
// softmax (a chi-square-free check: empirical frequencies within 4 standard errors over 20,000 draws).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "infer/sampling.h"

using namespace hlm;

TEST(Sampling, GreedyIsArgmaxWithLowestIdOnTies) {
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(sample_token(logits, {}, 0, 0), 1);
  SamplingParams k1;
  k1.temperature = 1.0;
  k1.top_k = 1;
  for (uint64_t i = 0; i < 50; ++i) EXPECT_EQ(sample_token(logits, k1, 3, i), 1);
}

TEST(Sampling, DeterministicPerCounter) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(float(i));
  SamplingParams p;
  p.temperature = 1.3;
  p.seed = 17;
  std::vector<int32_t> a, b;
  for (uint64_t i = 0; i < 100; ++i) a.push_back(sample_token(logits, p, 2, i));
  for (uint64_t i = 0; i < 100; ++i) b.push_back(sample_token(logits, p, 2, i));
  EXPECT_EQ(a, b);
  p.seed = 18;
  std::vector<int32_t> c;
  for (uint64_t i = 0; i < 100; ++i) c.push_back(sample_token(logits, p, 2, i));
  EXPECT_NE(a, c);  // another seed draws another sequence (100 draws over 50 tokens: equal by chance ~never)
}

TEST(Sampling, TopKAndTopPStayInsideTheirSets) {
  // Probabilities at temperature 1: softmax of log(p) = p itself.
  const std::vector<double> p{0.05, 0.4, 0.1, 0.3, 0.15};
  std::vector<float> logits;
  for (double x : p) logits.push_back(static_cast<float>(std::log(x)));
  SamplingParams k2;
  k2.temperature = 1.0;
  k2.top_k = 2;
  SamplingParams p07;
  p07.temperature = 1.0;
  p07.top_p = 0.69;  // 0.4 + 0.3 = 0.7 reaches it: {1, 3}
  SamplingParams p071 = p07;
  p071.top_p = 0.72;  // needs the third: {1, 3, 4}
  std::vector<int> seen_k(5), seen_p(5), seen_p2(5);
  for (uint64_t i = 0; i < 2000; ++i) {
    ++seen_k[sample_token(logits, k2, 0, i)];
    ++seen_p[sample_token(logits, p07, 0, i)];
    ++seen_p2[sample_token(logits, p071, 0, i)];
  }
  EXPECT_EQ(seen_k[0] + seen_k[2] + seen_k[4], 0);
  EXPECT_GT(seen_k[1], 0);
  EXPECT_GT(seen_k[3], 0);
  EXPECT_EQ(seen_p[0] + seen_p[2] + seen_p[4], 0);
  EXPECT_EQ(seen_p2[0] + seen_p2[2], 0);
  EXPECT_GT(seen_p2[4], 0);
}

TEST(Sampling, TemperatureFollowsTheSoftmax) {
  const std::vector<float> logits{1.0f, 0.0f, 2.0f};
  SamplingParams p;
  p.temperature = 2.0;
  p.seed = 5;
  const int n = 20000;
  std::vector<int> count(3);
  for (int i = 0; i < n; ++i) ++count[sample_token(logits, p, 1, static_cast<uint64_t>(i))];
  double z = 0.0;
  for (float l : logits) z += std::exp(l / 2.0);
  for (int v = 0; v < 3; ++v) {
    const double q = std::exp(logits[v] / 2.0) / z, se = std::sqrt(q * (1 - q) / n);
    EXPECT_NEAR(count[v] / double(n), q, 4 * se) << "token " << v;
  }
}

TEST(Sampling, BadParametersAreInputErrors) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_THROW(sampling_check(p), Error);
  p = {};
  p.top_p = 0.0;
  EXPECT_THROW(sampling_check(p), Error);
  p = {};
  p.top_k = -2;
  EXPECT_THROW(sampling_check(p), Error);
  p = {};
  p.temperature = NAN;
  EXPECT_THROW(sampling_check(p), Error);
}
