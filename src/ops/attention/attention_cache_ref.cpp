// Attention over a paged KV cache: CPU reference (contract in attention_cache.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ops/attention/attention_cache.h"

namespace hlm {

void attention_cache_write(float* k_cache, float* v_cache, const float* k, const float* v,
                           const int64_t* slot_mapping, int64_t tokens, const PagedKvShape& c) {
  const int64_t row = c.slot_elements(), slots = c.num_blocks * c.block_size;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t s = slot_mapping[t];
    HLM_CHECK(s >= 0 && s < slots, "KV cache slot ", s, " outside the pool of ", slots);
    std::copy_n(k + t * row, row, k_cache + s * row);
    std::copy_n(v + t * row, row, v_cache + s * row);
  }
}

void attention_cache_forward(float* out, const float* q, const float* k_cache, const float* v_cache,
                             const PagedKvShape& c, const int32_t* block_tables, int64_t max_blocks,
                             const int64_t* context_lens, const int64_t* cu_seqlens, int64_t n_seqs, int64_t q_heads,
                             float scale, int64_t window) {
  HLM_CHECK(window >= 0, "attention window must be >= 0, got ", window);
  HLM_CHECK(c.kv_heads > 0 && q_heads % c.kv_heads == 0, "q heads ", q_heads, " not a multiple of kv heads ",
            c.kv_heads);
  const int64_t D = c.head_dim, group = q_heads / c.kv_heads, row = c.slot_elements();
  struct Item {
    int64_t seq, token, h;  // token: packed query row
  };
  std::vector<Item> items;
  int64_t work = 0;
  for (int64_t n = 0; n < n_seqs; ++n) {
    const int64_t nq = cu_seqlens[n + 1] - cu_seqlens[n];
    HLM_CHECK(nq >= 0 && context_lens[n] >= nq, "sequence ", n, ": context ", context_lens[n], " < its ", nq,
              " queries");
    const int64_t blocks = (context_lens[n] + c.block_size - 1) / c.block_size;
    HLM_CHECK(blocks <= max_blocks, "sequence ", n, ": context exceeds its block table");
    // Blocks before the first query's window are never read (a window layer may have released them).
    const int64_t first_block = attention_window_begin(context_lens[n] - nq, window) / c.block_size;
    for (int64_t b = first_block; b < blocks; ++b) {  // checked here: no throwing inside the parallel region
      const int32_t block = block_tables[n * max_blocks + b];
      HLM_CHECK(block >= 0 && block < c.num_blocks, "sequence ", n, ": block table entry ", block,
                " outside the pool of ", c.num_blocks);
    }
    for (int64_t t = cu_seqlens[n]; t < cu_seqlens[n + 1]; ++t)
      for (int64_t h = 0; h < q_heads; ++h) items.push_back({n, t, h});
    work += nq * context_lens[n] * q_heads * D;
  }
#pragma omp parallel if (work > 32768)
  {
    std::vector<float> scores;
#pragma omp for schedule(dynamic, 4)
    for (size_t i = 0; i < items.size(); ++i) {
      const Item& it = items[i];
      const int64_t nq = cu_seqlens[it.seq + 1] - cu_seqlens[it.seq];
      const int64_t position = context_lens[it.seq] - nq + (it.token - cu_seqlens[it.seq]);
      const int64_t visible = position + 1, kvh = it.h / group;
      const int64_t lo = attention_window_begin(position, window);  // keys [lo, visible)
      const int32_t* table = block_tables + it.seq * max_blocks;
      const auto slot_row = [&](int64_t p) {
        return (int64_t{table[p / c.block_size]} * c.block_size + p % c.block_size) * row + kvh * D;
      };
      const float* qi = q + (it.token * q_heads + it.h) * D;
      scores.resize(static_cast<size_t>(visible));
      float max_score = -std::numeric_limits<float>::infinity();
      for (int64_t j = lo; j < visible; ++j) {
        const float* kj = k_cache + slot_row(j);
        float dot = 0.0f;
        for (int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
        scores[j] = dot * scale;
        max_score = std::max(max_score, scores[j]);
      }
      double denom = 0.0;
      for (int64_t j = lo; j < visible; ++j) {
        scores[j] = std::exp(scores[j] - max_score);
        denom += scores[j];
      }
      const auto inv = static_cast<float>(1.0 / denom);
      float* oi = out + (it.token * q_heads + it.h) * D;
      std::fill(oi, oi + D, 0.0f);
      for (int64_t j = lo; j < visible; ++j) {
        const float p = scores[j] * inv;
        const float* vj = v_cache + slot_row(j);
        for (int64_t d = 0; d < D; ++d) oi[d] += p * vj[d];
      }
    }
  }
}

}  // namespace hlm
