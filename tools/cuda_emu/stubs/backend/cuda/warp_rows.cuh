// Emulation stand-in for backend/cuda/warp_rows.cuh (stubs/README.md): warp_sum, the same 5-level xor tree over emu.h's
// shuffles.
#pragma once
#include "emu.h"
namespace hlm::cuda {
inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
}  // namespace hlm::cuda
