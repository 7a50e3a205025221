// Attention locality: per-query softmax mass on the most recent keys (contract in attention_locality.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ops/attention/attention_locality.h"

namespace hlm {

void attention_recent_mass(double* recent_mass, const float* q, const float* k, const int64_t* cu_seqlens,
                           int64_t n_seqs, const AttentionShape& s, double scale, const int64_t* windows,
                           int64_t n_windows) {
  HLM_CHECK(s.kv_heads > 0 && s.q_heads % s.kv_heads == 0, "q heads ", s.q_heads, " not a multiple of kv heads ",
            s.kv_heads);
  HLM_CHECK(cu_seqlens[0] == 0 && cu_seqlens[n_seqs] == s.total_tokens, "cu_seqlens must span [0, T]");
  for (int64_t w = 0; w < n_windows; ++w) HLM_CHECK(windows[w] >= 1, "locality windows must be at least 1");
  const int64_t D = s.head_dim, group = s.q_heads / s.kv_heads;
  for (int64_t seq = 0; seq < n_seqs; ++seq) {
    const int64_t begin = cu_seqlens[seq], len = cu_seqlens[seq + 1] - begin;
#pragma omp parallel
    {
      std::vector<double> scores(static_cast<size_t>(std::max<int64_t>(len, 1)));
#pragma omp for schedule(dynamic, 8)
      for (int64_t t = 0; t < len; ++t) {
        double* out = recent_mass + (begin + t) * n_windows;
        std::fill(out, out + n_windows, 0.0);
        for (int64_t h = 0; h < s.q_heads; ++h) {
          const float* qt = q + ((begin + t) * s.q_heads + h) * D;
          double max_score = -std::numeric_limits<double>::infinity();
          const int64_t lo = attention_window_begin(t, s.window);  // the layer's own window: keys [lo, t]
          for (int64_t j = lo; j <= t; ++j) {
            const float* kj = k + ((begin + j) * s.kv_heads + h / group) * D;
            double dot = 0.0;
            for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(qt[d]) * kj[d];
            scores[static_cast<size_t>(j)] = dot * scale;
            max_score = std::max(max_score, scores[static_cast<size_t>(j)]);
          }
          double total = 0.0;
          for (int64_t j = lo; j <= t; ++j) {
            double& e = scores[static_cast<size_t>(j)];
            e = std::exp(e - max_score);  // unnormalised probability
            total += e;
          }
          for (int64_t w = 0; w < n_windows; ++w) {
            double recent = 0.0;
            for (int64_t j = std::max<int64_t>(lo, t - windows[w] + 1); j <= t; ++j)
              recent += scores[static_cast<size_t>(j)];
            out[w] += recent / total / static_cast<double>(s.q_heads);
          }
        }
      }
    }
  }
}

}  // namespace hlm
