// Small-row bf16 linear products (contract: gemv_cuda.h). One warp per output column of the group (columns of the
// outputs in order), a grid of whole blocks striding over the columns; x [M, K] staged once per block in shared
// memory as bf16 (16-byte loads when aligned) after each warp has issued its first column's first weight loads. The
// residual-norm variant (gemv_bf16_residual_norm_cuda) computes x in that staging instead: each block forms the rows
// u = residual + scale · N(delta), sums their squares as rmsnorm.cu's register path does, normalizes and rounds;
// block 0 writes u back (the decoder's next residual stream).
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/dependent_launch.cuh"
#include "core/error.h"
#include "ops/cast/bf16_round.cuh"
#include "ops/matmul/gemv_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"

namespace hlm {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane
// The folded RMSNorm (GemvResidualNorm) sums a row as rmsnorm.cu's one-block-per-row kernels do: the same thread count
// and the same row lengths (at most kNormE elements per thread).
constexpr int kNormE = 16;
static_assert(kThreads == rmsnorm_cuda_threads(), "the folded norm's partial sums are rmsnorm.cu's");
static_assert(!gemv_residual_norm_k_supported(rmsnorm_cuda_warp_max_dim()) &&
                  gemv_residual_norm_k_supported(rmsnorm_cuda_warp_max_dim() + 8) &&
                  gemv_residual_norm_k_supported(kNormE * kThreads) &&
                  !gemv_residual_norm_k_supported(kNormE * kThreads + 8),
              "the fold takes exactly the rows of rmsnorm.cu's register path");

struct GemvGroup {
  const __nv_bfloat16* w[gemv_max_outputs()];
  const float* bias[gemv_max_outputs()];
  float* y[gemv_max_outputs()];
  int64_t n[gemv_max_outputs()];
  int64_t first[gemv_max_outputs() + 1];  // first column of each output in the group's numbering; first[outs] = total
  int outs;
};

// acc += Σ_i w_i · x_i over one 16-byte chunk (8 bf16) of a weight row, w already widened to fp32.
__device__ __forceinline__ void dot8(float& acc, const float (&w)[8], const uint4& x) {
  const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 b = __bfloat1622float2(x2[i]);
    acc = fmaf(w[2 * i], b.x, acc);
    acc = fmaf(w[2 * i + 1], b.y, acc);
  }
}

__device__ __forceinline__ void widen8(float (&out)[8], const uint4& w) {
  const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __bfloat1622float2(w2[i]);
    out[2 * i] = a.x;
    out[2 * i + 1] = a.y;
  }
}

// Group column `col` → (output, column within it).
__device__ __forceinline__ int output_of(const GemvGroup& g, int64_t col) {
  int o = 0;
  while (col >= g.first[o + 1]) ++o;
  return o;
}

// One pass of kUnroll 16-byte loads of a weight row from chunk c0 on (lanes 32 apart); zeros past the row.
__device__ __forceinline__ void load_round(uint4 (&wv)[kUnroll], const uint4* wr, int64_t c0, int64_t chunks) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t c = c0 + u * 32;
    wv[u] = c < chunks ? __ldcs(wr + c) : make_uint4(0, 0, 0, 0);
  }
}

// rmsnorm(v) · w in place over this thread's elements d = threadIdx.x + e · kThreads < K (v[e] = 0 past K): the sum
// and the formula of rmsnorm_forward_regs_kernel (rmsnorm.cu), so the same bits.
__device__ __forceinline__ void norm_in_place(float (&v)[kNormE], const float* w, int64_t K, float eps, float* red) {
  float ss = 0.0f;
#pragma unroll
  for (int e = 0; e < kNormE; ++e) {
    if (threadIdx.x + static_cast<int64_t>(e) * kThreads < K) ss = fmaf(v[e], v[e], ss);
  }
  ss = cuda::block_sum<kThreads>(ss, red);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(K) + eps);
#pragma unroll
  for (int e = 0; e < kNormE; ++e) {
    const int64_t d = threadIdx.x + static_cast<int64_t>(e) * kThreads;
    if (d < K) v[e] = w[d] * (v[e] * inv);
  }
}

// Stages the M rows of x computed from the residual stream (gemv_cuda.h, GemvResidualNorm) into xs as bf16; block 0
// writes u to residual_out. Every thread of the block takes part (block sums).
template <int M>
__device__ __forceinline__ void stage_residual_norm(uint16_t* xs, const GemvResidualNorm& x, int64_t K) {
  __shared__ float red[kThreads / 32];
  for (int m = 0; m < M; ++m) {
    const int64_t row = static_cast<int64_t>(m) * K;
    float v[kNormE];
    if (x.delta != nullptr) {
#pragma unroll
      for (int e = 0; e < kNormE; ++e) {
        const int64_t d = threadIdx.x + static_cast<int64_t>(e) * kThreads;
        v[e] = d < K ? x.delta[row + d] : 0.0f;
      }
      if (x.delta_weight != nullptr) norm_in_place(v, x.delta_weight, K, x.eps, red);
      // u = residual + scale · branch: product and sum rounded separately (residual_add_forward_cuda)
#pragma unroll
      for (int e = 0; e < kNormE; ++e) {
        const int64_t d = threadIdx.x + static_cast<int64_t>(e) * kThreads;
        if (d < K) {
          v[e] = __fadd_rn(x.residual[row + d], __fmul_rn(x.scale, v[e]));
          if (blockIdx.x == 0) x.residual_out[row + d] = v[e];
        }
      }
    } else {
#pragma unroll
      for (int e = 0; e < kNormE; ++e) {
        const int64_t d = threadIdx.x + static_cast<int64_t>(e) * kThreads;
        v[e] = d < K ? x.residual[row + d] : 0.0f;
      }
    }
    if (x.weight != nullptr) norm_in_place(v, x.weight, K, x.eps, red);
#pragma unroll
    for (int e = 0; e < kNormE; ++e) {
      const int64_t d = threadIdx.x + static_cast<int64_t>(e) * kThreads;
      if (d < K) xs[row + d] = cuda::f32_to_bf16_bits(v[e]);
    }
  }
}

// The kernels' body. kNorm: x from the residual stream (`rn`), else x_f32 / x_bf16.
template <int M, bool kNorm>
__device__ __forceinline__ void gemv_body(const GemvGroup& g, const float* x_f32, const __nv_bfloat16* x_bf16,
                                          const GemvResidualNorm& rn, int64_t K) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* xs = reinterpret_cast<uint16_t*>(smem_raw);  // [M, K] bf16 bits
  const int lane = threadIdx.x % 32;
  const int64_t chunks = K / 8;  // 8 bf16 = 16 bytes
  const int64_t columns = g.first[g.outs];
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int64_t col_step = static_cast<int64_t>(gridDim.x) * kWarps;

  // The next kernel, if launched as a programmatic dependent (another GEMV), may start taking free SMs now.
  cuda::dependent_launch_trigger();
  // The warp's first weight loads go out before x is staged, so the staging's latency overlaps the stream; launched
  // as a programmatic dependent, they also overlap the end of the kernel that writes x (weights are not written
  // during inference: dependent_launch.cuh's contract), and x is read only after the wait.
  uint4 first[kUnroll];
  if (col0 < columns) {
    const int o = output_of(g, col0);
    load_round(first, reinterpret_cast<const uint4*>(g.w[o] + (col0 - g.first[o]) * K), lane, chunks);
  }
  cuda::dependent_launch_wait();

  const int64_t total = static_cast<int64_t>(M) * K;  // a multiple of 8
  if constexpr (kNorm) {
    stage_residual_norm<M>(xs, rn, K);
  } else if (x_bf16 != nullptr) {
    const uint4* src = reinterpret_cast<const uint4*>(x_bf16);
    if (reinterpret_cast<uintptr_t>(x_bf16) % 16 == 0) {
      for (int64_t i = threadIdx.x; i < total / 8; i += kThreads) reinterpret_cast<uint4*>(xs)[i] = src[i];
    } else {
      const uint16_t* s16 = reinterpret_cast<const uint16_t*>(x_bf16);
      for (int64_t i = threadIdx.x; i < total; i += kThreads) xs[i] = s16[i];
    }
  } else if (reinterpret_cast<uintptr_t>(x_f32) % 16 == 0) {
    const float4* src = reinterpret_cast<const float4*>(x_f32);
    for (int64_t i = threadIdx.x; i < total / 4; i += kThreads) {
      const float4 v = src[i];
      uint2 packed;
      packed.x = cuda::f32_to_bf16_bits(v.x) | (static_cast<uint32_t>(cuda::f32_to_bf16_bits(v.y)) << 16);
      packed.y = cuda::f32_to_bf16_bits(v.z) | (static_cast<uint32_t>(cuda::f32_to_bf16_bits(v.w)) << 16);
      reinterpret_cast<uint2*>(xs)[i] = packed;
    }
  } else {
    for (int64_t i = threadIdx.x; i < total; i += kThreads) xs[i] = cuda::f32_to_bf16_bits(x_f32[i]);
  }
  __syncthreads();

  bool prefetched = true;
  for (int64_t col = col0; col < columns; col += col_step) {
    const int o = output_of(g, col);
    const int64_t c_local = col - g.first[o];
    const uint4* wr = reinterpret_cast<const uint4*>(g.w[o] + c_local * K);
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.0f;
    for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
      uint4 wv[kUnroll];
      if (prefetched) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) wv[u] = first[u];
        prefetched = false;
      } else {
        load_round(wv, wr, c0, chunks);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * 32;
        if (c < chunks) {
          float wf[8];
          widen8(wf, wv[u]);
#pragma unroll
          for (int m = 0; m < M; ++m) dot8(acc[m], wf, reinterpret_cast<const uint4*>(xs + m * K)[c]);
        }
      }
    }
    prefetched = false;
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], offset);
    }
    if (lane == 0) {
      const float b = g.bias[o] != nullptr ? g.bias[o][c_local] : 0.0f;
#pragma unroll
      for (int m = 0; m < M; ++m) g.y[o][m * g.n[o] + c_local] = acc[m] + b;
    }
  }
}

template <int M>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvGroup g, const float* x_f32, const __nv_bfloat16* x_bf16,
                                                        int64_t K) {
  gemv_body<M, false>(g, x_f32, x_bf16, GemvResidualNorm{}, K);
}

// The staging's rows in registers would take the kernel from 58 to 80 registers (3 blocks per SM instead of the plain
// kernel's 4; ptxas, sm_90a, M = 1): this one asks for 4 blocks (at most 64 registers, a few bytes spilled).
template <int M>
__global__ void __launch_bounds__(kThreads, 4) gemv_norm_kernel(GemvGroup g, GemvResidualNorm rn, int64_t K) {
  gemv_body<M, true>(g, nullptr, nullptr, rn, K);
}

int sm_count() {
  int device = 0, count = 0;
  HLM_CUDA_CHECK(cudaGetDevice(&device));
  HLM_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return std::max(count, 1);
}

template <int M, bool kNorm>
void launch(const GemvGroup& g, const float* x_f32, const __nv_bfloat16* x_bf16, const GemvResidualNorm& rn, int64_t K,
            cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(M) * static_cast<size_t>(K) * sizeof(uint16_t);
  static const bool opted_in = [] {  // once per process: up to gemv_max_rows() · gemv_max_k() · 2 bytes
    const int most = static_cast<int>(M * gemv_max_k() * sizeof(uint16_t));
    if constexpr (kNorm)
      HLM_CUDA_CHECK(cudaFuncSetAttribute(gemv_norm_kernel<M>, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
    else
      HLM_CUDA_CHECK(cudaFuncSetAttribute(gemv_kernel<M>, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
    return true;
  }();
  (void)opted_in;
  static const int sms = sm_count();
  // Blocks resident per SM: 8 by threads (2048 / 256), fewer when x's copy is large (~227 KiB of shared memory).
  const int64_t per_sm = std::clamp<int64_t>(static_cast<int64_t>((227u << 10) / (smem + 1024)), 1, 8);
  const int64_t needed = (g.first[g.outs] + kWarps - 1) / kWarps;
  const unsigned blocks = static_cast<unsigned>(std::clamp<int64_t>(needed, 1, per_sm * sms));
  if constexpr (kNorm)
    HLM_CUDA_CHECK(cuda::launch_maybe_dependent(cuda::dependent_launch_enabled(), gemv_norm_kernel<M>, dim3(blocks),
                                                dim3(kThreads), smem, stream, g, rn, K));
  else
    HLM_CUDA_CHECK(cuda::launch_maybe_dependent(cuda::dependent_launch_enabled(), gemv_kernel<M>, dim3(blocks),
                                                dim3(kThreads), smem, stream, g, x_f32, x_bf16, K));
}

GemvGroup make_group(const GemvOutput* outs, int n_outs) {
  GemvGroup g{};
  g.outs = n_outs;
  g.first[0] = 0;
  for (int i = 0; i < n_outs; ++i) {
    g.w[i] = outs[i].w;
    g.bias[i] = outs[i].bias;
    g.y[i] = outs[i].y;
    g.n[i] = outs[i].n;
    g.first[i + 1] = g.first[i] + outs[i].n;
  }
  return g;
}

template <bool kNorm>
void launch_rows(const GemvGroup& g, const float* x_f32, const __nv_bfloat16* x_bf16, const GemvResidualNorm& rn,
                 int64_t M, int64_t K, cudaStream_t stream) {
  switch (M) {
    case 1: return launch<1, kNorm>(g, x_f32, x_bf16, rn, K, stream);
    case 2: return launch<2, kNorm>(g, x_f32, x_bf16, rn, K, stream);
    case 3: return launch<3, kNorm>(g, x_f32, x_bf16, rn, K, stream);
    default: return launch<4, kNorm>(g, x_f32, x_bf16, rn, K, stream);
  }
}

}  // namespace

bool gemv_supported(int64_t M, int64_t K, const GemvOutput* outs, int n_outs) {
  if (M < 1 || M > gemv_max_rows() || K < 8 || K % 8 != 0 || K > gemv_max_k()) return false;
  if (n_outs < 1 || n_outs > gemv_max_outputs()) return false;
  for (int i = 0; i < n_outs; ++i) {
    if (outs[i].w == nullptr || outs[i].y == nullptr || outs[i].n < 1) return false;
    if (reinterpret_cast<uintptr_t>(outs[i].w) % 16 != 0) return false;
  }
  return true;
}

void gemv_bf16_cuda(const GemvOutput* outs, int n_outs, const float* x_f32, const __nv_bfloat16* x_bf16, int64_t M,
                    int64_t K, cudaStream_t stream) {
  HLM_CHECK(gemv_supported(M, K, outs, n_outs), "gemv_bf16_cuda: unsupported shape M ", M, ", K ", K, ", ", n_outs,
            " outputs (gemv_supported)");
  HLM_CHECK(x_f32 != nullptr || x_bf16 != nullptr, "gemv_bf16_cuda: no input");
  launch_rows<false>(make_group(outs, n_outs), x_f32, x_bf16, GemvResidualNorm{}, M, K, stream);
}

bool gemv_residual_norm_supported(int64_t M, int64_t K, const GemvOutput* outs, int n_outs, const GemvResidualNorm& x) {
  if (!gemv_supported(M, K, outs, n_outs) || !gemv_residual_norm_k_supported(K) || x.residual == nullptr) return false;
  if (x.delta == nullptr) return x.delta_weight == nullptr;
  return x.residual_out != nullptr && x.residual_out != x.residual && x.residual_out != x.delta;
}

void gemv_bf16_residual_norm_cuda(const GemvOutput* outs, int n_outs, const GemvResidualNorm& x, int64_t M, int64_t K,
                                  cudaStream_t stream) {
  HLM_CHECK(gemv_residual_norm_supported(M, K, outs, n_outs, x), "gemv_bf16_residual_norm_cuda: unsupported M ", M,
            ", K ", K, " or input (gemv_residual_norm_supported)");
  launch_rows<true>(make_group(outs, n_outs), nullptr, nullptr, x, M, K, stream);
}

}  // namespace hlm
