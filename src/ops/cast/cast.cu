// Cast f32 → bf16 CUDA kernel and launcher (contract: cast.h, cast_cuda.h). Four elements per thread when both
// pointers allow 16-byte / 8-byte accesses, else one. The rounding (bf16_round.cuh) is core/dtype.h's bit formula, not
// __float2bfloat16_rn: both round to nearest even, but the intrinsic turns every NaN into the canonical 0x7FFF while
// the CPU keeps the sign and the high payload bits; the same formula keeps the two bit-identical.
#include <cstdint>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/cast/bf16_round.cuh"
#include "ops/cast/cast_cuda.h"

namespace hlm {

namespace {

using cuda::f32_to_bf16_bits;

__global__ void cast_kernel(__nv_bfloat16* dst, const float* src, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    reinterpret_cast<uint16_t*>(dst)[i] = f32_to_bf16_bits(src[i]);
}

__global__ void cast_kernel_vec4(__nv_bfloat16* dst, const float* src, int64_t n4) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 v = reinterpret_cast<const float4*>(src)[i];
    uint2 packed;
    packed.x = f32_to_bf16_bits(v.x) | (static_cast<uint32_t>(f32_to_bf16_bits(v.y)) << 16);
    packed.y = f32_to_bf16_bits(v.z) | (static_cast<uint32_t>(f32_to_bf16_bits(v.w)) << 16);
    reinterpret_cast<uint2*>(dst)[i] = packed;
  }
}

__global__ void widen_kernel(float* dst, const __nv_bfloat16* src, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(src)[i]) << 16);
}

}  // namespace

void cast_bf16_to_f32_cuda(float* dst, const __nv_bfloat16* src, int64_t n, cudaStream_t stream) {
  HLM_CHECK(n >= 0, "cast_bf16_to_f32_cuda: negative length ", n);
  if (n == 0) return;
  widen_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(dst, src, n);
  HLM_CUDA_CHECK_LAUNCH();
}

void cast_f32_to_bf16_cuda(__nv_bfloat16* dst, const float* src, int64_t n, cudaStream_t stream) {
  HLM_CHECK(n >= 0, "cast_f32_to_bf16_cuda: negative length ", n);
  if (n == 0) return;
  const bool aligned = reinterpret_cast<uintptr_t>(src) % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 8 == 0;
  const int64_t n4 = aligned ? n / 4 : 0;
  if (n4 > 0) {
    cast_kernel_vec4<<<cuda::grid_blocks(n4), cuda::kElementwiseThreads, 0, stream>>>(dst, src, n4);
    HLM_CUDA_CHECK_LAUNCH();
  }
  const int64_t rest = n - 4 * n4;
  if (rest > 0) {
    cast_kernel<<<cuda::grid_blocks(rest), cuda::kElementwiseThreads, 0, stream>>>(dst + 4 * n4, src + 4 * n4, rest);
    HLM_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace hlm
