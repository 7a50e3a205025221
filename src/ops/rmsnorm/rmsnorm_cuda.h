// RMSNorm on CUDA: launchers for the contract in rmsnorm.h (same formulas, aliasing rules and accumulate/overwrite
// semantics), raw device pointers, queued on `stream`, no synchronization.
//
// Storage: f32, or bf16 activations (x, out, d_out, dx, weight) with fp32 compute; in the bf16 variant the parameter
// gradient dweight is fp32 (a master gradient), and the output is rounded to bf16 once (HF rounds twice: the
// normalized x, then weight · it; the two differ by at most one bf16 ulp).
// Numerics (differences from the CPU reference, which accumulates in double):
//   - mean(x²) and Σ g·x are fp32 block sums: rmsnorm_cuda_threads() threads, each summing every
//     rmsnorm_cuda_threads()-th element in order, then block_sum (cuda_common.cuh); deterministic.
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

// Threads per row (one block per row); the tests derive their tolerances from it.
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
