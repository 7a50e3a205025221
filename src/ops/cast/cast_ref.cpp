// Cast f32 → bf16, CPU reference (contract: cast.h).
#include "ops/cast/cast.h"

#include "core/dtype.h"
#include "core/error.h"

namespace hlm {

void cast_f32_to_bf16(uint16_t* dst, const float* src, int64_t n) {
  HLM_CHECK(n >= 0, "cast_f32_to_bf16: negative length ", n);
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void cast_bf16_to_f32(float* dst, const uint16_t* src, int64_t n) {
  HLM_CHECK(n >= 0, "cast_bf16_to_f32: negative length ", n);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

}  // namespace hlm
