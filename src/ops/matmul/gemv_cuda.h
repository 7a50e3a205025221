// Small-row linear products on CUDA (decode steps): y[M, N] fp32 = bf16(x)[M, K] · w[N, K]ᵀ (+ bias[N]) for
// 1 ≤ M ≤ gemv_max_rows(), the contract of matmul_forward_mixed_cuda (matmul_cuda.h, reference matmul.h) with x given
// in fp32 (rounded to bf16 in the kernel by core/dtype.h's formula, bit-identical to cast_f32_to_bf16_cuda) or bf16.
// Several weights that read the same x (q/k/v, gate/up, a GDN layer's six input projections) run in ONE launch: a
// group of up to gemv_max_outputs() outputs, each [M, n_i] contiguous.
//
// Why: at batch 1 cuBLASLt's GEMV-shaped kernels reached 0.7–1.8 TB/s on the 5–21 MB projections of a Qwen3-4B layer
// (H200, session 11 trace), each projection a launch of its own plus a cast and sometimes a split-K reduction. This
// kernel streams each weight row once with 16-byte loads (one warp per output column; each lane keeps two rounds of
// four loads in flight, across column boundaries; a grid of the blocks that fit at once), x staged in shared memory
// as bf16.
// Numerics: fp32 products of bf16 values (exact) summed in fp32; lane l sums the 8-element chunks l, l + 32, ... in
// order, then a 5-level xor-shuffle tree; the bias is added last. A different summation order than cuBLASLt's, so
// results agree with it to fp32 rounding (the tests' tolerance), not bit for bit. Deterministic run to run.
// Requirements (gemv_supported): K a multiple of 8, K ≤ gemv_max_k(), every weight pointer 16-byte aligned.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hlm {

constexpr int gemv_max_rows() { return 4; }
constexpr int gemv_max_outputs() { return 6; }
constexpr int64_t gemv_max_k() { return 16384; }  // x staged as bf16: M·K·2 bytes of shared memory ≤ 128 KiB

struct GemvOutput {
  const __nv_bfloat16* w = nullptr;  // [n, K] row-major (HF layout), 16-byte aligned
  const float* bias = nullptr;       // [n] or nullptr
  float* y = nullptr;                // [M, n], overwritten
  int64_t n = 0;
};

// Whether gemv_bf16_cuda takes this shape (M rows of K inputs) and these weights.
bool gemv_supported(int64_t M, int64_t K, const GemvOutput* outs, int n_outs);

// The input's row RMSNorm computed in the GEMV's prologue instead of a launch of its own (batch-1 decode: the norm's
// one-block launch and its dependent-launch hop before the GEMV go away, while the GEMV's first weight loads are in
// flight). Every block normalizes the whole rows it needs from h (and branch) in L2; the rows' outputs are written
// to memory too, each element by one block, for the readers after the GEMV. Two forms, each bit-identical to its
// separate launch (rmsnorm_cuda.h's block path: thread t of 256 sums the elements t, t + 256, ... in order with FMA,
// then cuda::block_sum; r = 1 / sqrt(Σ / K + eps); y = weight · (v · r)):
//   kPre  (a pre-norm block's input norm, rmsnorm_forward_rounded_cuda / rmsnorm_residual_into_forward_rounded_cuda):
//         v = h + scale · branch (residual_add_value's bits) when branch is given, else h; x = y.
//         Writes norm_out = y [M, K], norm_out16 = bf16(y) when given, h_out = v when branch is given.
//   kPost (a post-norm block's branch norm and residual add, rmsnorm_post_residual_forward_cuda on a copy of h):
//         v = branch; x = h_out = h + scale · y. Writes norm_out = y and h_out.
// The GEMV's input is bf16(x) (the rounding stage_x gives an fp32 x). h_out may not alias h or branch (every block
// reads all of them while some write h_out); norm_out and norm_out16 may alias nothing read here.
struct GemvNorm {
  enum Kind : int { kPre = 0, kPost = 1 };
  Kind kind = kPre;
  const float* h = nullptr;       // [M, K]
  const float* branch = nullptr;  // [M, K]; kPre: nullable; kPost: required
  float scale = 1.0f;             // the residual multiplier
  const float* weight = nullptr;  // [K]
  float eps = 1e-6f;
  float* h_out = nullptr;         // [M, K]; kPre: required with branch, else unused; kPost: required
  float* norm_out = nullptr;      // [M, K], required
  __nv_bfloat16* norm_out16 = nullptr;  // [M, K], kPre only, nullable
};

// The launches the prologue replaces (the same outputs, for a reader that is not this GEMV, and the tests' reference):
// kPre rmsnorm_forward_rounded_cuda, or with a branch rmsnorm_residual_into_forward_rounded_cuda; kPost a copy of h
// into h_out and rmsnorm_post_residual_forward_cuda there (rmsnorm_cuda.h). Queued on `stream`.
void gemv_norm_launches_cuda(const GemvNorm& norm, int64_t M, int64_t K, cudaStream_t stream);

// Whether the prologue takes this norm at M rows of K: the GEMV's own limits, K longer than a warp row of the norm
// (rmsnorm_cuda_warp_max_dim(): shorter rows sum in the warp path's order), the pointers the form needs and h_out
// aliasing neither h nor branch.
bool gemv_norm_supported(int64_t M, int64_t K, const GemvNorm& norm);

// y_i = bf16(x) · w_iᵀ (+ bias_i) for each of the n_outs outputs; x is x_f32 [M, K] (rounded here) when x_bf16 is
// nullptr, else x_bf16 [M, K]; with `norm`, x is the norm's (both x pointers ignored). Queued on `stream`. Checks
// gemv_supported (and gemv_norm_supported; internal error otherwise).
void gemv_bf16_cuda(const GemvOutput* outs, int n_outs, const float* x_f32, const __nv_bfloat16* x_bf16, int64_t M,
                    int64_t K, cudaStream_t stream, const GemvNorm* norm = nullptr);

// The MLP's gate and up products with SwiGLU in the epilogue (decode steps): h [M, n] = silu(y_gate) ⊙ y_up, where
// y_gate and y_up are what gemv_bf16_cuda writes for the group {gate, up} (n columns each, biases optional), in ONE
// launch: each warp computes a gate column and then the same up column and stores their SwiGLU, as fp32 (h_f32) or
// its bf16 rounding (h_bf16; exactly one of the two non-null). Bit-identical to gemv_bf16_cuda followed by
// swiglu_forward_cuda / swiglu_forward_bf16_cuda (swiglu_cuda.h), without the launch between them and the fp32
// gate/up round trip through memory; gate.y and up.y are ignored. Requirements (gemv_swiglu_supported): those of
// gemv_supported, and equal n.
bool gemv_swiglu_supported(int64_t M, int64_t K, const GemvOutput& gate, const GemvOutput& up);
void gemv_bf16_swiglu_cuda(const GemvOutput& gate, const GemvOutput& up, float* h_f32, __nv_bfloat16* h_bf16,
                           const float* x_f32, const __nv_bfloat16* x_bf16, int64_t M, int64_t K, cudaStream_t stream,
                           const GemvNorm* norm = nullptr);

}  // namespace hlm
