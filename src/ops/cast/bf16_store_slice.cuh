// A warp-row kernel's slice (backend/cuda/warp_rows.cuh: P values in P/V chunks of V consecutive elements) stored as
// bf16 with cast_f32_to_bf16_cuda's rounding (bf16_round.cuh: NaN keeps sign and payload, unlike
// __float2bfloat16_rn), so a kernel writing its output's rounding gives the bits of a cast launch after it. V floats
// become V bf16: one 2V-byte pack per chunk when the row is 2V-byte aligned, else V 2-byte stores of the same bits (a
// kernel whose float slices are vectors need not give them up for a bf16 row that is only 2-byte aligned: the
// alignment is the row's, the same for every lane, so the branch does not diverge). Included only by .cu files.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/warp_rows.cuh"
#include "ops/cast/bf16_round.cuh"

namespace hlm::cuda {

template <int V, int P>
__device__ __forceinline__ void store_slice_bf16(__nv_bfloat16* row, const float (&src)[P], int64_t D, int lane) {
  const bool packed = V == 1 || reinterpret_cast<uintptr_t>(row) % (2 * V) == 0;
  store_slice_as<V, P>(reinterpret_cast<uint16_t*>(row), src, D, lane, [](float v) { return f32_to_bf16_bits(v); },
                       packed);
}

}  // namespace hlm::cuda
