// The GDN gate's elementwise functions as device code shared by gdn_gate.cu and the fused GDN decode preparation
// (ops/gdn_decode_prep), which must produce the gate's bits (contract gdn_gate.h):
//   g = −exp(A_log)·softplus(a + dt_bias), β = beta_scale·sigmoid(b); softplus(u) = u above kSoftplusThreshold, else
//   log1pf(expf(u)). Included only by .cu files.
#pragma once
#include <cuda_runtime.h>

#include "ops/gdn_gate/gdn_gate.h"

namespace hlm::cuda {

inline constexpr float kGdnSoftplusThreshold = static_cast<float>(kSoftplusThreshold);

__device__ __forceinline__ float gdn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float gdn_softplus(float u) { return u > kGdnSoftplusThreshold ? u : log1pf(expf(u)); }
__device__ __forceinline__ float gdn_softplus_grad(float u) {
  return u > kGdnSoftplusThreshold ? 1.0f : gdn_sigmoid(u);
}

// One (token, head) element of the forward: g and β as gdn_gate_forward_kernel writes them.
__device__ __forceinline__ void gdn_gate_element(float& g, float& beta, float a, float b, float A_log, float dt_bias,
                                                 float beta_scale) {
  const float u = a + dt_bias;  // rounded to fp32 as HF and the CPU reference do
  g = -expf(A_log) * gdn_softplus(u);
  beta = beta_scale * gdn_sigmoid(b);
}

}  // namespace hlm::cuda
