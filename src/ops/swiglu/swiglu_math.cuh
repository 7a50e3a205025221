// SwiGLU's per-element forward value on the device, shared by the SwiGLU kernels (swiglu.cu) and the small-row GEMV's
// fused gate/up epilogue (ops/matmul/gemv.cu), so that both give the same bits: silu(g) · u in the CPU reference's
// expression and order, g / (1 + exp(−g)) · u, fp32 (CUDA's expf, within 2 ulp).
#pragma once

namespace hlm::cuda {

__device__ __forceinline__ float swiglu_forward_value(float g, float u) {
  return g / (1.0f + expf(-g)) * u;  // the CPU's expression and order
}

}  // namespace hlm::cuda
