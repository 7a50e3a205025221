// Linear product on CUDA via cuBLASLt: launchers for the contract in matmul.h (HF layout y[M, N] = x[M, K] · w[N, K]ᵀ
// + bias[N]; same overwrite/accumulate semantics and nullptr = not wanted), raw device pointers, queued on
// lt.stream, using lt.workspace (CudaBlasLt from backend/cuda/cuda_context.h).
//
// Types: f32 (CUBLAS_COMPUTE_32F: true fp32 products and sums, never TF32), or bf16 storage with fp32 accumulation
// (x, w, dy, y, dx, bias in bf16; the parameter gradients dw and dbias are fp32 master gradients).
// Row-major operands are passed to column-major cuBLASLt as their transposes (y ᵀ = w · xᵀ); the bias is a
// cuBLASLt epilogue (added in fp32 before the output is rounded).
// dbias is a deterministic two-pass column sum (backend/cuda/column_sum.h) whose partials live in lt.workspace
// (which is why every user of a workspace must stay on its stream). cuBLAS results are reproducible run to run on
// the same GPU model and SM count (cuBLAS documentation), not across models.
// The heuristic's algorithm is cached per (handle, types, ops, shape, leading dims, epilogue, alignments, workspace):
// asked once per distinct key, so repeated calls cost only the descriptor set-up and the launch.
// HLM_MATMUL_AUTOTUNE=on|off (off by default; core/env_switch.h): for a new key (outside graph capture) the
// heuristic's first 8 algorithms are each timed on the call's own operands (3 runs, CUDA events; into the output
// itself when the call overwrites it, else into a zeroed scratch of its shape, cudaMalloc'd and freed, the first
// algorithm kept if that memory cannot be had) and the fastest is cached instead of the first. The winner can vary
// between processes with timing noise, and with it the summation order: results are reproducible across processes
// only with it off, or with HLM_MATMUL_AUTOTUNE_CACHE=FILE (a tuning cache, core/tuning_cache.h): a key's choice is
// taken from the file when an earlier process recorded one for this GPU model, SM count and cuBLASLt version (no
// timing; the first line for a key wins), else timed and appended, so every process that reads the file after the
// key was tuned runs the same algorithm. matmul_cuda_set_autotune overrides the environment process-wide (A/B
// benches; -1 goes back).
// Non-goals for now: cached descriptors, fp8, batched products.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_context.h"

namespace hlm {

bool matmul_cuda_autotune();
void matmul_cuda_set_autotune(int on);
// How many GEMM keys this process has timed among two or more algorithms (tests: the autotune engaged).
size_t matmul_cuda_autotuned_keys();

struct MatmulCudaParams {
  int64_t M = 0, N = 0, K = 0;
};

// y = x · wᵀ (+ bias), or y += x · wᵀ (+ bias) when `accumulate`. bias may be nullptr.
void matmul_forward_cuda(const CudaBlasLt& lt, float* y, const float* x, const float* w, const float* bias,
                         const MatmulCudaParams& p, bool accumulate = false);
void matmul_forward_cuda(const CudaBlasLt& lt, __nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w,
                         const __nv_bfloat16* bias, const MatmulCudaParams& p, bool accumulate = false);

// dx = dy · w (OVERWRITTEN, ADDED when accumulate_dx), dw += dyᵀ · x, dbias += Σ_rows dy (both ACCUMULATED).
void matmul_backward_cuda(const CudaBlasLt& lt, float* dx, float* dw, float* dbias, const float* dy, const float* x,
                          const float* w, const MatmulCudaParams& p, bool accumulate_dx = false);
void matmul_backward_cuda(const CudaBlasLt& lt, __nv_bfloat16* dx, float* dw, float* dbias, const __nv_bfloat16* dy,
                          const __nv_bfloat16* x, const __nv_bfloat16* w, const MatmulCudaParams& p,
                          bool accumulate_dx = false);

// Mixed precision (the model's bf16 compute mode): bf16 operands, fp32 results. y [M, N] fp32 = x · wᵀ (+ fp32 bias)
// with x, w bf16; dx fp32 = dy · w, dw += dyᵀ · x (fp32), dbias += Σ_rows dy, from bf16 dy, x, w. Products of two
// bf16 values are exact in fp32, so the only roundings are the fp32 sums (as the f32 path) and the operands' bf16
// roundings made by the caller.
void matmul_forward_mixed_cuda(const CudaBlasLt& lt, float* y, const __nv_bfloat16* x, const __nv_bfloat16* w,
                               const float* bias, const MatmulCudaParams& p, bool accumulate = false);
void matmul_backward_mixed_cuda(const CudaBlasLt& lt, float* dx, float* dw, float* dbias, const __nv_bfloat16* dy,
                                const __nv_bfloat16* x, const __nv_bfloat16* w, const MatmulCudaParams& p,
                                bool accumulate_dx = false);
// The same with dw held in bf16 (the lean memory plan's linear gradients): the product dyᵀ·x in fp32 (fp32 products
// and sums) into dw_scratch [N, K] (device fp32, overwritten; N·K floats), then dw = bf16_rn(dw + dw_scratch) element
// by element, so each call stores the fp32 sum of the held value and the product rounded to bf16 ONCE (within half a
// bf16 ulp of it, ≤ 2⁻⁸ relative); k accumulating calls are within the sum of k such roundings. cuBLASLt's own bf16
// output with beta = 1 was not one rounding (H200, 2026-12-02: 344 stored for an exact sum of 342 = a bf16 value,
// with split-K off; tests/cuda/cases_adamw_lean.cpp), hence the scratch.
// dw_scratch must not be null (an input error).
void matmul_backward_mixed_cuda(const CudaBlasLt& lt, float* dx, __nv_bfloat16* dw, float* dw_scratch, float* dbias,
                                const __nv_bfloat16* dy, const __nv_bfloat16* x, const __nv_bfloat16* w,
                                const MatmulCudaParams& p, bool accumulate_dx = false);
// The bf16 dw in cuBLASLt's epilogue form instead (C = D = dw in bf16, beta 1, fp32 compute; no scratch, no
// add-and-round kernel: the GEMM reads dw's 2 bytes and writes 2 per element instead of writing the 4-byte fp32
// product that the kernel then reads with dw's 2 and writes 2 more, so 8 bytes per element of memory traffic and a
// launch fewer). Deterministic run to run like every cuBLASLt call, but NOT one rounding (the H200 measurements
// above fit bf16_rn(dw + bf16_rn(product)): within half a bf16 ulp of the product plus half a bf16 ulp of the result
// of the fp32 sum) and not the scratch path's bits. A separate entry point so that no caller reaches it by passing a
// null scratch; the linears take it only when asked (cuda_linear.h, HLM_DW_BF16_EPILOGUE).
void matmul_backward_mixed_bf16_epilogue_cuda(const CudaBlasLt& lt, float* dx, __nv_bfloat16* dw, float* dbias,
                                              const __nv_bfloat16* dy, const __nv_bfloat16* x,
                                              const __nv_bfloat16* w, const MatmulCudaParams& p,
                                              bool accumulate_dx = false);
// The bf16 dw OVERWRITTEN instead: dw = bf16(dyᵀ·x), cuBLASLt's bf16 output with beta 0 (fp32 compute; the held
// value is not read). For a dw known to hold zeros (the first micro-batch after the gradients were zeroed) this is
// the scratch path's value without its traffic: cuBLASLt's conversion of the fp32 product is one rounding (no C term
// to add: the double rounding above came from adding C to a product already rounded), so stored = a nearest bf16
// value of the fp32 product, which is also what bf16_rn(0 + product) gives (up to −0 → +0 and the fp32 summation
// order, which cuBLASLt may choose differently for a bf16 output: tests/cuda/cases_adamw_lean.cpp). The GEMM writes
// 2 bytes per element instead of the scratch path's 4 + the add-and-round kernel's 8.
void matmul_backward_mixed_bf16_overwrite_cuda(const CudaBlasLt& lt, float* dx, __nv_bfloat16* dw, float* dbias,
                                               const __nv_bfloat16* dy, const __nv_bfloat16* x,
                                               const __nv_bfloat16* w, const MatmulCudaParams& p,
                                               bool accumulate_dx = false);

}  // namespace hlm
