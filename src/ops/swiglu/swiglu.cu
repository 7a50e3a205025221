// SwiGLU CUDA kernels and launchers (contract: swiglu.h, swiglu_cuda.h). Elementwise and bandwidth-bound: when every
// pointer is 16-byte aligned (8-byte for bf16 data), each thread loads kUnroll float4 of every input (bf16 gate / up:
// 4 values in one 8-byte load, widened exactly to fp32; all loads issued before any store, to keep several in
// flight), computes, then stores float4 (bf16: 4 packed values in one 8-byte store); the last n % 4 elements, and
// every element when a pointer is misaligned, go through a scalar grid-stride loop. Each element is read before it is
// written by the same thread, which makes the aliasing legal (no __restrict__, no read-only loads: out may be an
// input). The bf16-output forward rounds the very fp32 value of the fp32 forward (bf16_round.cuh); the bf16-input
// kernels are the same templates on the widened values, so they give the bits of the fp32-input ones on fp32 copies.
//
// Bit-identity: the vector and scalar paths call one __forceinline__ element function per kernel kind, so they run
// the same operations in the same order, and the results equal those of the earlier scalar-only kernels.
// FMA contraction (nvcc -ptx of this file and of the earlier one, sm_90a, -O2; no cuobjdump on the build machine):
//   - `1.0f + expf(x)`: nvcc inlines expf, whose last step scales ex2.approx(t) by 2^k; that multiply is contracted
//     with the + 1 into fma.rn(ex2, 2^k, 1) in every instance (forward, σ and σ(−g)), before and after this change. It
//     is inside expf, so it cannot be spelled in the source; it is left to the compiler and was checked in the PTX.
//   - `1.0f + g * one_minus_sig` (backward): contracted to fma.rn(g, one_minus_sig, 1) by the earlier kernel; now
//     written as __fmaf_rn so that no build can round it differently.
//   - The products (forward · up, backward d_out·up·σ·t and d_out·g·σ) only feed other products or stores, so they
//     cannot be contracted; they stay plain mul.f32 (the PTX has no plain mul.f32 feeding an add.f32 that ptxas
//     could still fuse). Division and 1/x are div.rn / rcp.rn (correctly rounded).
#include <cstdint>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/dependent_launch.cuh"
#include "core/error.h"
#include "ops/cast/bf16_round.cuh"
#include "ops/swiglu/swiglu_cuda.h"
#include "ops/swiglu/swiglu_math.cuh"

namespace hlm {

namespace {

// float4 per input per thread in flight, and blocks per SM the registers must allow (ptxas -v, sm_90a, nvcc 13:
// forward 62 registers (bf16 output 60) with 4 float4 per input, backward 56 with 2, no spills; full occupancy, 2048
// threads per SM, i.e. 256 KB (forward) and 192 KB (backward) of loads in flight per SM (bf16 gate / up: 128 KB each,
// forward 60 registers, backward 52). Without the bound the forward took 94 registers and the backward at 4 float4
// took 128: 2 blocks per SM.)
constexpr int kForwardUnroll = 4;
constexpr int kBackwardUnroll = 2;
constexpr int kMinBlocksPerSm = 4;

// ---- Per-element arithmetic, shared by the vector path and the scalar path.

using cuda::swiglu_forward_value;  // swiglu_math.cuh: shared with the GEMV's fused gate/up epilogue

__device__ __forceinline__ void swiglu_backward_value(float dy, float g, float u, float& dgate, float& dup) {
  const float sig = 1.0f / (1.0f + expf(-g));
  const float one_minus_sig = 1.0f / (1.0f + expf(g));  // σ(−g) = 1 − σ(g), without cancellation
  // Products in the CPU's left-to-right order, so inf · 0 gives NaN in the same places. 1 + g·(1 − σ) is one fma, as
  // the earlier kernel compiled it (file comment).
  dgate = dy * u * sig * __fmaf_rn(g, one_minus_sig, 1.0f);
  dup = dy * g * sig;
}

// ---- Work split: float4 j (elements 4j .. 4j+3, j < n_vec) is handled by block j / (blockDim·U), in its k-th
// step of blockDim float4 (coalesced), then grid-stride; elements 4·n_vec .. n−1 by a scalar grid-stride loop.

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <int kUnroll>
__device__ __forceinline__ int64_t vector_start() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x;
}

// Loads of gate / up / d_out as fp32: four values at float4 index j (In = bf16: one 8-byte load, element 4j in the low
// half of .x, where the scalar path's uint16 loads find it), or one at element i. bf16 → fp32 is exact: the bits
// shifted left by 16 (as __bfloat162float).
__device__ __forceinline__ float widen_bf16(uint32_t bits) { return __uint_as_float(bits << 16); }
template <typename In>
__device__ __forceinline__ float4 load4(const In* p, int64_t j) {
  if constexpr (sizeof(In) == 4) {
    return reinterpret_cast<const float4*>(p)[j];
  } else {
    const uint2 v = reinterpret_cast<const uint2*>(p)[j];
    return make_float4(widen_bf16(v.x & 0xffffu), widen_bf16(v.x >> 16), widen_bf16(v.y & 0xffffu),
                       widen_bf16(v.y >> 16));
  }
}
template <typename In>
__device__ __forceinline__ float load1(const In* p, int64_t i) {
  if constexpr (sizeof(In) == 4)
    return p[i];
  else
    return widen_bf16(reinterpret_cast<const uint16_t*>(p)[i]);
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(cuda::f32_to_bf16_bits(lo)) | (static_cast<uint32_t>(cuda::f32_to_bf16_bits(hi)) << 16);
}

// Stores of the fp32 result (Out = float) or of its bf16 rounding as cast_f32_to_bf16_cuda rounds (Out = bf16,
// bf16_round.cuh): four values at float4 index j (bf16: one 8-byte store, element 4j in the low half of .x, where the
// scalar path's uint16 stores would place it), or one value at element i.
template <typename Out>
__device__ __forceinline__ void store4(Out* out, int64_t j, float4 v) {
  if constexpr (sizeof(Out) == 4)
    reinterpret_cast<float4*>(out)[j] = v;
  else
    reinterpret_cast<uint2*>(out)[j] = make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
}
template <typename Out>
__device__ __forceinline__ void store1(Out* out, int64_t i, float v) {
  if constexpr (sizeof(Out) == 4)
    out[i] = v;
  else
    reinterpret_cast<uint16_t*>(out)[i] = cuda::f32_to_bf16_bits(v);
}

// out = silu(gate) · up as fp32 (Out = float) or its bf16 rounding (Out = __nv_bfloat16), of fp32 or bf16 (In) gate
// and up.
template <typename In, typename Out>
__global__ void __launch_bounds__(cuda::kElementwiseThreads, kMinBlocksPerSm)
    swiglu_forward_kernel(Out* out, const In* gate, const In* up, int64_t n_vec, int64_t n) {
  cuda::dependent_launch_trigger();  // a programmatic dependent (the next GEMV) may start now
  cuda::dependent_launch_wait();     // launched as a dependent itself: gate and up are written
  const int64_t vec_stride = grid_threads() * kForwardUnroll;
  for (int64_t base = vector_start<kForwardUnroll>(); base < n_vec; base += vec_stride) {
    float4 g[kForwardUnroll], u[kForwardUnroll];
#pragma unroll
    for (int k = 0; k < kForwardUnroll; ++k) {
      const int64_t j = base + static_cast<int64_t>(k) * blockDim.x;
      if (j < n_vec) {
        g[k] = load4(gate, j);
        u[k] = load4(up, j);
      }
    }
#pragma unroll
    for (int k = 0; k < kForwardUnroll; ++k) {
      const int64_t j = base + static_cast<int64_t>(k) * blockDim.x;
      if (j < n_vec) {
        store4(out, j,
               make_float4(swiglu_forward_value(g[k].x, u[k].x), swiglu_forward_value(g[k].y, u[k].y),
                           swiglu_forward_value(g[k].z, u[k].z), swiglu_forward_value(g[k].w, u[k].w)));
      }
    }
  }
  for (int64_t i = 4 * n_vec + global_thread(); i < n; i += grid_threads()) {
    store1(out, i, swiglu_forward_value(load1(gate, i), load1(up, i)));
  }
}

// dgate and dup as fp32 (Out = float) or their bf16 roundings (Out = __nv_bfloat16: the bf16 mode's gate_proj /
// up_proj backward reads only these, so the fp32 values never reach memory), of fp32 or bf16 (In) gate and up and an
// fp32 or bf16 (DIn) d_out.
template <typename In, typename Out, typename DIn = float>
__global__ void __launch_bounds__(cuda::kElementwiseThreads, kMinBlocksPerSm)
    swiglu_backward_kernel(Out* dgate, Out* dup, const DIn* d_out, const In* gate, const In* up, int64_t n_vec,
                           int64_t n) {
  const int64_t vec_stride = grid_threads() * kBackwardUnroll;
  for (int64_t base = vector_start<kBackwardUnroll>(); base < n_vec; base += vec_stride) {
    float4 dy[kBackwardUnroll], g[kBackwardUnroll], u[kBackwardUnroll];
#pragma unroll
    for (int k = 0; k < kBackwardUnroll; ++k) {
      const int64_t j = base + static_cast<int64_t>(k) * blockDim.x;
      if (j < n_vec) {
        dy[k] = load4(d_out, j);
        g[k] = load4(gate, j);
        u[k] = load4(up, j);
      }
    }
#pragma unroll
    for (int k = 0; k < kBackwardUnroll; ++k) {
      const int64_t j = base + static_cast<int64_t>(k) * blockDim.x;
      if (j < n_vec) {
        float4 dg, du;
        swiglu_backward_value(dy[k].x, g[k].x, u[k].x, dg.x, du.x);
        swiglu_backward_value(dy[k].y, g[k].y, u[k].y, dg.y, du.y);
        swiglu_backward_value(dy[k].z, g[k].z, u[k].z, dg.z, du.z);
        swiglu_backward_value(dy[k].w, g[k].w, u[k].w, dg.w, du.w);
        store4(dgate, j, dg);
        store4(dup, j, du);
      }
    }
  }
  for (int64_t i = 4 * n_vec + global_thread(); i < n; i += grid_threads()) {
    float dg, du;
    swiglu_backward_value(load1(d_out, i), load1(gate, i), load1(up, i), dg, du);
    store1(dgate, i, dg);
    store1(dup, i, du);
  }
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Blocks for n elements of which the first 4·n_vec go as float4, kUnroll per thread: enough threads for the vector
// part and for the scalar rest (n_vec = 0: the plain one-element-per-thread sizing).
template <int kUnroll>
unsigned swiglu_grid(int64_t n_vec, int64_t n) {
  const int64_t vector_threads = (n_vec + kUnroll - 1) / kUnroll, scalar_threads = n - 4 * n_vec;
  return cuda::grid_blocks(vector_threads > scalar_threads ? vector_threads : scalar_threads);
}

// The vector path needs every pointer aligned to four of its elements (16 bytes for fp32, 8 for bf16).
template <typename T>
bool vec_aligned(const T* p) {
  return aligned(p, 4 * sizeof(T));
}

// One launcher per kernel kind for every input / output type (the public entry points below name their types).
template <typename In, typename Out>
void launch_forward(const char* name, Out* out, const In* gate, const In* up, int64_t n, cudaStream_t stream) {
  HLM_CHECK(n >= 0, name, ": negative length ", n);
  if (n == 0) return;
  const int64_t n_vec = vec_aligned(out) && vec_aligned(gate) && vec_aligned(up) ? n / 4 : 0;
  HLM_CUDA_CHECK(cuda::launch_maybe_dependent(cuda::dependent_launch_enabled(), swiglu_forward_kernel<In, Out>,
                                              dim3(swiglu_grid<kForwardUnroll>(n_vec, n)),
                                              dim3(cuda::kElementwiseThreads), 0, stream, out, gate, up, n_vec, n));
  HLM_CUDA_CHECK_LAUNCH();
}

template <typename In, typename Out, typename DIn>
void launch_backward(const char* name, Out* dgate, Out* dup, const DIn* d_out, const In* gate, const In* up,
                     int64_t n, cudaStream_t stream) {
  HLM_CHECK(n >= 0, name, ": negative length ", n);
  HLM_CHECK(dgate != dup || n == 0, name, ": dgate and dup may not alias");
  if (n == 0) return;
  const bool vec = vec_aligned(dgate) && vec_aligned(dup) && vec_aligned(d_out) && vec_aligned(gate) && vec_aligned(up);
  const int64_t n_vec = vec ? n / 4 : 0;
  swiglu_backward_kernel<In, Out, DIn>
      <<<swiglu_grid<kBackwardUnroll>(n_vec, n), cuda::kElementwiseThreads, 0, stream>>>(dgate, dup, d_out, gate, up,
                                                                                          n_vec, n);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void swiglu_forward_cuda(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream) {
  launch_forward("swiglu_forward_cuda", out, gate, up, n, stream);
}

void swiglu_forward_bf16_cuda(__nv_bfloat16* out, const float* gate, const float* up, int64_t n,
                              cudaStream_t stream) {
  launch_forward("swiglu_forward_bf16_cuda", out, gate, up, n, stream);
}

void swiglu_backward_cuda(float* dgate, float* dup, const float* d_out, const float* gate, const float* up, int64_t n,
                          cudaStream_t stream) {
  launch_backward("swiglu_backward_cuda", dgate, dup, d_out, gate, up, n, stream);
}

void swiglu_backward_bf16_cuda(__nv_bfloat16* dgate, __nv_bfloat16* dup, const float* d_out, const float* gate,
                               const float* up, int64_t n, cudaStream_t stream) {
  launch_backward("swiglu_backward_bf16_cuda", dgate, dup, d_out, gate, up, n, stream);
}

void swiglu_forward_bf16_in_cuda(__nv_bfloat16* out, const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t n,
                                 cudaStream_t stream) {
  launch_forward("swiglu_forward_bf16_in_cuda", out, gate, up, n, stream);
}

void swiglu_backward_bf16_in_cuda(__nv_bfloat16* dgate, __nv_bfloat16* dup, const float* d_out,
                                  const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t n, cudaStream_t stream) {
  launch_backward("swiglu_backward_bf16_in_cuda", dgate, dup, d_out, gate, up, n, stream);
}

void swiglu_backward_bf16_all_cuda(__nv_bfloat16* dgate, __nv_bfloat16* dup, const __nv_bfloat16* d_out,
                                   const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t n, cudaStream_t stream) {
  launch_backward("swiglu_backward_bf16_all_cuda", dgate, dup, d_out, gate, up, n, stream);
}

}  // namespace hlm
