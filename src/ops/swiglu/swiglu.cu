// SwiGLU CUDA kernels and launchers (contract: swiglu.h, swiglu_cuda.h). Elementwise, grid-stride, one element per
// thread per step; each element is read before it is written by the same thread, which makes the aliasing legal.
#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
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
