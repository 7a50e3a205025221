// Chunked cross-entropy fused with the LM head (contract in lm_head_loss.h). Per block of rows: pass 1 runs the
// online log-sum-exp over vocabulary chunks and picks up each row's target logit; pass 2 (only with gradients)
// recomputes each chunk's logits, turns them into dz = w · (softmax − onehot) / divisor in place, and accumulates
// dh and dW with two gemms. Scratch: one [row_block, vocab_chunk] tile plus O(row_block) row statistics.
#include <algorithm>
#include <vector>

#include "train/lm_head_chunks.h"
#include "train/lm_head_loss.h"

namespace hlm {

using namespace lm_head_detail;

template <typename T>
TokenLossResult lm_head_cross_entropy(T* ce, const T* hidden, int64_t N, const LmHead<T>& head,
                                      const int32_t* targets, const T* token_weight, const LmHeadGrad<T>* grad,
                                      const LmHeadChunking& chunking) {
  check_head(head, "LM");
  check_chunking(chunking);
  check_grad(grad);
  HLM_CHECK_INPUT(N >= 0, "negative token count ", N);
  const int64_t V = head.vocab, H = head.hidden;
  TokenLossResult result;
  if (grad != nullptr) std::fill(grad->d_hidden, grad->d_hidden + N * H, T(0));
  if (N == 0) return result;
  HLM_CHECK_INPUT(hidden != nullptr && targets != nullptr && ce != nullptr, "null input or output pointer");

  for (int64_t t = 0; t < N; ++t) {
    HLM_CHECK_INPUT(targets[t] < V, "target ", targets[t], " at token ", t, " is outside the vocabulary (V=", V, ")");
    if (targets[t] >= 0) ++result.count;
  }
  const double default_weight = result.count > 0 ? 1.0 / static_cast<double>(result.count) : 0.0;
  const auto weight_of = [&](int64_t t) {
    if (targets[t] < 0) return 0.0;  // ignored tokens never contribute
    return token_weight != nullptr ? static_cast<double>(token_weight[t]) : default_weight;
  };
  const double scale = 1.0 / head.divisor;

  const int64_t Rb = std::min(chunking.row_block, N), Cb = std::min(chunking.vocab_chunk, V);
  std::vector<T> tile(static_cast<size_t>(Rb * Cb));  // logits, then dz, of one (row block, vocab chunk)
  std::vector<OnlineLse> lse_acc(static_cast<size_t>(Rb));
  std::vector<double> lse(static_cast<size_t>(Rb)), target_logit(static_cast<size_t>(Rb));
  double ce_sum = 0.0;

  for (int64_t r0 = 0; r0 < N; r0 += Rb) {
    const int64_t R = std::min(Rb, N - r0);
    std::fill(lse_acc.begin(), lse_acc.end(), OnlineLse{});
    std::fill(target_logit.begin(), target_logit.end(), 0.0);

    // Pass 1: log-sum-exp and target logit of each row.
    for (int64_t c0 = 0; c0 < V; c0 += Cb) {
      const int64_t C = std::min(Cb, V - c0);
      logits_tile(tile.data(), hidden, head, r0, R, c0, C, scale);  // [R, C]
#pragma omp parallel for if (R * C > 32768)
      for (int64_t r = 0; r < R; ++r) {
        const T* row = tile.data() + r * C;
        lse_acc[r].add(row, C);
        const int64_t target = targets[r0 + r];
        if (target >= c0 && target < c0 + C) target_logit[r] = static_cast<double>(row[target - c0]);
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      const int64_t t = r0 + r;
      lse[r] = lse_acc[r].value();
      const double value = targets[t] >= 0 ? lse[r] - target_logit[r] : 0.0;
      ce[t] = static_cast<T>(value);
      ce_sum += value;
      result.loss += weight_of(t) * value;
    }
    if (grad == nullptr) continue;

    // Pass 2: dz = w · (softmax − onehot) · scale, chunk by chunk, into dh (+=) and dW (+=).
    for (int64_t c0 = 0; c0 < V; c0 += Cb) {
      const int64_t C = std::min(Cb, V - c0);
      logits_tile(tile.data(), hidden, head, r0, R, c0, C, scale);
#pragma omp parallel for if (R * C > 32768)
      for (int64_t r = 0; r < R; ++r) {
        T* row = tile.data() + r * C;
        const double w = weight_of(r0 + r) * scale;
        if (w == 0.0) {
          std::fill(row, row + C, T(0));
          continue;
        }
        const int64_t target = targets[r0 + r];
        for (int64_t v = 0; v < C; ++v) {
          const double p = std::exp(static_cast<double>(row[v]) - lse[r]);
          row[v] = static_cast<T>(w * (p - (c0 + v == target ? 1.0 : 0.0)));
        }
      }
      accumulate_tile_grad(*grad, tile.data(), hidden, head, r0, R, c0, C);
    }
  }
  result.mean = result.count > 0 ? ce_sum / static_cast<double>(result.count) : 0.0;
  return result;
}

template TokenLossResult lm_head_cross_entropy<float>(float*, const float*, int64_t, const LmHead<float>&,
                                                      const int32_t*, const float*, const LmHeadGrad<float>*,
                                                      const LmHeadChunking&);
template TokenLossResult lm_head_cross_entropy<double>(double*, const double*, int64_t, const LmHead<double>&,
                                                       const int32_t*, const double*, const LmHeadGrad<double>*,
                                                       const LmHeadChunking&);

}  // namespace hlm
