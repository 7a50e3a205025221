// Chunked forward KL D_KL(p_T ‖ p_S) fused with both LM heads (contract in lm_head_loss.h). Per block of rows:
// pass 1 computes the teacher's and the student's log-sum-exp of z/τ online over vocabulary chunks; pass 2
// recomputes both chunks' logits, accumulates KL_t = Σ_v p_T (log p_T − log p_S) in double, and (with gradients)
// turns the student tile into dz = w · τ² · (p_S − p_T) / (τ · divisor_S) in place for the dh/dW gemms.
// Scratch: two [row_block, vocab_chunk] tiles plus O(row_block) row statistics. The teacher gets no gradient.
#include <algorithm>
#include <vector>

#include "train/lm_head_chunks.h"
#include "train/lm_head_loss.h"

namespace hlm {

using namespace lm_head_detail;

template <typename T>
TokenLossResult lm_head_forward_kl(T* kl, const T* hidden_teacher, const LmHead<T>& teacher, const T* hidden_student,
                                   const LmHead<T>& student, int64_t N, double tau, const T* token_weight,
                                   const LmHeadGrad<T>* grad, const LmHeadChunking& chunking) {
  check_head(teacher, "teacher");
  check_head(student, "student");
  check_chunking(chunking);
  check_grad(grad);
  HLM_CHECK_INPUT(teacher.vocab == student.vocab, "teacher and student vocabularies differ: ", teacher.vocab, " vs ",
                  student.vocab);
  HLM_CHECK_INPUT(std::isfinite(tau) && tau > 0.0, "temperature must be finite and positive, got ", tau);
  HLM_CHECK_INPUT(N >= 0, "negative token count ", N);
  const int64_t V = student.vocab, H_S = student.hidden;
  TokenLossResult result;
  result.count = N;
  if (grad != nullptr) std::fill(grad->d_hidden, grad->d_hidden + N * H_S, T(0));
  if (N == 0) return result;
  HLM_CHECK_INPUT(hidden_teacher != nullptr && hidden_student != nullptr && kl != nullptr,
                  "null input or output pointer");

  const double default_weight = 1.0 / static_cast<double>(N);
  const auto weight_of = [&](int64_t t) {
    return token_weight != nullptr ? static_cast<double>(token_weight[t]) : default_weight;
  };
  const double scale_T = 1.0 / (teacher.divisor * tau), scale_S = 1.0 / (student.divisor * tau);
  // d(τ² · KL)/d(z_S/τ) = τ² (p_S − p_T); the chain rule through z_S/τ = (h_S · W_Sᵀ) · scale_S adds scale_S.
  const double grad_scale = tau * tau * scale_S;

  const int64_t Rb = std::min(chunking.row_block, N), Cb = std::min(chunking.vocab_chunk, V);
  std::vector<T> tile_T(static_cast<size_t>(Rb * Cb)), tile_S(static_cast<size_t>(Rb * Cb));
  std::vector<OnlineLse> acc_T(static_cast<size_t>(Rb)), acc_S(static_cast<size_t>(Rb));
  std::vector<double> lse_T(static_cast<size_t>(Rb)), lse_S(static_cast<size_t>(Rb)), kl_acc(static_cast<size_t>(Rb));
  double kl_sum = 0.0;

  for (int64_t r0 = 0; r0 < N; r0 += Rb) {
    const int64_t R = std::min(Rb, N - r0);
    std::fill(acc_T.begin(), acc_T.end(), OnlineLse{});
    std::fill(acc_S.begin(), acc_S.end(), OnlineLse{});

    // Pass 1: log-sum-exp of z/τ for teacher and student.
    for (int64_t c0 = 0; c0 < V; c0 += Cb) {
      const int64_t C = std::min(Cb, V - c0);
      logits_tile(tile_T.data(), hidden_teacher, teacher, r0, R, c0, C, scale_T);  // [R, C]
      logits_tile(tile_S.data(), hidden_student, student, r0, R, c0, C, scale_S);  // [R, C]
#pragma omp parallel for if (R * C > 32768)
      for (int64_t r = 0; r < R; ++r) {
        acc_T[r].add(tile_T.data() + r * C, C);
        acc_S[r].add(tile_S.data() + r * C, C);
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      lse_T[r] = acc_T[r].value();
      lse_S[r] = acc_S[r].value();
      kl_acc[r] = 0.0;
    }

    // Pass 2: KL terms and, with gradients, dz for the student.
    for (int64_t c0 = 0; c0 < V; c0 += Cb) {
      const int64_t C = std::min(Cb, V - c0);
      logits_tile(tile_T.data(), hidden_teacher, teacher, r0, R, c0, C, scale_T);
      logits_tile(tile_S.data(), hidden_student, student, r0, R, c0, C, scale_S);
#pragma omp parallel for if (R * C > 32768)
      for (int64_t r = 0; r < R; ++r) {
        const T* row_T = tile_T.data() + r * C;
        T* row_S = tile_S.data() + r * C;
        const double w = grad != nullptr ? weight_of(r0 + r) * grad_scale : 0.0;
        double sum = 0.0;
        for (int64_t v = 0; v < C; ++v) {
          const double log_p_T = static_cast<double>(row_T[v]) - lse_T[r];
          const double log_p_S = static_cast<double>(row_S[v]) - lse_S[r];
          const double p_T = std::exp(log_p_T);
          sum += p_T * (log_p_T - log_p_S);
          if (grad != nullptr) row_S[v] = static_cast<T>(w * (std::exp(log_p_S) - p_T));
        }
        kl_acc[r] += sum;
      }
      if (grad != nullptr) accumulate_tile_grad(*grad, tile_S.data(), hidden_student, student, r0, R, c0, C);
    }
    for (int64_t r = 0; r < R; ++r) {
      kl[r0 + r] = static_cast<T>(kl_acc[r]);
      kl_sum += kl_acc[r];
      result.loss += tau * tau * weight_of(r0 + r) * kl_acc[r];
    }
  }
  result.mean = kl_sum / static_cast<double>(N);
  return result;
}

template TokenLossResult lm_head_forward_kl<float>(float*, const float*, const LmHead<float>&, const float*,
                                                   const LmHead<float>&, int64_t, double, const float*,
                                                   const LmHeadGrad<float>*, const LmHeadChunking&);
template TokenLossResult lm_head_forward_kl<double>(double*, const double*, const LmHead<double>&, const double*,
                                                    const LmHead<double>&, int64_t, double, const double*,
                                                    const LmHeadGrad<double>*, const LmHeadChunking&);

}  // namespace hlm
