// attention_recent_mass against the attention forward itself: with head_dim ≥ T and v_j = one-hot(position of j),
// the attention output row of query t IS its probability row, so the mass on the last w keys is a sum of outputs.
#include <gtest/gtest.h>

#include <vector>

#include "ops/attention/attention.h"
#include "ops/attention/attention_locality.h"
#include "support/random.h"

namespace hlm {
namespace {

// layer_window: the attention layer's own sliding window (0 = full causal attention), honoured by both sides.
void check_against_forward(int64_t layer_window) {
  const std::vector<int64_t> cu_seqlens = {0, 7, 19};  // two sequences (7 and 12 tokens)
  // GQA: 4 query heads over 2 kv heads; D = 12 ≥ longest seq
  const AttentionShape s{19, 4, 2, 12, layer_window};
  const double scale = 0.4;
  const std::vector<float> q = test::random_vector(size_t(19 * 4 * 12), 1);
  const std::vector<float> k = test::random_vector(size_t(19 * 2 * 12), 2);
  std::vector<float> v(size_t(19 * 2 * 12), 0.0f);
  for (int64_t seq = 0; seq < 2; ++seq)
    for (int64_t t = cu_seqlens[size_t(seq)]; t < cu_seqlens[size_t(seq) + 1]; ++t)
      for (int64_t kvh = 0; kvh < 2; ++kvh) v[size_t((t * 2 + kvh) * 12 + (t - cu_seqlens[size_t(seq)]))] = 1.0f;
  std::vector<float> probs(size_t(19 * 4 * 12));
  attention_forward(probs.data(), q.data(), k.data(), v.data(), cu_seqlens.data(), 2, s, float(scale));

  const std::vector<int64_t> windows = {1, 3, 8, 64};
  std::vector<double> mass(size_t(19 * 4));
  attention_recent_mass(mass.data(), q.data(), k.data(), cu_seqlens.data(), 2, s, scale, windows.data(), 4);
  for (int64_t seq = 0; seq < 2; ++seq) {
    for (int64_t t = cu_seqlens[size_t(seq)]; t < cu_seqlens[size_t(seq) + 1]; ++t) {
      const int64_t pos = t - cu_seqlens[size_t(seq)];
      for (size_t w = 0; w < windows.size(); ++w) {
        double expect = 0.0;
        for (int64_t h = 0; h < 4; ++h)
          for (int64_t j = std::max<int64_t>(0, pos - windows[w] + 1); j <= pos; ++j)
            expect += probs[size_t((t * 4 + h) * 12 + j)] / 4.0;
        // The forward runs in fp32 (scores, exp, 1/Σ): ~1e-6 relative per probability.
        EXPECT_NEAR(mass[size_t(t) * 4 + w], expect, 2e-6) << "t " << t << " window " << windows[w];
      }
      EXPECT_NEAR(mass[size_t(t) * 4 + 3], 1.0, 1e-12);  // window 64 covers every visible key
      if (pos == 0) {
        EXPECT_NEAR(mass[size_t(t) * 4 + 0], 1.0, 1e-12);  // the first token sees only itself
      }
      if (layer_window > 0 && layer_window <= 8)  // the softmax never reaches past the layer's window
        EXPECT_NEAR(mass[size_t(t) * 4 + 2], 1.0, 1e-12);
    }
  }
}

TEST(AttentionLocality, MatchesProbabilitiesOfTheAttentionForward) { check_against_forward(0); }

TEST(AttentionLocality, SlidingWindowLayerMatchesItsWindowedForward) {
  check_against_forward(4);  // shorter than both sequences
  check_against_forward(2);
}

}  // namespace
}  // namespace hlm
