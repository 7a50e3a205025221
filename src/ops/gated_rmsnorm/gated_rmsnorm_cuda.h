// Gated RMSNorm on CUDA: launchers for the contract in gated_rmsnorm.h (norm before the gate, plain weight w; same
// formulas, aliasing rules and overwrite semantics), f32, raw device pointers, queued on `stream`, no
// synchronization.
// Numerics (the CPU reference accumulates in double): mean(x²) and Σ dy·w·silu(z)·x are fp32 sums with FMA in a
// fixed order (deterministic):
//   dim ≤ gated_rmsnorm_cuda_warp_max_dim(): one warp per row; lane l sums in order, in one accumulator, the
//     elements of the float4 vectors l, l + 32, ... when every pointer is 16-byte aligned and dim % 4 == 0 (at most
//     4·ceil(dim / 128) terms), else the elements l, l + 32, ... (ceil(dim / 32) terms); then a 5-level xor-shuffle
//     tree.
//   longer rows: one block of gated_rmsnorm_cuda_threads() threads per row; thread t sums the elements t, t + T, ...
//     in order (ceil(dim / T) terms), then block_sum (cuda_common.cuh: 5 + T/32 roundings).
// silu(z) = z / (1 + e^-z) with expf (≤ 2 ulp); 1 − σ(z) is computed as σ(−z). dw is the deterministic two-pass
// column sum (backend/cuda/column_sum.h). fp32 Σx² overflows for |x| ≳ 1.8e19 / sqrt(dim) (the CPU's double does
// not).
// Shapes: x, z, y, dy, dx, dz [rows, dim]; w, dw [dim].
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hlm {

struct GatedRmsnormCudaParams {
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = 1e-5f;
};

// Rows up to this length get one warp each (several rows per block); longer rows get a block of
// gated_rmsnorm_cuda_threads() threads. The tests derive their tolerances from both (summation order above).
constexpr int64_t gated_rmsnorm_cuda_warp_max_dim() { return 1024; }
constexpr int gated_rmsnorm_cuda_threads() { return 128; }

// y = x·(mean(x²) + eps)^-1/2 · w · silu(z); y may alias x or z.
void gated_rmsnorm_forward_cuda(float* y, const float* x, const float* z, const float* w,
                                const GatedRmsnormCudaParams& p, cudaStream_t stream);

// Bytes of device scratch gated_rmsnorm_backward_cuda needs (per-row r and the dw partials).
size_t gated_rmsnorm_backward_cuda_workspace_bytes(const GatedRmsnormCudaParams& p);

// dx, dz OVERWRITTEN (may not alias inputs); dw [dim] OVERWRITTEN (nullptr = not wanted). `workspace` holds
// gated_rmsnorm_backward_cuda_workspace_bytes(p) bytes, used only by work on `stream`.
void gated_rmsnorm_backward_cuda(float* dx, float* dz, float* dw, const float* dy, const float* x, const float* z,
                                 const float* w, const GatedRmsnormCudaParams& p, void* workspace,
                                 size_t workspace_bytes, cudaStream_t stream);

}  // namespace hlm
