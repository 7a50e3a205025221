// Global gradient norm over many tensors on CUDA, and the clip scale of clip_grad_norm (src/train/grad_utils.h):
//   norm = ‖g‖₂ over all tensors together; scale = max_norm / norm when norm is finite and > max_norm, 1 when finite
//   and ≤ max_norm, NaN when norm is NaN or inf (the caller must skip the step; adamw_step_cuda skips on a non-finite
//   scale). The gradients are not modified: adamw_step_cuda applies the scale.
// Deterministic two-pass reduction in fp64: pass 1 gives each tensor a fixed number of blocks (a pure function of its
// size), each writing one fp64 partial of Σ x² (per-thread fp64 sums, then a fixed block tree); pass 2 sums the
// partials in slot order in one block. NaN if any element is NaN, +inf if any is ±inf (and none is NaN), as the CPU.
// Error: every square is exact in fp64 (a 24-bit mantissa squared fits in 53 bits) and every sum has non-negative
// terms, so the relative error of Σ x² is at most (longest addition chain)·2^-53 ≤ (total elements + 64)·2^-53, as
// for the CPU's fp64 sum.
// Raw device pointers (the table itself is host memory: one launch per tensor), queued on `stream`.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hlm {

struct GradNormCudaTensor {
  const float* grad = nullptr;  // device, contiguous f32
  int64_t numel = 0;
};

// Bytes of device scratch (the fp64 partials) for this list of tensors.
size_t grad_norm_cuda_workspace_bytes(const GradNormCudaTensor* tensors, size_t count);

// norm_out: device double [1]. clip_scale_out: device float [1] or nullptr (then max_norm is not used); with it,
// max_norm must be positive (input error otherwise).
void grad_global_norm_cuda(double* norm_out, float* clip_scale_out, const GradNormCudaTensor* tensors, size_t count,
                           double max_norm, void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace hlm
