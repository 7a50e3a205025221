// RoPE on CUDA: launchers for the contract in rope.h, f32, in place on x [T, H, D], raw device pointers.
//
// The frequencies come from the CPU RopeTable as a cos/sin table indexed by position: rope_cuda_table_host fills
// cos[p, i], sin[p, i] (p < num_positions, i < R/2) with exactly the values rope_ref.cpp computes per token
// (float angle p · inv_freq[i], cos/sin in double rounded to float, times attention_scaling); upload them once per
// model. The kernels then do the CPU's two products and one sum per output with separate roundings (no FMA), so
// forward and backward are bit-identical to the CPU reference.
//
// Bad positions: the CPU throws an input error; here a position outside [0, num_positions) sets *error_flag = 1
// (when not nullptr; never cleared by these calls) and that token's rotary dims are set to NaN.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "ops/rope/rope.h"

namespace hlm {

// Device view of an uploaded table.
struct RopeCudaTable {
  const float* cos = nullptr;  // [num_positions, rotary_dim / 2]
  const float* sin = nullptr;  // [num_positions, rotary_dim / 2]
  int64_t num_positions = 0;
  int64_t head_dim = 0;    // D
  int64_t rotary_dim = 0;  // R (even, <= D)
};

// Host: the cos/sin values for positions [0, num_positions). Input error when num_positions exceeds
// table.max_position (dynamic rope), internal error for a malformed table.
void rope_cuda_table_host(std::vector<float>& cos, std::vector<float>& sin, const RopeTable& table,
                          int64_t num_positions);

// Rotates every head of every token by +angle (forward) or applies the transpose (backward: -angle), in place.
// x [T, H, D]; positions [T] (int32, device).
void rope_forward_cuda(float* x, const int32_t* positions, int64_t T, int64_t H, const RopeCudaTable& table,
                       int* error_flag, cudaStream_t stream);
void rope_backward_cuda(float* d, const int32_t* positions, int64_t T, int64_t H, const RopeCudaTable& table,
                        int* error_flag, cudaStream_t stream);
// The forward into a separate bf16 tensor (the attention's bf16 compute mode, where the attention kernel is the rotated
// q / k's one reader): out [T, H, D] = rope_forward_cuda's result on a copy of x, rounded by cast_f32_to_bf16_cuda's
// rule, bit for bit, the pass-through dims (≥ R) included; x is read only; out may not alias x. Bad positions as above.
void rope_forward_bf16_cuda(__nv_bfloat16* out, const float* x, const int32_t* positions, int64_t T, int64_t H,
                            const RopeCudaTable& table, int* error_flag, cudaStream_t stream);

}  // namespace hlm
