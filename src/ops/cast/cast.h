// Casts between f32 and bf16, the operand roundings of the model's bf16 compute mode (matmul_forward_mixed_cuda,
// bf16 attention). f32 → bf16 rounds to nearest even (NaN stays a quiet NaN with its sign and high payload bits,
// ±Inf stays ±Inf, values beyond bf16's range round to ±Inf); bf16 → f32 is exact. CPU reference: core/dtype.h's
// f32_to_bf16 / bf16_to_f32 per element. dst [n] OVERWRITTEN from src [n].
#pragma once
#include <cstdint>

namespace hlm {

void cast_f32_to_bf16(uint16_t* dst, const float* src, int64_t n);
void cast_bf16_to_f32(float* dst, const uint16_t* src, int64_t n);

}  // namespace hlm
