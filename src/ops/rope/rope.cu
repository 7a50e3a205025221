// RoPE CUDA kernel, launchers and host table builder (contract: rope.h, rope_cuda.h). One thread per rotary pair
// (token, head, i < R/2), grid-stride; dims >= R are not touched. The bf16-output forward: one thread per rotary pair
// or pass-through dim, the pair's two outputs computed by the same operations as rope_kernel and rounded by
// bf16_round.cuh (cast_f32_to_bf16_cuda's rounding), the pass-through dims rounded as they are; two adjacent items
// per thread when the layout allows it (rope_forward_bf16_pairs_kernel, the same bits).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/cast/bf16_round.cuh"
#include "ops/rope/rope_cuda.h"

namespace hlm {

namespace {

// One rotary pair: lo = x1·c − x2·s, hi = x2·c + x1·s, each product and sum rounded separately (rope_apply's order in
// rope_ref.cpp, no FMA): the single definition of the bits for every kernel below.
__device__ __forceinline__ void rotate_pair(float x1, float x2, float c, float s, float& lo, float& hi) {
  const float lo_a = __fmul_rn(x1, c), lo_b = __fmul_rn(-x2, s);
  const float hi_a = __fmul_rn(x2, c), hi_b = __fmul_rn(x1, s);
  lo = __fadd_rn(lo_a, lo_b);
  hi = __fadd_rn(hi_a, hi_b);
}

// sign = +1: forward; -1: backward (transpose). Same operation order as rope_apply in rope_ref.cpp.
__global__ void rope_kernel(float* x, const int32_t* positions, int64_t T, int64_t H, int64_t D, int64_t half,
                            const float* cos_table, const float* sin_table, int64_t num_positions, float sign,
                            int* error_flag) {
  const int64_t n = T * H * half;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = k % half;
    const int64_t th = k / half;  // t * H + h
    const int64_t t = th / H;
    float* v = x + th * D;
    const int32_t pos = positions[t];
    if (pos < 0 || pos >= num_positions) {
      v[i] = cuda::quiet_nan();
      v[i + half] = cuda::quiet_nan();
      if (i == 0 && error_flag != nullptr) atomicOr(error_flag, 1);
      continue;
    }
    const float c = cos_table[static_cast<int64_t>(pos) * half + i];
    const float s = sign * sin_table[static_cast<int64_t>(pos) * half + i];  // exact: sign is ±1
    float lo, hi;
    rotate_pair(v[i], v[i + half], c, s, lo, hi);
    v[i] = lo;
    v[i + half] = hi;
  }
}

// out [T, H, D] bf16 = the rounding of rope_kernel's forward result on x (x unchanged). Per head, D − half work items:
// j < half the rotary pair (j, j + half), then the pass-through dims R + (j − half).
__global__ void rope_forward_bf16_kernel(uint16_t* out, const float* x, const int32_t* positions, int64_t T, int64_t H,
                                         int64_t D, int64_t half, const float* cos_table, const float* sin_table,
                                         int64_t num_positions, int* error_flag) {
  const int64_t items = D - half;
  const int64_t n = T * H * items;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = k % items;
    const int64_t th = k / items;  // t * H + h
    const float* v = x + th * D;
    uint16_t* o = out + th * D;
    if (j >= half) {  // pass-through dim
      const int64_t d = 2 * half + (j - half);
      o[d] = cuda::f32_to_bf16_bits(v[d]);
      continue;
    }
    const int64_t i = j;
    const int32_t pos = positions[th / H];
    if (pos < 0 || pos >= num_positions) {
      o[i] = cuda::f32_to_bf16_bits(cuda::quiet_nan());
      o[i + half] = cuda::f32_to_bf16_bits(cuda::quiet_nan());
      if (i == 0 && error_flag != nullptr) atomicOr(error_flag, 1);
      continue;
    }
    const float c = cos_table[static_cast<int64_t>(pos) * half + i];
    const float s = sin_table[static_cast<int64_t>(pos) * half + i];  // forward: sign +1
    float lo, hi;
    rotate_pair(v[i], v[i + half], c, s, lo, hi);
    o[i] = cuda::f32_to_bf16_bits(lo);
    o[i + half] = cuda::f32_to_bf16_bits(hi);
  }
}

// rope_forward_bf16_kernel two items at a time: item pair j2 of row th covers the rotated pairs (i, i + half) and
// (i + 1, i + 1 + half), i = 2·j2, or two adjacent pass-through dims; 8-byte loads, 4-byte stores, 32-bit indices.
// Each output is rotate_pair's, as in the one-item kernel (the same bits); taken when half and D
// are even, x and the tables are 8-byte aligned, out 4-byte aligned and the items fit an int. Session 26's trace of
// the 0.86B distillation step: the one-item kernel took 56.7 µs per q/k call at [8192 × 16 × 128] (1.7 TB/s), its
// 64-bit divisions and 2-byte stores the likely limit.
__global__ void rope_forward_bf16_pairs_kernel(uint32_t* out, const float2* x, const int32_t* positions, int H,
                                               int D2, int half2, const float2* cos_table, const float2* sin_table,
                                               int num_positions, int* error_flag, int n) {
  const int items2 = D2 - half2;
  for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x) {
    const int th = k / items2;  // t * H + h
    const int j2 = k - th * items2;
    const float2* v = x + static_cast<int64_t>(th) * D2;
    uint32_t* o = out + static_cast<int64_t>(th) * D2;
    if (j2 >= half2) {  // two pass-through dims
      const int d2 = 2 * half2 + (j2 - half2);
      const float2 a = v[d2];
      o[d2] = cuda::f32_to_bf16_bits(a.x) | (static_cast<uint32_t>(cuda::f32_to_bf16_bits(a.y)) << 16);
      continue;
    }
    const int32_t pos = positions[th / H];
    if (pos < 0 || pos >= num_positions) {
      const uint32_t nan2 = cuda::f32_to_bf16_bits(cuda::quiet_nan()) * 0x10001u;
      o[j2] = nan2;
      o[j2 + half2] = nan2;
      if (j2 == 0 && error_flag != nullptr) atomicOr(error_flag, 1);
      continue;
    }
    const float2 c = cos_table[static_cast<int64_t>(pos) * half2 + j2];
    const float2 sn = sin_table[static_cast<int64_t>(pos) * half2 + j2];  // forward: sign +1
    const float2 x1 = v[j2], x2 = v[j2 + half2];
    float lo0, hi0, lo1, hi1;
    rotate_pair(x1.x, x2.x, c.x, sn.x, lo0, hi0);
    rotate_pair(x1.y, x2.y, c.y, sn.y, lo1, hi1);
    o[j2] = cuda::f32_to_bf16_bits(lo0) | (static_cast<uint32_t>(cuda::f32_to_bf16_bits(lo1)) << 16);
    o[j2 + half2] = cuda::f32_to_bf16_bits(hi0) | (static_cast<uint32_t>(cuda::f32_to_bf16_bits(hi1)) << 16);
  }
}

void check_table(int64_t T, int64_t H, const RopeCudaTable& table) {
  HLM_CHECK(T >= 0 && H >= 0, "rope_cuda: negative shape T=", T, " H=", H);
  HLM_CHECK(table.rotary_dim >= 2 && table.rotary_dim % 2 == 0 && table.rotary_dim <= table.head_dim,
            "rope_cuda: bad table (head_dim ", table.head_dim, ", rotary_dim ", table.rotary_dim, ")");
}

void launch(float* x, const int32_t* positions, int64_t T, int64_t H, const RopeCudaTable& table, float sign,
            int* error_flag, cudaStream_t stream) {
  check_table(T, H, table);
  const int64_t half = table.rotary_dim / 2;
  const int64_t n = T * H * half;
  if (n == 0) return;
  rope_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(
      x, positions, T, H, table.head_dim, half, table.cos, table.sin, table.num_positions, sign, error_flag);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_cuda_table_host(std::vector<float>& cos, std::vector<float>& sin, const RopeTable& table,
                          int64_t num_positions) {
  HLM_CHECK(static_cast<int64_t>(table.inv_freq.size()) == table.rotary_dim / 2 && table.rotary_dim <= table.head_dim,
            "rope_cuda_table_host: bad table");
  HLM_CHECK(num_positions >= 0, "rope_cuda_table_host: negative num_positions ", num_positions);
  HLM_CHECK_INPUT(table.max_position == 0 || num_positions <= table.max_position, "rope: a table of ", num_positions,
                  " positions exceeds ", table.max_position,
                  " (dynamic rope needs the NTK recompute, which is not supported)");
  const size_t half = table.inv_freq.size();
  cos.assign(static_cast<size_t>(num_positions) * half, 0.0f);
  sin.assign(static_cast<size_t>(num_positions) * half, 0.0f);
  const float scaling = table.attention_scaling;
  for (int64_t p = 0; p < num_positions; ++p) {
    // As rope_cos_sin in rope_ref.cpp: float angle, cos/sin in double rounded to float, then · attention_scaling.
    const auto pos = static_cast<float>(static_cast<int32_t>(p));
    for (size_t i = 0; i < half; ++i) {
      const float angle = pos * table.inv_freq[i];
      cos[static_cast<size_t>(p) * half + i] = static_cast<float>(std::cos(static_cast<double>(angle))) * scaling;
      sin[static_cast<size_t>(p) * half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * scaling;
    }
  }
}

void rope_forward_cuda(float* x, const int32_t* positions, int64_t T, int64_t H, const RopeCudaTable& table,
                       int* error_flag, cudaStream_t stream) {
  launch(x, positions, T, H, table, 1.0f, error_flag, stream);
}

void rope_forward_bf16_cuda(__nv_bfloat16* out, const float* x, const int32_t* positions, int64_t T, int64_t H,
                            const RopeCudaTable& table, int* error_flag, cudaStream_t stream) {
  check_table(T, H, table);
  HLM_CHECK(static_cast<const void*>(out) != static_cast<const void*>(x), "rope_forward_bf16_cuda: out may not alias x");
  const int64_t half = table.rotary_dim / 2;
  const int64_t n = T * H * (table.head_dim - half);
  if (n == 0) return;
  const auto aligned = [](const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
  if (half % 2 == 0 && table.head_dim % 2 == 0 && n / 2 <= std::numeric_limits<int>::max() &&
      table.num_positions <= std::numeric_limits<int>::max() && aligned(x, 8) && aligned(out, 4) &&
      aligned(table.cos, 8) && aligned(table.sin, 8)) {
    rope_forward_bf16_pairs_kernel<<<cuda::grid_blocks(n / 2), cuda::kElementwiseThreads, 0, stream>>>(
        reinterpret_cast<uint32_t*>(out), reinterpret_cast<const float2*>(x), positions, static_cast<int>(H),
        static_cast<int>(table.head_dim / 2), static_cast<int>(half / 2), reinterpret_cast<const float2*>(table.cos),
        reinterpret_cast<const float2*>(table.sin), static_cast<int>(table.num_positions), error_flag,
        static_cast<int>(n / 2));
    HLM_CUDA_CHECK_LAUNCH();
    return;
  }
  rope_forward_bf16_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(
      reinterpret_cast<uint16_t*>(out), x, positions, T, H, table.head_dim, half, table.cos, table.sin,
      table.num_positions, error_flag);
  HLM_CUDA_CHECK_LAUNCH();
}

void rope_backward_cuda(float* d, const int32_t* positions, int64_t T, int64_t H, const RopeCudaTable& table,
                        int* error_flag, cudaStream_t stream) {
  launch(d, positions, T, H, table, -1.0f, error_flag, stream);
}

}  // namespace hlm
