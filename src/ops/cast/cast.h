// Cast f32 → bf16 (round to nearest even; NaN stays a quiet NaN, ±Inf stays ±Inf, values beyond bf16's range round
// to ±Inf): the operand rounding of the model's bf16 compute mode (matmul_forward_mixed_cuda and friends).
// CPU reference: core/dtype.h's f32_to_bf16 per element. dst [n] bf16 bits OVERWRITTEN from src [n] f32.
#pragma once
#include <cstdint>

namespace hlm {

void cast_f32_to_bf16(uint16_t* dst, const float* src, int64_t n);

}  // namespace hlm
