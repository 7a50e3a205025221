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

// y_i = bf16(x) · w_iᵀ (+ bias_i) for each of the n_outs outputs; x is x_f32 [M, K] (rounded here) when x_bf16 is
// nullptr, else x_bf16 [M, K]. Queued on `stream`. Checks gemv_supported (internal error otherwise).
void gemv_bf16_cuda(const GemvOutput* outs, int n_outs, const float* x_f32, const __nv_bfloat16* x_bf16, int64_t M,
                    int64_t K, cudaStream_t stream);

// The MLP's gate and up products with SwiGLU in the epilogue (decode steps): h [M, n] = silu(y_gate) ⊙ y_up, where
// y_gate and y_up are what gemv_bf16_cuda writes for the group {gate, up} (n columns each, biases optional), in ONE
// launch: each warp computes a gate column and then the same up column and stores their SwiGLU, as fp32 (h_f32) or
// its bf16 rounding (h_bf16; exactly one of the two non-null). Bit-identical to gemv_bf16_cuda followed by
// swiglu_forward_cuda / swiglu_forward_bf16_cuda (swiglu_cuda.h), without the launch between them and the fp32
// gate/up round trip through memory; gate.y and up.y are ignored. Requirements (gemv_swiglu_supported): those of
// gemv_supported, and equal n.
bool gemv_swiglu_supported(int64_t M, int64_t K, const GemvOutput& gate, const GemvOutput& up);
void gemv_bf16_swiglu_cuda(const GemvOutput& gate, const GemvOutput& up, float* h_f32, __nv_bfloat16* h_bf16,
                           const float* x_f32, const __nv_bfloat16* x_bf16, int64_t M, int64_t K, cudaStream_t stream);

}  // namespace hlm
