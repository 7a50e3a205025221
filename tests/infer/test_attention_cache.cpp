// Attention over a paged KV cache (ops/attention/attention_cache.h) against the full causal attention
// (ops/attention/attention.h) on the same q, k, v: a whole-sequence prefill through the cache must be bit-identical
// (same operation order), and chunked prefill / single-token decode, with blocks scattered through the pool in a
// shuffled order, must be too — the cache only changes where keys are read from, not the arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/rng.h"
#include "ops/attention/attention.h"
#include "ops/attention/attention_cache.h"

using namespace hlm;

namespace {

std::vector<float> normal(int64_t n, uint64_t stream) {
  std::vector<float> v(static_cast<size_t>(n));
  rng_fill_normal(v.data(), static_cast<uint64_t>(n), 0.0f, 1.0f, 5, stream);
  return v;
}

struct Case {
  int64_t Hq, Hkv, D, block_size;
  std::vector<int64_t> lengths;  // sequences
  std::vector<int64_t> chunk;    // chunk sizes cycled through while filling the cache
  int64_t window = 0;            // sliding window (0 = full causal)
  // With a window: before each step, block table entries wholly before the step's first window are set to -1 and
  // their cache rows to NaN, as an engine that releases them would leave them; reading one would fail or show.
  bool release = false;
};

void check_case(const Case& c) {
  const int64_t N = static_cast<int64_t>(c.lengths.size());
  std::vector<int64_t> cu{0};
  for (int64_t L : c.lengths) cu.push_back(cu.back() + L);
  const int64_t T = cu.back();
  const std::vector<float> q = normal(T * c.Hq * c.D, 1), k = normal(T * c.Hkv * c.D, 2),
                           v = normal(T * c.Hkv * c.D, 3);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  std::vector<float> expect(static_cast<size_t>(T * c.Hq * c.D));
  attention_forward(expect.data(), q.data(), k.data(), v.data(), cu.data(), N, {T, c.Hq, c.Hkv, c.D, c.window},
                    scale);

  // Each sequence gets its blocks from a shuffled pool.
  int64_t max_blocks = 0, num_blocks = 0;
  for (int64_t L : c.lengths) {
    max_blocks = std::max(max_blocks, (L + c.block_size - 1) / c.block_size);
    num_blocks += (L + c.block_size - 1) / c.block_size;
  }
  std::vector<int32_t> pool(static_cast<size_t>(num_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::reverse(pool.begin(), pool.end());
  std::rotate(pool.begin(), pool.begin() + num_blocks / 3, pool.end());
  std::vector<int32_t> tables(static_cast<size_t>(N * max_blocks), -1);
  size_t next = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < (c.lengths[n] + c.block_size - 1) / c.block_size; ++b)
      tables[n * max_blocks + b] = pool[next++];
  const PagedKvShape shape{num_blocks, c.block_size, c.Hkv, c.D};
  std::vector<float> k_cache(static_cast<size_t>(num_blocks * c.block_size * c.Hkv * c.D), NAN);
  std::vector<float> v_cache(k_cache.size(), NAN);  // unwritten slots are NaN: reading one would show

  // Fill all sequences together, chunk by chunk (each step: the next chunk of every unfinished sequence).
  std::vector<int64_t> done(static_cast<size_t>(N), 0);
  std::vector<float> got(expect.size(), 0.0f);
  const int64_t row_q = c.Hq * c.D, row_kv = c.Hkv * c.D;
  for (size_t step = 0;; ++step) {
    const int64_t want = c.chunk[step % c.chunk.size()];
    std::vector<int64_t> step_cu{0}, context, slots, token_of;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t len = std::min(want, c.lengths[n] - done[n]);
      step_cu.push_back(step_cu.back() + len);
      context.push_back(done[n] + len);
      for (int64_t i = 0; i < len; ++i) {
        const int64_t p = done[n] + i;
        slots.push_back(int64_t{tables[n * max_blocks + p / c.block_size]} * c.block_size + p % c.block_size);
        token_of.push_back(cu[n] + p);
      }
      done[n] += len;
    }
    const int64_t Ts = step_cu.back();
    if (Ts == 0) break;
    if (c.release)
      for (int64_t n = 0; n < N; ++n) {
        const int64_t first_query = done[n] - (step_cu[n + 1] - step_cu[n]);
        const int64_t keep_from = attention_window_begin(first_query, c.window) / c.block_size;
        for (int64_t b = 0; b < keep_from; ++b) {
          int32_t& entry = tables[n * max_blocks + b];
          if (entry < 0) continue;
          std::fill_n(k_cache.begin() + int64_t{entry} * c.block_size * row_kv, c.block_size * row_kv, NAN);
          std::fill_n(v_cache.begin() + int64_t{entry} * c.block_size * row_kv, c.block_size * row_kv, NAN);
          entry = -1;
        }
      }
    std::vector<float> qs(static_cast<size_t>(Ts * row_q)), ks(static_cast<size_t>(Ts * row_kv)), vs(ks.size());
    for (int64_t t = 0; t < Ts; ++t) {
      std::copy_n(q.data() + token_of[t] * row_q, row_q, qs.data() + t * row_q);
      std::copy_n(k.data() + token_of[t] * row_kv, row_kv, ks.data() + t * row_kv);
      std::copy_n(v.data() + token_of[t] * row_kv, row_kv, vs.data() + t * row_kv);
    }
    attention_cache_write(k_cache.data(), v_cache.data(), ks.data(), vs.data(), slots.data(), Ts, shape);
    std::vector<float> out(static_cast<size_t>(Ts * row_q));
    attention_cache_forward(out.data(), qs.data(), k_cache.data(), v_cache.data(), shape, tables.data(), max_blocks,
                            context.data(), step_cu.data(), N, c.Hq, scale, c.window);
    for (int64_t t = 0; t < Ts; ++t) std::copy_n(out.data() + t * row_q, row_q, got.data() + token_of[t] * row_q);
  }
  for (size_t i = 0; i < expect.size(); ++i) ASSERT_EQ(got[i], expect[i]) << "element " << i;
}

}  // namespace

TEST(AttentionCache, WholePrefillEqualsCausalAttention) {
  check_case({4, 2, 16, 8, {19, 5, 33}, {64}});
}

TEST(AttentionCache, ChunkedPrefillEqualsCausalAttention) {
  check_case({4, 2, 16, 8, {19, 5, 33}, {7, 3, 8}});
  check_case({6, 3, 8, 4, {1, 12, 9}, {5}});
}

TEST(AttentionCache, TokenByTokenDecodeEqualsCausalAttention) {
  check_case({4, 1, 12, 16, {17, 40}, {1}});  // MQA, block of 16
  check_case({2, 2, 8, 1, {6, 3}, {1}});      // MHA, one-token blocks
}

TEST(AttentionCache, SlidingWindowEqualsWindowedAttention) {
  // Windows shorter than the sequences: whole prefill, chunks, token-by-token decode; GQA 2:1.
  check_case({4, 2, 16, 8, {19, 5, 33}, {64}, 5});
  check_case({4, 2, 16, 8, {19, 5, 33}, {7, 3, 8}, 6});
  check_case({4, 1, 12, 4, {17, 40}, {1}, 9});
  check_case({2, 2, 8, 1, {6, 3}, {1}, 1});  // W = 1: each token sees only itself
}

TEST(AttentionCache, SlidingWindowNeverReadsReleasedBlocks) {
  // Blocks wholly before each step's first window are dropped from the tables (−1) and poisoned (NaN): the results
  // stay bit-identical, so a window layer may keep only its last `window` positions.
  check_case({4, 2, 16, 4, {19, 5, 33}, {1}, 6, true});
  check_case({4, 2, 16, 4, {19, 5, 33}, {3, 2}, 7, true});
}
