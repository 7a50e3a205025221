// Token embedding lookup: out[t, :] = table[ids[t], :] · multiplier.
// Shapes: table [V, D] f32, ids [T] i32, out [T, D]. An id outside [0, V) is an input error naming the position.
#pragma once
#include <cstdint>

namespace hlm {

void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t T, int64_t V, int64_t D,
                       float multiplier = 1.0f);

}  // namespace hlm
