// Residual add: x += scale · delta (scale = Granite's residual_multiplier, 1 otherwise). Shapes: [n].
#pragma once
#include <cstdint>

namespace hlm {

void residual_add_forward(float* x, const float* delta, float scale, int64_t n);

}  // namespace hlm
