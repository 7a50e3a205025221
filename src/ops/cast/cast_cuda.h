// Cast f32 → bf16 on CUDA (contract: cast.h), bit-identical to the CPU reference (round to nearest even, NaN → quiet
// NaN with its sign and high payload bits, overflow → ±Inf). Raw device pointers, queued on `stream`.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hlm {

void cast_f32_to_bf16_cuda(__nv_bfloat16* dst, const float* src, int64_t n, cudaStream_t stream);
// bf16 → f32, exact (the bits shifted into the high half).
void cast_bf16_to_f32_cuda(float* dst, const __nv_bfloat16* src, int64_t n, cudaStream_t stream);

}  // namespace hlm
