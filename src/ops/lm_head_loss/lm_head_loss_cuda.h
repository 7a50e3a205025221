// Vocabulary-chunked LM-head losses on CUDA: cross-entropy against targets and forward KL to a frozen teacher, with
// the contract of src/train/lm_head_loss.h (same formulas, weights, ignored targets, τ² scaling, logits divisor,
// d_hidden OVERWRITTEN, d_weight ACCUMULATED), never holding the [N, V] logits: only [row_block, vocab_chunk] tiles
// (two for the KL) live in the caller's workspace. Raw device pointers; everything is queued on lt.stream without
// synchronizing, so the loss comes back in a device-side TokenLossCudaResult.
//
// Symbols: N tokens, H hidden width, V vocabulary. hidden h [N, H], head W [V, H] (HF lm_head.weight), logits
// z = h · Wᵀ / divisor, all row-major f32.
// Algorithm per block of rows (lm_head_loss.cu): pass 1 computes each vocabulary chunk's logits tile with cuBLASLt
// (matmul_forward_cuda) and folds it into a running (max, Σ exp) per row; pass 2 recomputes each tile (cuBLASLt
// results are reproducible on one GPU, so pass 2 sees pass 1's logits), turns it into dz in place and accumulates
// dh += dz · W_chunk and dW_chunk += dzᵀ · h (matmul_backward_cuda). Cross-entropy without gradients needs pass 1 only.
// When one chunk covers the vocabulary (vocab_chunk ≥ V) pass 2 takes pass 1's tiles as they are: the KL's six
// logits-sized products become four, the cross-entropy's three two, for [row_block, V] tiles in the workspace.
// Numerics (differences from the CPU, which uses double for everything after the sgemm):
//   - logits: fp32 cuBLASLt product, then · (1/divisor) as a separate fp32 multiply (the CPU folds it into sgemm's
//     alpha): one more rounding.
//   - pass 1: exp(z − max) in fp32 (expf) summed per thread in fp32 (ceil(vocab_chunk / lm_head_cuda_threads())
//     terms, each ≤ 1), combined across threads, chunks and rescalings in fp64 (running max is an exact float;
//     rescale factor exp(old − new) in fp64). Relative error of Σ exp ≤ (ceil(chunk/threads) + 4)·u.
//   - pass 2: log probabilities, KL terms and dz in fp64 from the f32 logits and the fp64 log-sum-exp, as the CPU;
//     the KL's two exps are expf of the log probability rounded to f32 (relative error ≤ (4 + |log p|)·u; the fp64
//     exps made the pass compute-bound), the cross-entropy's exp stays fp64.
//   - per-token values are kept in fp64 for the loss; loss, mean and the per-row reductions are fixed-order fp64 trees.
//   Deterministic run to run (no atomics; cuBLASLt reproducible on the same GPU model and SM count).
// Bad targets: the CPU throws for a target ≥ V; a kernel cannot, so such a token sets *error_flag = 1 (nullable,
// never cleared), gets CE = NaN (hence a NaN loss and mean), weight 0, and is not counted.
// bf16 compute mode (the model's, layers/cuda/cuda_linear.h): when a head carries weight_bf16 and hidden_bf16 (the
// caller's bf16 roundings of W and h), the logits tiles are bf16 tensor-core products with fp32 results
// (matmul_forward_mixed_cuda) and the gradient products take dz rounded to bf16 (one more rounding per dz element;
// dh and dW stay fp32, accumulated). Everything after the logits is unchanged.
// Non-goals for now: fusing the softmax into the GEMM epilogue, overlapping passes.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_context.h"

namespace hlm {

struct LmHeadCuda {
  const float* weight = nullptr;  // [V, H], device
  int64_t vocab = 0;              // V
  int64_t hidden = 0;             // H
  double divisor = 1.0;           // logits = h · Wᵀ / divisor (Granite logits_scaling)
  // bf16 compute mode: both set (W and this call's hidden states rounded to bf16, same layouts), or both null.
  const __nv_bfloat16* weight_bf16 = nullptr;
  const __nv_bfloat16* hidden_bf16 = nullptr;
};

struct LmHeadGradCuda {
  float* d_hidden = nullptr;  // [N, H], overwritten
  float* d_weight = nullptr;  // [V, H], accumulated (+=)
};

// Defaults: bench_cuda_kernels lmhead on the H200 (2026-11-30; KL + gradient, N 8192, H 1024, V 151,936, bf16):
// 1024 rows × 4096 columns 47.5 ms, 2048 × 4096 41.7, 4096 × 4096 38.4 (160 MiB of workspace), 8192 × 4096 40.8.
struct LmHeadCudaChunking {
  int64_t vocab_chunk = 4096;  // logits columns materialised at once
  int64_t row_block = 4096;    // logits rows materialised at once
};

// Written by the launchers on the device (same meaning as TokenLossResult in train/lm_head_loss.h).
struct TokenLossCudaResult {
  double loss = 0.0;  // Σ_t w_t · value_t (KL: times τ²)
  double mean = 0.0;  // mean of the per-token values over counted tokens (0 when none is counted)
  int64_t count = 0;  // counted tokens (CE: 0 ≤ target < V; KL: N)
};

// An input error unless both parts of c are in [1, INT32_MAX] (every launcher below checks its chunking so).
void lm_head_cuda_check_chunking(const LmHeadCudaChunking& c);

// Threads per logits row in the row kernels; the tests derive their tolerances from it.
constexpr int lm_head_cuda_threads() { return 256; }

// Device scratch for one call (tiles, per-row statistics, per-token weights and values). O(row_block · vocab_chunk
// + N), independent of H.
size_t lm_head_cross_entropy_cuda_workspace_bytes(int64_t N, int64_t V, const LmHeadCudaChunking& chunking = {});
// teacher_ahead: for a call with precomputed teacher logits (no teacher tile; LmHeadTeacherLogitsCuda below).
size_t lm_head_forward_kl_cuda_workspace_bytes(int64_t N, int64_t V, const LmHeadCudaChunking& chunking = {},
                                               bool teacher_ahead = false);

// Chunked cross-entropy: ce [N] receives CE_t (0 for ignored tokens, targets < 0); targets [N] int32;
// token_weight [N] or nullptr (then 1/count on counted tokens); grad or nullptr (forward only). result: one device
// TokenLossCudaResult.
void lm_head_cross_entropy_cuda(const CudaBlasLt& lt, float* ce, TokenLossCudaResult* result, const float* hidden,
                                int64_t N, const LmHeadCuda& head, const int32_t* targets, const float* token_weight,
                                const LmHeadGradCuda* grad, const LmHeadCudaChunking& chunking, void* workspace,
                                size_t workspace_bytes, int* error_flag);

// The teacher's side of the forward KL computed ahead of the call (a frozen teacher's logits do not depend on the
// student: train/cuda/cuda_teacher_ahead.h queues them on a side stream): logits [N, V] (unscaled f32, the tiles the
// KL call itself would compute) and lse [N] (fp64, of the logits · 1/(divisor·τ)). Only with one vocabulary chunk
// (vocab_chunk ≥ V): the tiles are then [row_block, V] blocks of the [N, V] array, made by the same products in the
// same row blocks, so the KL has the same bits as with the teacher's tiles made inside it.
struct LmHeadTeacherLogitsCuda {
  const float* logits = nullptr;  // [N, V]
  const double* lse = nullptr;    // [N]
};
// Whether `chunking` allows precomputed teacher logits for a vocabulary of V (one chunk covers it).
inline bool lm_head_teacher_logits_supported(int64_t V, const LmHeadCudaChunking& chunking) {
  return chunking.vocab_chunk >= V;
}
size_t lm_head_teacher_logits_cuda_workspace_bytes(int64_t N, int64_t V, const LmHeadCudaChunking& chunking);
// Fills logits [N, V] and lse [N] for `teacher` at temperature tau, row block by row block of `chunking` (input
// error unless lm_head_teacher_logits_supported).
void lm_head_teacher_logits_cuda(const CudaBlasLt& lt, float* logits, double* lse, const float* hidden_teacher,
                                 const LmHeadCuda& teacher, int64_t N, double tau, const LmHeadCudaChunking& chunking,
                                 void* workspace, size_t workspace_bytes);

// Chunked forward KL D_KL(p_T ‖ p_S) at temperature tau > 0: kl [N] receives KL_t (without τ²); token_weight [N] or
// nullptr (then 1/N); loss = τ² · Σ_t w_t · KL_t; grad (student only) or nullptr. teacher_ahead: the teacher's logits
// and lse from lm_head_teacher_logits_cuda with the same N, tau and chunking (then hidden_teacher is not read and the
// teacher head only checked), or nullptr.
void lm_head_forward_kl_cuda(const CudaBlasLt& lt, float* kl, TokenLossCudaResult* result,
                             const float* hidden_teacher, const LmHeadCuda& teacher, const float* hidden_student,
                             const LmHeadCuda& student, int64_t N, double tau, const float* token_weight,
                             const LmHeadGradCuda* grad, const LmHeadCudaChunking& chunking, void* workspace,
                             size_t workspace_bytes, const LmHeadTeacherLogitsCuda* teacher_ahead = nullptr);

}  // namespace hlm
