// Internal helpers shared by the chunked LM-head losses (lm_head_cross_entropy.cpp, lm_head_forward_kl.cpp):
// a row-major BLAS gemm for float/double, the logits tile of one (row block, vocab chunk), an online log-sum-exp
// accumulator, and argument checks. Not part of the public API (see lm_head_loss.h).
#pragma once
#include <cblas.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/error.h"
#include "train/lm_head_loss.h"

namespace hlm::lm_head_detail {

// C[M, N] = alpha · op(A) · op(B) + beta · C, row-major; op = transpose when the flag is set.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, i(M), i(N), i(K), alpha, A, i(lda), B, i(ldb), beta, C, i(ldc));
  } else {
    static_assert(std::is_same_v<T, double>, "lm-head losses are instantiated for float and double");
    cblas_dgemm(CblasRowMajor, ta, tb, i(M), i(N), i(K), alpha, A, i(lda), B, i(ldb), beta, C, i(ldc));
  }
}

// tile[R, C] = scale · hidden[r0 : r0+R, :] · W[c0 : c0+C, :]ᵀ   (tile row stride C)
template <typename T>
void logits_tile(T* tile, const T* hidden, const LmHead<T>& head, int64_t r0, int64_t R, int64_t c0, int64_t C,
                 double scale) {
  const int64_t H = head.hidden;
  gemm<T>(false, true, R, C, H, static_cast<T>(scale), hidden + r0 * H, H, head.weight + c0 * H, H, T(0), tile, C);
}

// Accumulates the gradients of one tile: dh[r0 : r0+R] += dz · W_chunk and dW_chunk += dzᵀ · h[r0 : r0+R].
template <typename T>
void accumulate_tile_grad(const LmHeadGrad<T>& grad, const T* dz, const T* hidden, const LmHead<T>& head, int64_t r0,
                          int64_t R, int64_t c0, int64_t C) {
  const int64_t H = head.hidden;
  gemm<T>(false, false, R, H, C, T(1), dz, C, head.weight + c0 * H, H, T(1), grad.d_hidden + r0 * H, H);
  gemm<T>(true, false, C, H, R, T(1), dz, C, hidden + r0 * H, H, T(1), grad.d_weight + c0 * H, H);
}

// Running log Σ exp over the chunks of one row: max m and Σ exp(x − m) in double, rescaled when m grows.
// NaN anywhere makes the result NaN; a +inf logit makes it NaN too (inf − inf), which callers treat as non-finite.
struct OnlineLse {
  double max = -std::numeric_limits<double>::infinity();
  double sum = 0.0;

  template <typename T>
  void add(const T* x, int64_t n) {
    double chunk_max = -std::numeric_limits<double>::infinity();
    bool has_nan = false;
    for (int64_t v = 0; v < n; ++v) {
      const double xv = static_cast<double>(x[v]);
      if (std::isnan(xv)) has_nan = true;
      if (xv > chunk_max) chunk_max = xv;
    }
    if (has_nan) {
      sum = std::numeric_limits<double>::quiet_NaN();
      return;
    }
    if (chunk_max == -std::numeric_limits<double>::infinity()) return;  // every term is exp(-inf) = 0
    if (chunk_max > max) {
      sum *= std::exp(max - chunk_max);  // exp(-inf) = 0 on the first chunk
      max = chunk_max;
    }
    for (int64_t v = 0; v < n; ++v) sum += std::exp(static_cast<double>(x[v]) - max);
  }
  double value() const { return max + std::log(sum); }
};

inline void check_chunking(const LmHeadChunking& c) {
  HLM_CHECK_INPUT(c.vocab_chunk > 0 && c.vocab_chunk <= INT_MAX, "vocab_chunk must be in [1, INT_MAX], got ",
                  c.vocab_chunk);
  HLM_CHECK_INPUT(c.row_block > 0 && c.row_block <= INT_MAX, "row_block must be in [1, INT_MAX], got ", c.row_block);
}

template <typename T>
void check_head(const LmHead<T>& head, const char* what) {
  HLM_CHECK_INPUT(head.vocab > 0 && head.hidden > 0, what, " head needs V > 0 and H > 0, got V=", head.vocab,
                  " H=", head.hidden);
  HLM_CHECK_INPUT(head.vocab <= INT_MAX && head.hidden <= INT_MAX, what, " head dimensions exceed BLAS int range");
  HLM_CHECK_INPUT(head.weight != nullptr, what, " head weight is null");
  HLM_CHECK_INPUT(std::isfinite(head.divisor) && head.divisor != 0.0, what, " logits divisor must be finite and "
                  "non-zero, got ", head.divisor);
}

template <typename T>
void check_grad(const LmHeadGrad<T>* grad) {
  if (grad != nullptr)
    HLM_CHECK_INPUT(grad->d_hidden != nullptr && grad->d_weight != nullptr, "gradient outputs must both be set");
}

}  // namespace hlm::lm_head_detail
