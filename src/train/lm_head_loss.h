// Token losses fused with the LM head: cross-entropy against targets and forward KL to a frozen teacher, computed
// over vocabulary chunks so that the [N, V] logits are never held. Only a [row_block, vocab_chunk] tile of logits
// (two tiles for the KL: teacher and student) exists at any time; extra memory is O(row_block · vocab_chunk).
//
// Symbols: N tokens, H hidden width (H_T teacher, H_S student), V vocabulary.
//   hidden h [N, H]   output of the final norm, row-major
//   head W  [V, H]    LM head weight in the HF layout (lm_head.weight)
//   logits  z = h · Wᵀ / divisor           (divisor = Granite logits_scaling; 1 otherwise)
//
// Cross-entropy: CE_t = logsumexp(z_t) − z_t[target_t] (nats). A negative target (e.g. -100) is ignored: CE_t = 0,
//   no gradient. Loss = Σ_t w_t · CE_t; the default weights are 1/count on counted tokens (the mean).
// Forward KL (Algorithm 1 of the seed, line 24): p = softmax(z / τ) for teacher and student,
//   KL_t = Σ_v p_T (log p_T − log p_S) ≥ 0 (nats, at temperature τ, NOT multiplied by τ²; not clamped, so nearly
//   identical models may give values a few ulps below 0);
//   Loss = τ² · Σ_t w_t · KL_t (the τ² keeps gradient magnitudes independent of τ, Hinton et al. 2015); default
//   weights 1/N, so with τ = 1 the loss is the mean per-token KL. Gradients for the student only (teacher frozen).
//
// Algorithm (per block of rows): pass 1 computes each row's log-sum-exp online over vocabulary chunks (running max,
// running Σ exp rescaled in double when the max grows; cross-entropy also picks up the target logit here). Pass 2
// recomputes each chunk's logits (cheaper than storing them) and forms the KL terms and/or the logit gradient
// dz = w·(p − onehot) (CE) or w·τ·(p_S − p_T) (KL), divided by the divisor, then accumulates
// dh += dz · W_chunk and dW_chunk += dzᵀ · h with BLAS. Cross-entropy without gradients needs only pass 1.
//
// Gradients: d_hidden [N, H] is OVERWRITTEN (an activation gradient); d_weight [V, H] is ACCUMULATED (+=, a parameter
// gradient, so micro-batches add up). Pass grad = nullptr for forward only.
// Types: float (the engine's path, BLAS sgemm) and double (for finite-difference checks, dgemm).
// Non-goals: label smoothing, z-loss, soft-capping, reverse KL; a CUDA path (later, with the same contract).
#pragma once
#include <cstdint>

namespace hlm {

struct LmHeadChunking {
  int64_t vocab_chunk = 4096;  // logits columns materialised at once
  int64_t row_block = 1024;    // logits rows materialised at once
};

template <typename T>
struct LmHead {
  const T* weight = nullptr;  // [V, H]
  int64_t vocab = 0;          // V
  int64_t hidden = 0;         // H
  double divisor = 1.0;       // logits = h · Wᵀ / divisor
};

template <typename T>
struct LmHeadGrad {
  T* d_hidden = nullptr;  // [N, H], overwritten
  T* d_weight = nullptr;  // [V, H], accumulated (+=)
};

struct TokenLossResult {
  double loss = 0.0;    // Σ_t w_t · value_t (KL: times τ²): the quantity whose gradient is returned
  double mean = 0.0;    // plain mean of the per-token values over counted tokens (0 when none is counted)
  int64_t count = 0;    // counted tokens (CE: targets ≥ 0; KL: N)
};

// Chunked cross-entropy. ce [N] receives CE_t (0 for ignored tokens). targets [N] int32 in [0, V) or negative
// (ignored). token_weight [N] or nullptr (then 1/count for counted tokens); ignored tokens always weigh 0.
template <typename T>
TokenLossResult lm_head_cross_entropy(T* ce, const T* hidden, int64_t N, const LmHead<T>& head,
                                      const int32_t* targets, const T* token_weight, const LmHeadGrad<T>* grad,
                                      const LmHeadChunking& chunking = {});

// Chunked forward KL D_KL(p_T ‖ p_S) at temperature tau > 0. kl [N] receives KL_t (without τ²). Both heads must share
// V. token_weight [N] or nullptr (then 1/N). grad (student only) or nullptr.
template <typename T>
TokenLossResult lm_head_forward_kl(T* kl, const T* hidden_teacher, const LmHead<T>& teacher, const T* hidden_student,
                                   const LmHead<T>& student, int64_t N, double tau, const T* token_weight,
                                   const LmHeadGrad<T>* grad, const LmHeadChunking& chunking = {});

// References that materialise the full [N, V] logits with plain loops (double accumulation); same contracts as above.
// For tests only: memory O(N · V).
template <typename T>
TokenLossResult lm_head_cross_entropy_full(T* ce, const T* hidden, int64_t N, const LmHead<T>& head,
                                           const int32_t* targets, const T* token_weight, const LmHeadGrad<T>* grad);
template <typename T>
TokenLossResult lm_head_forward_kl_full(T* kl, const T* hidden_teacher, const LmHead<T>& teacher,
                                        const T* hidden_student, const LmHead<T>& student, int64_t N, double tau,
                                        const T* token_weight, const LmHeadGrad<T>* grad);

}  // namespace hlm
