// Global gradient norm over many tensors on CUDA, and the clip scale of clip_grad_norm (src/train/grad_utils.h):
//   norm = ‖g‖₂ over all tensors together; scale = max_norm / norm when norm is finite and > max_norm, 1 when finite
//   and ≤ max_norm, NaN when norm is NaN or inf (the caller must skip the step; adamw_step_cuda skips on a non-finite
//   scale). The gradients are not modified: adamw_step_cuda applies the scale.
// Deterministic two-pass reduction in fp64, two launches whatever the number of tensors:
//   pass 1 (one launch over all tensors): tensor t gets B_t = min(ceil(n_t / 4096), 1024) blocks (a pure function of
//     its size), tensors in list order; block b of the grid is block j = b − first_block[t] of the tensor t with
//     first_block[t] ≤ b < first_block[t + 1] (first_block: prefix sums of the B_t, a table the launcher copies to the
//     workspace). Thread k of block j sums x[i]² in fp64 for i = j·256 + k, + B_t·256, ... in increasing i; then a
//     fixed block tree (cuda::block_sum_f64) gives partial[b], the slot of that block;
//   pass 2 (one block): thread k sums the slots k, k + 256, ... in order, then the same block tree, sqrt.
//   So the result depends only on the sizes and values (not on the GPU). It is bit-identical to the earlier form of
//   this launcher (one pass-1 launch per tensor, same slots), which tests/cuda/cases_adamw.cpp emulates exactly.
// NaN if any element is NaN, +inf if any is ±inf (and none is NaN), as the CPU.
// Error: every square is exact in fp64 (a 24-bit mantissa squared fits in 53 bits) and every sum has non-negative
// terms, so the relative error of Σ x² is at most (longest addition chain)·2^-53 ≤ (total elements + 64)·2^-53, as
// for the CPU's fp64 sum.
// Raw device pointers, queued on `stream`, no synchronization.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hlm {

// One of grad / grad_bf16 (a bf16 gradient, e.g. a linear's under the lean plan, is widened exactly: the same
// squares and sums as the f32 tensor holding the widened values).
struct GradNormCudaTensor {
  const float* grad = nullptr;        // device, contiguous f32
  int64_t numel = 0;
  const uint16_t* grad_bf16 = nullptr;  // device, contiguous bf16 bits (when grad is nullptr)
};

// Bytes of the host staging buffer for a list of `count` tensors (a function of the count only): the table
// (first_block [count + 1] int64, then a copy of the list), which also opens the device workspace.
size_t grad_norm_cuda_staging_bytes(size_t count);

// Bytes of the device workspace for this list of tensors: the table (grad_norm_cuda_staging_bytes(count) bytes),
// then the fp64 partials of pass 1 in slot order (at least one).
size_t grad_norm_cuda_workspace_bytes(const GradNormCudaTensor* tensors, size_t count);

// tensors: host array of `count` entries (numel = 0: nothing, the pointer unused). norm_out: device double [1].
// clip_scale_out: device float [1] or nullptr (then max_norm is not used); with it, max_norm must be positive (input
// error otherwise). No tensors, or only empty ones: norm 0 (scale 1), one launch.
// workspace: device memory of at least grad_norm_cuda_workspace_bytes(tensors, count) bytes, not used by other work
// until the finish kernel has run (stream order).
// host_staging: host memory of grad_norm_cuda_staging_bytes(count) bytes, filled here and copied to the workspace with
// cudaMemcpyAsync on `stream` (when some tensor is not empty); the CALLER keeps it alive and unmodified until that
// copy has completed:
//   pinned memory (cudaMallocHost): until the stream has passed this call (e.g. a later synchronize or a read back);
//   pageable memory (e.g. a std::vector): CUDA copies a pageable host→device source into its own staging memory
//     before cudaMemcpyAsync returns (CUDA's API synchronization rules), so the buffer may be freed or reused as soon
//     as this function returns (at the price of that extra host copy; ~24 bytes per tensor).
void grad_global_norm_cuda(double* norm_out, float* clip_scale_out, const GradNormCudaTensor* tensors, size_t count,
                           double max_norm, void* workspace, size_t workspace_bytes, void* host_staging,
                           cudaStream_t stream);

}  // namespace hlm
