// The q/k norm + RoPE + cache write reference (ops/qk_norm_rope/qk_norm_rope_ref.cpp) against plain loops written
// here from the formulas (HF Qwen3 / OLMo-2: q_norm per head or over the projection, rotate_half RoPE at the token's
// position, k/v rows stored at their slots), and its bad-input behaviour. Tolerance 4 fp32 ulps of the magnitude: the
// loops below compute the norm's mean in double and cos/sin from the same float angle, so they differ from the
// reference only by the order of a few roundings.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/qk_norm_rope/qk_norm_rope.h"

using namespace hlm;

namespace {

std::vector<float> ramp(size_t n, float scale, float offset) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.7f * static_cast<float>(i) + offset);
  return v;
}

// rows of width n of x ← w · x / sqrt(mean(x²) + eps)
void plain_norm(std::vector<float>& x, const std::vector<float>& w, size_t n, float eps) {
  for (size_t r = 0; r < x.size() / n; ++r) {
    double ss = 0;
    for (size_t d = 0; d < n; ++d) ss += static_cast<double>(x[r * n + d]) * x[r * n + d];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (size_t d = 0; d < n; ++d) x[r * n + d] = static_cast<float>(w[d] * (x[r * n + d] * inv));
  }
}

// x [T, H, D] rotated: pairs (i, i + R/2) by angle pos · inv_freq[i]
void plain_rope(std::vector<float>& x, const std::vector<int32_t>& pos, size_t H, const RopeTable& t) {
  const size_t D = static_cast<size_t>(t.head_dim), half = static_cast<size_t>(t.rotary_dim / 2);
  for (size_t tok = 0; tok < pos.size(); ++tok)
    for (size_t h = 0; h < H; ++h)
      for (size_t i = 0; i < half; ++i) {
        float* v = x.data() + (tok * H + h) * D;
        const float angle = static_cast<float>(pos[tok]) * t.inv_freq[i];
        const double c = std::cos(static_cast<double>(angle)) * t.attention_scaling;
        const double s = std::sin(static_cast<double>(angle)) * t.attention_scaling;
        const double a = v[i], b = v[i + half];
        v[i] = static_cast<float>(a * c - b * s);
        v[i + half] = static_cast<float>(b * c + a * s);
      }
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double mag = 0;
  for (float w : want) mag = std::max(mag, static_cast<double>(std::abs(w)));
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 4 * mag * 0x1p-24 + 1e-30) << what << " at " << i;
}

struct Case {
  int64_t T = 3, Hq = 4, Hkv = 2, D = 8;
  int64_t num_blocks = 3, block_size = 4;
  std::vector<int64_t> slots{5, 0, 11};
  std::vector<int32_t> pos{0, 17, 4095};
};

}  // namespace

// Per-head norms (Qwen3), whole-projection norms (OLMo-2), each with RoPE, partial RoPE and none.
TEST(QkNormRopeRef, MatchesPlainLoops) {
  const Case c;
  for (int mode = 0; mode < 2; ++mode) {
    for (double partial : {0.0, 1.0, 0.5}) {
      const int64_t Cq = c.Hq * c.D, Ckv = c.Hkv * c.D, pool = c.num_blocks * c.block_size;
      const int64_t qn = mode == 0 ? c.D : Cq, kn = mode == 0 ? c.D : Ckv;
      std::vector<float> q = ramp(static_cast<size_t>(c.T * Cq), 2.0f, 0.1f), k = ramp(static_cast<size_t>(c.T * Ckv), 3.0f, 0.5f);
      const std::vector<float> v = ramp(static_cast<size_t>(c.T * Ckv), 1.5f, 0.9f);
      const std::vector<float> qw = ramp(static_cast<size_t>(qn), 1.0f, 1.3f), kw = ramp(static_cast<size_t>(kn), 1.0f, 2.1f);
      std::vector<float> kc(static_cast<size_t>(pool * Ckv), -7.0f), vc(kc.size(), -8.0f);
      RopeParams rp;
      rp.partial_rotary_factor = partial > 0 ? partial : 1.0;
      const RopeTable table = rope_table_build(rp, c.D, 4096);
      const RopeTable* rope = partial > 0 ? &table : nullptr;

      std::vector<float> q_want = q, k_want = k;
      plain_norm(q_want, qw, static_cast<size_t>(qn), 1e-6f);
      plain_norm(k_want, kw, static_cast<size_t>(kn), 1e-6f);
      if (rope != nullptr) {
        plain_rope(q_want, c.pos, static_cast<size_t>(c.Hq), table);
        plain_rope(k_want, c.pos, static_cast<size_t>(c.Hkv), table);
      }
      const QkNormRopeShape s{c.T, c.Hq, c.Hkv, c.D, qn, kn, 1e-6f};
      qk_norm_rope_cache_write<float>(q.data(), k.data(), v.data(), qw.data(), kw.data(), s, rope, c.pos.data(),
                                      kc.data(), vc.data(), c.slots.data(), PagedKvShape{c.num_blocks, c.block_size, c.Hkv, c.D});
      SCOPED_TRACE("mode " + std::to_string(mode) + " partial " + std::to_string(partial));
      expect_close(q, q_want, "q");
      expect_close(k, k_want, "k");
      // written slots hold k and v exactly; the others are untouched
      for (int64_t slot = 0; slot < pool; ++slot) {
        int64_t t = -1;
        for (int64_t i = 0; i < c.T; ++i)
          if (c.slots[static_cast<size_t>(i)] == slot) t = i;
        for (int64_t j = 0; j < Ckv; ++j) {
          const size_t at = static_cast<size_t>(slot * Ckv + j);
          EXPECT_EQ(kc[at], t < 0 ? -7.0f : k[static_cast<size_t>(t * Ckv + j)]) << slot;
          EXPECT_EQ(vc[at], t < 0 ? -8.0f : v[static_cast<size_t>(t * Ckv + j)]) << slot;
        }
      }
      if (partial == 0.5) {  // dims past the rotary ones are only normalized
        std::vector<float> n = ramp(static_cast<size_t>(c.T * Cq), 2.0f, 0.1f);
        plain_norm(n, qw, static_cast<size_t>(qn), 1e-6f);
        for (int64_t t = 0; t < c.T; ++t)
          for (int64_t h = 0; h < c.Hq; ++h)
            for (int64_t d = table.rotary_dim; d < c.D; ++d) {
              const size_t at = static_cast<size_t>((t * c.Hq + h) * c.D + d);
              EXPECT_NEAR(q[at], n[at], 4 * std::abs(n[at]) * 0x1p-24 + 1e-30);
            }
      }
    }
  }
}

// Per-head and whole-projection norms differ (the mode is not ignored), and a norm size of 0 skips the norm.
TEST(QkNormRopeRef, NormModesAndNoNorm) {
  const Case c;
  const int64_t Cq = c.Hq * c.D, Ckv = c.Hkv * c.D;
  const std::vector<float> q0 = ramp(static_cast<size_t>(c.T * Cq), 2.0f, 0.1f), k0 = ramp(static_cast<size_t>(c.T * Ckv), 3.0f, 0.5f);
  const std::vector<float> v = ramp(static_cast<size_t>(c.T * Ckv), 1.0f, 0.2f), w(static_cast<size_t>(Cq), 1.0f);
  std::vector<float> kc(static_cast<size_t>(c.num_blocks * c.block_size * Ckv)), vc(kc.size());
  const PagedKvShape cache{c.num_blocks, c.block_size, c.Hkv, c.D};
  std::vector<float> q_head = q0, k_head = k0, q_whole = q0, k_whole = k0, q_none = q0, k_none = k0;
  qk_norm_rope_cache_write<float>(q_head.data(), k_head.data(), v.data(), w.data(), w.data(),
                                  {c.T, c.Hq, c.Hkv, c.D, c.D, c.D, 1e-6f}, nullptr, c.pos.data(), kc.data(), vc.data(),
                                  c.slots.data(), cache);
  qk_norm_rope_cache_write<float>(q_whole.data(), k_whole.data(), v.data(), w.data(), w.data(),
                                  {c.T, c.Hq, c.Hkv, c.D, Cq, Ckv, 1e-6f}, nullptr, c.pos.data(), kc.data(), vc.data(),
                                  c.slots.data(), cache);
  qk_norm_rope_cache_write<float>(q_none.data(), k_none.data(), v.data(), w.data(), w.data(),
                                  {c.T, c.Hq, c.Hkv, c.D, 0, 0, 1e-6f}, nullptr, c.pos.data(), kc.data(), vc.data(),
                                  c.slots.data(), cache);
  EXPECT_NE(q_head, q_whole);
  EXPECT_NE(k_head, k_whole);
  EXPECT_EQ(q_none, q0);
  EXPECT_EQ(k_none, k0);
  // per head: every head of unit RMS (weight 1)
  for (int64_t h = 0; h < c.T * c.Hq; ++h) {
    double ss = 0;
    for (int64_t d = 0; d < c.D; ++d) ss += static_cast<double>(q_head[static_cast<size_t>(h * c.D + d)]) * q_head[static_cast<size_t>(h * c.D + d)];
    EXPECT_NEAR(ss / static_cast<double>(c.D), 1.0, 1e-5) << h;
  }
}

TEST(QkNormRopeRef, BadInputThrows) {
  const Case c;
  const int64_t Cq = c.Hq * c.D, Ckv = c.Hkv * c.D;
  std::vector<float> q(static_cast<size_t>(c.T * Cq), 1.0f), k(static_cast<size_t>(c.T * Ckv), 1.0f), v = k;
  const std::vector<float> w(static_cast<size_t>(Cq), 1.0f);
  std::vector<float> kc(static_cast<size_t>(c.num_blocks * c.block_size * Ckv)), vc(kc.size());
  const PagedKvShape cache{c.num_blocks, c.block_size, c.Hkv, c.D};
  const QkNormRopeShape s{c.T, c.Hq, c.Hkv, c.D, c.D, c.D, 1e-6f};
  const RopeTable table = rope_table_build(RopeParams{}, c.D, 4096);
  // a slot past the pool
  std::vector<int64_t> slots = c.slots;
  slots[1] = c.num_blocks * c.block_size;
  EXPECT_THROW(qk_norm_rope_cache_write<float>(q.data(), k.data(), v.data(), w.data(), w.data(), s, &table,
                                               c.pos.data(), kc.data(), vc.data(), slots.data(), cache),
               Error);
  slots[1] = -1;
  EXPECT_THROW(qk_norm_rope_cache_write<float>(q.data(), k.data(), v.data(), w.data(), w.data(), s, &table,
                                               c.pos.data(), kc.data(), vc.data(), slots.data(), cache),
               Error);
  // a negative position
  std::vector<int32_t> pos = c.pos;
  pos[2] = -3;
  EXPECT_THROW(qk_norm_rope_cache_write<float>(q.data(), k.data(), v.data(), w.data(), w.data(), s, &table,
                                               pos.data(), kc.data(), vc.data(), c.slots.data(), cache),
               Error);
  // a norm size that is neither D nor H·D
  QkNormRopeShape bad = s;
  bad.q_norm_size = 2 * c.D;
  EXPECT_THROW(qk_norm_rope_cache_write<float>(q.data(), k.data(), v.data(), w.data(), w.data(), bad, &table,
                                               c.pos.data(), kc.data(), vc.data(), c.slots.data(), cache),
               Error);
  // a cache of another head layout
  EXPECT_THROW(qk_norm_rope_cache_write<float>(q.data(), k.data(), v.data(), w.data(), w.data(), s, &table,
                                               c.pos.data(), kc.data(), vc.data(), c.slots.data(),
                                               PagedKvShape{c.num_blocks, c.block_size, c.Hkv, c.D / 2}),
               Error);
}
