// RMSNorm on CUDA: launchers for the contract in rmsnorm.h (same formulas, aliasing rules and accumulate/overwrite
// semantics), raw device pointers, queued on `stream`, no synchronization.
//
// Storage: f32, or bf16 activations (x, out, d_out, dx, weight) with fp32 compute; in the bf16 variant the parameter
// gradient dweight is fp32 (a master gradient), and the output is rounded to bf16 once (HF rounds twice: the
// normalized x, then weight · it; the two differ by at most one bf16 ulp).
// Numerics (differences from the CPU reference, which accumulates in double):
//   - mean(x²) and Σ g·x are fp32 sums in a fixed order (deterministic), with FMA:
//       dim ≤ rmsnorm_cuda_warp_max_dim(): one warp per row; lane l sums in order, in one accumulator, the elements
//         of the vectors l, l + 32, l + 64, ... of V = 16 / sizeof(storage) elements (4 f32, 8 bf16) when x, weight,
//         out / d_out, dx are 16-byte aligned and dim % V == 0 (at most V·ceil(dim / 32V) terms), else the
//         elements l, l + 32, ... (ceil(dim / 32) terms); then a 5-level xor-shuffle tree.
//       longer rows: one block of rmsnorm_cuda_threads() threads per row; thread t sums the elements t, t + T, ...
//         in order (ceil(dim / T) terms), then block_sum (cuda_common.cuh: 5 + T/32 roundings).
//   - fp32 sums overflow where the CPU's double ones do not: rows with |x| ≳ 1.8e19 / sqrt(D) give 0 (x · rsqrt(inf))
//     on the GPU, finite values on the CPU. HF computes the variance in fp32 too.
//   - dweight: deterministic two-pass column sum (backend/cuda/column_sum.h) of d_out · x · r, fp32.
// Shapes: x, out, d_out, dx [rows, dim]; weight, dweight [dim].
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hlm {

struct RmsnormCudaParams {
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = 1e-6f;
};

// Rows up to this length get one warp each (several rows per block); longer rows get a block of
// rmsnorm_cuda_threads() threads. The tests derive their tolerances from both (summation order above).
constexpr int64_t rmsnorm_cuda_warp_max_dim() { return 1024; }
constexpr int rmsnorm_cuda_threads() { return 256; }

// out = x · (mean(x²) + eps)^-1/2 · weight; out may alias x.
void rmsnorm_forward_cuda(float* out, const float* x, const float* weight, const RmsnormCudaParams& p,
                          cudaStream_t stream);
void rmsnorm_forward_cuda(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                          const RmsnormCudaParams& p, cudaStream_t stream);

// Bytes of device scratch rmsnorm_backward_cuda needs (per-row statistics and dweight partials).
size_t rmsnorm_backward_cuda_workspace_bytes(const RmsnormCudaParams& p);

// dx = r · (g − n · mean(g · n)) OVERWRITTEN (dx may alias d_out); dweight += Σ_rows d_out · n ACCUMULATED
// (nullptr = not wanted). `workspace` holds rmsnorm_backward_cuda_workspace_bytes(p) bytes, used only by work on
// `stream`.
void rmsnorm_backward_cuda(float* dx, float* dweight, const float* d_out, const float* x, const float* weight,
                           const RmsnormCudaParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);
void rmsnorm_backward_cuda(__nv_bfloat16* dx, float* dweight, const __nv_bfloat16* d_out, const __nv_bfloat16* x,
                           const __nv_bfloat16* weight, const RmsnormCudaParams& p, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream);

}  // namespace hlm
