// The f32 → bf16 rounding of core/dtype.h as a device function, for kernels that write bf16 directly: round to nearest
// even, NaN → quiet NaN keeping its sign and high payload bits (not __float2bfloat16_rn, which makes every NaN the
// canonical 0x7FFF), overflow → ±Inf. A kernel that writes f32_to_bf16_bits(v) gives the same bits as writing v in
// fp32 and casting it with cast_f32_to_bf16_cuda. Included only by .cu files.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace hlm::cuda {

__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace hlm::cuda
