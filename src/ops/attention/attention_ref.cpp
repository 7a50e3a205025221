#include "ops/attention/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace hlm {

// One (sequence, head, query block): scores [nq, nk] for queries [q0, q0+nq) of the sequence and keys [0, q0+nq),
// exact causal softmax per row, then out = P · V.
static void attention_block(float* out, const float* q, const float* k, const float* v, int64_t seq_begin,
                            int64_t q0, int64_t nq, int64_t h, int64_t kvh, const AttentionShape& s, float scale,
                            std::vector<float>& scores) {
  const int64_t D = s.head_dim;
  const int64_t nk = q0 + nq;  // keys the last query of the block can see
  scores.assign(static_cast<size_t>(nq * nk), 0.0f);
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t tq = seq_begin + q0 + i;
    const float* qi = q + (tq * s.q_heads + h) * D;
    float* row = scores.data() + i * nk;
    const int64_t visible = q0 + i + 1;
    float max_score = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < visible; ++j) {
      const float* kj = k + ((seq_begin + j) * s.kv_heads + kvh) * D;
      float dot = 0.0f;
      for (int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
      row[j] = dot * scale;
      max_score = std::max(max_score, row[j]);
    }
    double denom = 0.0;
    for (int64_t j = 0; j < visible; ++j) {
      row[j] = std::exp(row[j] - max_score);
      denom += row[j];
    }
    const float inv = static_cast<float>(1.0 / denom);
    float* oi = out + (tq * s.q_heads + h) * D;
    std::fill(oi, oi + D, 0.0f);
    for (int64_t j = 0; j < visible; ++j) {
      const float p = row[j] * inv;
      const float* vj = v + ((seq_begin + j) * s.kv_heads + kvh) * D;
      for (int64_t d = 0; d < D; ++d) oi[d] += p * vj[d];
    }
  }
}

void attention_forward(float* out, const float* q, const float* k, const float* v, const int64_t* cu_seqlens,
                       int64_t n_seqs, const AttentionShape& s, float scale, int64_t query_block) {
  HLM_CHECK(s.kv_heads > 0 && s.q_heads % s.kv_heads == 0, "q heads ", s.q_heads, " not a multiple of kv heads ",
            s.kv_heads);
  HLM_CHECK(query_block > 0, "query_block must be positive");
  HLM_CHECK(cu_seqlens[0] == 0 && cu_seqlens[n_seqs] == s.total_tokens, "cu_seqlens must span [0, T]");
  const int64_t group = s.q_heads / s.kv_heads;
  // Work items: (sequence, head, query block), flattened so OpenMP balances uneven sequence lengths.
  struct Item {
    int64_t seq, h, q0, nq;
  };
  std::vector<Item> items;
  for (int64_t seq = 0; seq < n_seqs; ++seq) {
    const int64_t len = cu_seqlens[seq + 1] - cu_seqlens[seq];
    HLM_CHECK(len >= 0, "cu_seqlens must be non-decreasing");
    for (int64_t h = 0; h < s.q_heads; ++h)
      for (int64_t q0 = 0; q0 < len; q0 += query_block) items.push_back({seq, h, q0, std::min(query_block, len - q0)});
  }
#pragma omp parallel
  {
    std::vector<float> scores;
#pragma omp for schedule(dynamic)
    for (size_t i = 0; i < items.size(); ++i) {
      const Item& it = items[i];
      attention_block(out, q, k, v, cu_seqlens[it.seq], it.q0, it.nq, it.h, it.h / group, s, scale, scores);
    }
  }
}

}  // namespace hlm
