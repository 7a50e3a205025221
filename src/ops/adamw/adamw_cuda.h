// Fused AdamW step on CUDA with the contract of src/train/adamw.h (torch.optim.AdamW, amsgrad = False):
//   g ← g · s                                         (s = the global-norm clip scale, grad_norm_cuda.h; 1 if none)
//   p ← p · (1 − lr·wd)                               (decoupled decay, applied first)
//   m ← β1·m + (1 − β1)·g ;  v ← β2·v + (1 − β2)·g²
//   p ← p − (lr / (1 − β1ᵗ)) · m / (sqrt(v) / sqrt(1 − β2ᵗ) + eps)
// fp32 master parameters p and fp32 state m, v (updated in place), fp32 gradient (not modified: the clip scale is
// applied on the fly). Optionally the updated parameter is also written as bf16 (mixed precision: the copy the bf16
// forward reads), rounded once from the fp32 result, in the same pass, with core/dtype.h's rounding
// (ops/cast/bf16_round.cuh: nearest even, NaN keeping sign and payload), so the copy has the bits
// cast_f32_to_bf16_cuda (CudaModel::refresh_bf16) would give.
// Two launchers with the same per-element arithmetic (one device function, so their results are bit-identical):
// adamw_step_cuda (one tensor) and adamw_multi_step_cuda (a list of tensors, each with its own step scalars, in ONE
// launch: the optimizer step of a whole model without ~one launch and one tail per tensor).
// Numerics: the coefficients (bias corrections, 1 − β, decay) are computed on the host in double and rounded to f32
// once (adamw_cuda_step); each element is updated in fp32 (the CPU updates in double and rounds once), so results
// differ from the CPU by a few f32 roundings per element (tests/cuda/cases_adamw.cpp derives the bound). g² is an fp32
// product: |g| ≳ 1.8e19 overflows to inf (v = inf, p = NaN) where the CPU's double stays finite.
// Skipped steps: when *grad_scale is NaN or ±inf (the norm was not finite, grad_norm_cuda.h) the kernel changes
// nothing, so a pipeline need not read the norm back before queuing the step (the caller must still not count the
// step: read the norm before advancing the step number).
// Raw device pointers, queued on `stream`, no synchronization. Elementwise and deterministic.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hlm {

// Per-group scalars of one step, f32 (rounded once from double).
struct AdamWCudaStep {
  float beta1 = 0.9f, one_minus_beta1 = 0.1f;
  float beta2 = 0.999f, one_minus_beta2 = 0.001f;
  float eps = 1e-8f;
  float decay = 1.0f;                  // 1 − lr · weight_decay
  float step_size = 0.0f;              // lr / (1 − β1ᵗ)
  float bias_correction2_sqrt = 1.0f;  // sqrt(1 − β2ᵗ)
};

// The scalars for step number `step` (1, 2, ...), computed in double as AdamW::step does. Checks betas in [0, 1),
// eps ≥ 0 and step ≥ 1 (input errors).
AdamWCudaStep adamw_cuda_step(double lr, double weight_decay, double beta1, double beta2, double eps, int64_t step);

// One AdamW step over n elements. grad_scale: device float [1] or nullptr (= 1). param_bf16: [n] or nullptr.
void adamw_step_cuda(float* param, float* exp_avg, float* exp_avg_sq, __nv_bfloat16* param_bf16, const float* grad,
                     const float* grad_scale, int64_t n, const AdamWCudaStep& step, cudaStream_t stream);

// ---- Multi-tensor step: one launch over a list of tensors.
// Work split: every tensor is cut into chunks of kAdamWMultiChunk elements (the last one shorter), one block per
// chunk, tensors in list order; block b updates chunk b − first_block[t] of the tensor t with first_block[t] ≤ b <
// first_block[t + 1] (first_block: the prefix sums of the chunk counts, a pure function of the sizes, so the launch
// is deterministic and does not depend on the GPU). A chunk whose four pointers are 16-byte aligned (and its bf16
// copy 8-byte aligned) is read and written as float4; otherwise element by element (same arithmetic either way).
// The table (first_block and a copy of the list) lives in the caller's device workspace; the launcher writes it into
// the caller's host staging buffer and copies it with cudaMemcpyAsync on `stream` before the kernel.
inline constexpr int64_t kAdamWMultiChunk = 16384;

// One entry of the list: a contiguous f32 tensor of n elements and its step scalars (lr and weight decay differ per
// tensor). param_bf16: [n] bf16 copy written with the update, or nullptr (none). n = 0: nothing (pointers unused).
struct AdamWCudaTensor {
  float* param = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  const float* grad = nullptr;
  __nv_bfloat16* param_bf16 = nullptr;
  int64_t n = 0;
  AdamWCudaStep step;
};

// Bytes of the device workspace, and of the host staging buffer, for a list of `count` tensors (a function of the
// count only: a caller can allocate both once).
size_t adamw_multi_step_cuda_workspace_bytes(size_t count);

// One AdamW step of every tensor of tensors[0, count) (host array; count = 0 or only empty tensors: nothing is queued),
// as if adamw_step_cuda ran on each in turn with the same grad_scale (device float [1] or nullptr = 1; not finite:
// nothing is written). The tensors must not overlap each other. workspace: device memory of at least
// adamw_multi_step_cuda_workspace_bytes(count) bytes, not used by other work until the kernel has run (stream order).
// host_staging: host memory of as many bytes, filled here and copied to the workspace with cudaMemcpyAsync on
// `stream`; the CALLER keeps it alive and unmodified until that copy has completed:
//   pinned memory (cudaMallocHost): until the stream has passed this launch (e.g. a later synchronize or a read back);
//   pageable memory (e.g. a std::vector): CUDA copies a pageable host→device source into its own staging memory
//     before cudaMemcpyAsync returns (CUDA's API synchronization rules), so the buffer may be reused as soon as this
//     function returns (at the price of that extra host copy; ~100 bytes per tensor).
// CudaAdamW (models/cuda/cuda_adamw.h) owns a pageable buffer: its step has already waited for the stream (the norm).
void adamw_multi_step_cuda(const AdamWCudaTensor* tensors, size_t count, const float* grad_scale, void* workspace,
                           size_t workspace_bytes, void* host_staging, cudaStream_t stream);

}  // namespace hlm
