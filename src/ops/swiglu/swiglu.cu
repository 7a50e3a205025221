// SwiGLU CUDA kernels and launchers (contract: swiglu.h, swiglu_cuda.h). Elementwise, grid-stride, one element per
// thread per step; each element is read before it is written by the same thread, which makes the aliasing legal. The
// bf16-output forward rounds the very fp32 value of the fp32 forward (bf16_round.cuh).
#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/cast/bf16_round.cuh"
#include "ops/swiglu/swiglu_cuda.h"

namespace hlm {

namespace {

__global__ void swiglu_forward_kernel(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];  // the CPU's expression and order
  }
}

// The same value, rounded to bf16 as cast_f32_to_bf16_cuda rounds (bf16_round.cuh).
__global__ void swiglu_forward_bf16_kernel(__nv_bfloat16* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    reinterpret_cast<uint16_t*>(out)[i] = cuda::f32_to_bf16_bits(g / (1.0f + expf(-g)) * up[i]);
  }
}

__global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* d_out, const float* gate,
                                       const float* up, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i], u = up[i], dy = d_out[i];
    const float sig = 1.0f / (1.0f + expf(-g));
    const float one_minus_sig = 1.0f / (1.0f + expf(g));  // σ(−g) = 1 − σ(g), without cancellation
    // Products in the CPU's left-to-right order, so inf · 0 gives NaN in the same places.
    dgate[i] = dy * u * sig * (1.0f + g * one_minus_sig);
    dup[i] = dy * g * sig;
  }
}

}  // namespace

void swiglu_forward_cuda(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream) {
  HLM_CHECK(n >= 0, "swiglu_forward_cuda: negative length ", n);
  if (n == 0) return;
  swiglu_forward_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(out, gate, up, n);
  HLM_CUDA_CHECK_LAUNCH();
}

void swiglu_forward_bf16_cuda(__nv_bfloat16* out, const float* gate, const float* up, int64_t n,
                              cudaStream_t stream) {
  HLM_CHECK(n >= 0, "swiglu_forward_bf16_cuda: negative length ", n);
  if (n == 0) return;
  swiglu_forward_bf16_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(out, gate, up, n);
  HLM_CUDA_CHECK_LAUNCH();
}

void swiglu_backward_cuda(float* dgate, float* dup, const float* d_out, const float* gate, const float* up, int64_t n,
                          cudaStream_t stream) {
  HLM_CHECK(n >= 0, "swiglu_backward_cuda: negative length ", n);
  HLM_CHECK(dgate != dup || n == 0, "swiglu_backward_cuda: dgate and dup may not alias");
  if (n == 0) return;
  swiglu_backward_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(dgate, dup, d_out, gate, up,
                                                                                         n);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
