// The causal conv's SiLU as one device function, shared by the conv kernels (causal_conv1d.cu) and the fused GDN
// decode preparation (ops/gdn_decode_prep), which must produce the conv's bits: silu(p) = p / (1 + e^−p), expf
// (≤ 2 ulp), one addition, one division, in this order. Included only by .cu files.
#pragma once
#include <cuda_runtime.h>

namespace hlm::cuda {

__device__ __forceinline__ float conv_silu(float pre) { return pre / (1.0f + expf(-pre)); }

}  // namespace hlm::cuda
