// Reference LM-head losses that materialise all [N, V] logits (contract in lm_head_loss.h), with plain loops and
// double arithmetic throughout (logits, log-softmax, gradients), rounded to T only on output. They are the
// specification the chunked versions are tested against; memory O(N · V), so tests only.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "train/lm_head_loss.h"

namespace hlm {

namespace {

// log_softmax(scale · h · Wᵀ) of every row, [N, V] in double.
template <typename T>
std::vector<double> full_log_probs(const T* hidden, int64_t N, const LmHead<T>& head, double scale) {
  const int64_t V = head.vocab, H = head.hidden;
  std::vector<double> out(static_cast<size_t>(N * V));
  for (int64_t t = 0; t < N; ++t) {
    double* row = out.data() + t * V;
    for (int64_t v = 0; v < V; ++v) {
      double dot = 0.0;
      for (int64_t k = 0; k < H; ++k)
        dot += static_cast<double>(hidden[t * H + k]) * static_cast<double>(head.weight[v * H + k]);
      row[v] = scale * dot;
    }
    const double m = *std::max_element(row, row + V);
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - m);
    const double lse = m + std::log(sum);
    for (int64_t v = 0; v < V; ++v) row[v] -= lse;
  }
  return out;
}

// dh = dz · W (overwrite), dW += dzᵀ · h, with dz [N, V] the gradient w.r.t. the raw logits h · Wᵀ.
template <typename T>
void full_backward(const LmHeadGrad<T>& grad, const std::vector<double>& dz, const T* hidden, int64_t N,
                   const LmHead<T>& head) {
  const int64_t V = head.vocab, H = head.hidden;
  for (int64_t t = 0; t < N; ++t)
    for (int64_t k = 0; k < H; ++k) {
      double acc = 0.0;
      for (int64_t v = 0; v < V; ++v) acc += dz[t * V + v] * static_cast<double>(head.weight[v * H + k]);
      grad.d_hidden[t * H + k] = static_cast<T>(acc);
    }
  for (int64_t v = 0; v < V; ++v)
    for (int64_t k = 0; k < H; ++k) {
      double acc = 0.0;
      for (int64_t t = 0; t < N; ++t) acc += dz[t * V + v] * static_cast<double>(hidden[t * H + k]);
      grad.d_weight[v * H + k] = static_cast<T>(static_cast<double>(grad.d_weight[v * H + k]) + acc);
    }
}

}  // namespace

template <typename T>
TokenLossResult lm_head_cross_entropy_full(T* ce, const T* hidden, int64_t N, const LmHead<T>& head,
                                           const int32_t* targets, const T* token_weight, const LmHeadGrad<T>* grad) {
  const int64_t V = head.vocab;
  const double scale = 1.0 / head.divisor;
  TokenLossResult result;
  for (int64_t t = 0; t < N; ++t) {
    HLM_CHECK_INPUT(targets[t] < V, "target outside the vocabulary");
    if (targets[t] >= 0) ++result.count;
  }
  const auto log_p = full_log_probs(hidden, N, head, scale);
  std::vector<double> dz(static_cast<size_t>(N * V), 0.0);
  double sum = 0.0;
  for (int64_t t = 0; t < N; ++t) {
    if (targets[t] < 0) {
      ce[t] = T(0);
      continue;
    }
    const double w = token_weight != nullptr ? static_cast<double>(token_weight[t]) : 1.0 / result.count;
    const double value = -log_p[t * V + targets[t]];
    ce[t] = static_cast<T>(value);
    sum += value;
    result.loss += w * value;
    for (int64_t v = 0; v < V; ++v)
      dz[t * V + v] = w * scale * (std::exp(log_p[t * V + v]) - (v == targets[t] ? 1.0 : 0.0));
  }
  result.mean = result.count > 0 ? sum / result.count : 0.0;
  if (grad != nullptr) full_backward(*grad, dz, hidden, N, head);
  return result;
}

template <typename T>
TokenLossResult lm_head_forward_kl_full(T* kl, const T* hidden_teacher, const LmHead<T>& teacher,
                                        const T* hidden_student, const LmHead<T>& student, int64_t N, double tau,
                                        const T* token_weight, const LmHeadGrad<T>* grad) {
  HLM_CHECK_INPUT(teacher.vocab == student.vocab, "teacher and student vocabularies differ");
  const int64_t V = student.vocab;
  const double scale_S = 1.0 / (student.divisor * tau);
  const auto log_p_T = full_log_probs(hidden_teacher, N, teacher, 1.0 / (teacher.divisor * tau));
  const auto log_p_S = full_log_probs(hidden_student, N, student, scale_S);
  std::vector<double> dz(static_cast<size_t>(N * V), 0.0);
  TokenLossResult result;
  result.count = N;
  double sum = 0.0;
  for (int64_t t = 0; t < N; ++t) {
    const double w = token_weight != nullptr ? static_cast<double>(token_weight[t]) : 1.0 / N;
    double value = 0.0;
    for (int64_t v = 0; v < V; ++v) {
      const double p_T = std::exp(log_p_T[t * V + v]), p_S = std::exp(log_p_S[t * V + v]);
      value += p_T * (log_p_T[t * V + v] - log_p_S[t * V + v]);
      dz[t * V + v] = w * tau * tau * scale_S * (p_S - p_T);
    }
    kl[t] = static_cast<T>(value);
    sum += value;
    result.loss += tau * tau * w * value;
  }
  result.mean = N > 0 ? sum / N : 0.0;
  if (grad != nullptr) full_backward(*grad, dz, hidden_student, N, student);
  return result;
}

template TokenLossResult lm_head_cross_entropy_full<float>(float*, const float*, int64_t, const LmHead<float>&,
                                                           const int32_t*, const float*, const LmHeadGrad<float>*);
template TokenLossResult lm_head_cross_entropy_full<double>(double*, const double*, int64_t, const LmHead<double>&,
                                                            const int32_t*, const double*,
                                                            const LmHeadGrad<double>*);
template TokenLossResult lm_head_forward_kl_full<float>(float*, const float*, const LmHead<float>&, const float*,
                                                        const LmHead<float>&, int64_t, double, const float*,
                                                        const LmHeadGrad<float>*);
template TokenLossResult lm_head_forward_kl_full<double>(double*, const double*, const LmHead<double>&,
                                                         const double*, const LmHead<double>&, int64_t, double,
                                                         const double*, const LmHeadGrad<double>*);

}  // namespace hlm
