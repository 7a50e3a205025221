// Fused AdamW step on CUDA (contract: adamw_cuda.h). One grid-stride elementwise kernel; the host helper computes the
// step's scalars in double like AdamW::step (src/train/adamw.cpp).
#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/adamw/adamw_cuda.h"

namespace hlm {

namespace {

__global__ void adamw_step_kernel(float* param, float* exp_avg, float* exp_avg_sq, __nv_bfloat16* param_bf16,
                                  const float* grad, const float* grad_scale, int64_t n, AdamWCudaStep s) {
  const float scale = grad_scale != nullptr ? *grad_scale : 1.0f;
  if (!isfinite(scale)) return;  // non-finite global norm: the step is skipped
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = grad_scale != nullptr ? grad[i] * scale : grad[i];
    const float m = s.beta1 * exp_avg[i] + s.one_minus_beta1 * g;
    const float v = s.beta2 * exp_avg_sq[i] + s.one_minus_beta2 * (g * g);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float denom = sqrtf(v) / s.bias_correction2_sqrt + s.eps;
    const float p = param[i] * s.decay - (s.step_size * m) / denom;
    param[i] = p;
    if (param_bf16 != nullptr) param_bf16[i] = __float2bfloat16_rn(p);
  }
}

}  // namespace

AdamWCudaStep adamw_cuda_step(double lr, double weight_decay, double beta1, double beta2, double eps, int64_t step) {
  HLM_CHECK_INPUT(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0, "AdamW betas must lie in [0, 1), got (",
                  beta1, ", ", beta2, ")");
  HLM_CHECK_INPUT(eps >= 0.0, "AdamW eps must be non-negative, got ", eps);
  HLM_CHECK_INPUT(step >= 1, "AdamW step number must be at least 1, got ", step);
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(step)));
  AdamWCudaStep s;
  s.beta1 = static_cast<float>(beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.eps = static_cast<float>(eps);
  s.decay = static_cast<float>(1.0 - lr * weight_decay);
  s.step_size = static_cast<float>(lr / bias_correction1);
  s.bias_correction2_sqrt = static_cast<float>(bias_correction2_sqrt);
  return s;
}

void adamw_step_cuda(float* param, float* exp_avg, float* exp_avg_sq, __nv_bfloat16* param_bf16, const float* grad,
                     const float* grad_scale, int64_t n, const AdamWCudaStep& step, cudaStream_t stream) {
  HLM_CHECK(n >= 0, "adamw_step_cuda: negative element count ", n);
  if (n == 0) return;
  adamw_step_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(param, exp_avg, exp_avg_sq,
                                                                                   param_bf16, grad, grad_scale, n,
                                                                                   step);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
