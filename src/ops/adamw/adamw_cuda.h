// Fused AdamW step on CUDA with the contract of src/train/adamw.h (torch.optim.AdamW, amsgrad = False):
//   g ← g · s                                         (s = the global-norm clip scale, grad_norm_cuda.h; 1 if none)
//   p ← p · (1 − lr·wd)                               (decoupled decay, applied first)
//   m ← β1·m + (1 − β1)·g ;  v ← β2·v + (1 − β2)·g²
//   p ← p − (lr / (1 − β1ᵗ)) · m / (sqrt(v) / sqrt(1 − β2ᵗ) + eps)
// fp32 master parameters p and fp32 state m, v (updated in place), fp32 gradient (not modified: the clip scale is
// applied on the fly). Optionally the updated parameter is also written as bf16 (mixed precision: the copy the bf16
// forward reads), rounded once from the fp32 result, in the same pass.
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

}  // namespace hlm
