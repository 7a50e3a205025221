// RoPE CUDA kernel, launchers and host table builder (contract: rope.h, rope_cuda.h). One thread per rotary pair
// (token, head, i < R/2), grid-stride; dims >= R are not touched. The bf16-output forward: one thread per rotary pair
// or pass-through dim, the pair's two outputs computed by the same operations as rope_kernel and rounded by
// bf16_round.cuh (cast_f32_to_bf16_cuda's rounding), the pass-through dims rounded as they are.
#include <cuda_bf16.h>

#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/cast/bf16_round.cuh"
#include "ops/rope/rope_cuda.h"

namespace hlm {

namespace {

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
    const float x1 = v[i], x2 = v[i + half];
    const float lo_a = __fmul_rn(x1, c), lo_b = __fmul_rn(-x2, s);
    const float hi_a = __fmul_rn(x2, c), hi_b = __fmul_rn(x1, s);
    v[i] = __fadd_rn(lo_a, lo_b);
    v[i + half] = __fadd_rn(hi_a, hi_b);
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
    const float x1 = v[i], x2 = v[i + half];
    const float lo_a = __fmul_rn(x1, c), lo_b = __fmul_rn(-x2, s);
    const float hi_a = __fmul_rn(x2, c), hi_b = __fmul_rn(x1, s);
    o[i] = cuda::f32_to_bf16_bits(__fadd_rn(lo_a, lo_b));
    o[i + half] = cuda::f32_to_bf16_bits(__fadd_rn(hi_a, hi_b));
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
